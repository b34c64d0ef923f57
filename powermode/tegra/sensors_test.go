package tegra

import (
	"context"
	"math"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/tegra/tegratest"
)

func TestPowerRailsAndTotal(t *testing.T) {
	at := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	for _, name := range boardNames() {
		t.Run(name, func(t *testing.T) {
			b := tegratest.Boards()[name]
			root := writeTree(t, b)
			be, err := OpenWith(context.Background(), root, b.Spec(), powermode.BoardInfo{}, Options{Now: func() time.Time { return at }})
			if err != nil {
				t.Fatal(err)
			}
			r, err := be.Power(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !r.At.Equal(at) {
				t.Errorf("At = %v, want the injected clock's %v", r.At, at)
			}
			var want []string
			for _, s := range b.Sensors {
				for _, c := range s.Channels {
					if c.Label != "NC" {
						want = append(want, c.Label)
					}
				}
			}
			var got []string
			for _, rp := range r.Rails {
				got = append(got, rp.Name)
				if rp.VoltageMV <= 0 || rp.CurrentMA <= 0 || rp.PowerMW <= 0 {
					t.Errorf("rail %s: %+v, want positive readings", rp.Name, rp)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("rails = %v, want %v (no NC, no sum of shunt voltages)", got, want)
			}
			if math.Abs(r.TotalMW-b.ExpectedTotalMW()) > 1e-9 {
				t.Errorf("total = %v mW, want %v (rule %q)", r.TotalMW, b.ExpectedTotalMW(), b.PowerTotal)
			}
		})
	}
}

func TestPowerTotalRule(t *testing.T) {
	// The same Orin Nano tree totalled two ways: VDD_IN is the board's input; summing
	// would count its children twice.
	b := tegratest.OrinNano8GB()
	root := writeTree(t, b)
	for _, c := range []struct {
		total   string
		wantMW  float64
		wantErr string
	}{
		{"VDD_IN", 5000 * 1420 / 1000.0, ""},
		{"sum", 5000 * (1420 + 380 + 290) / 1000.0, ""},
		{"POM_5V_IN", 0, `rail "POM_5V_IN"`},
	} {
		spec := b.Spec()
		spec.Power.Total = c.total
		be := openTree(t, root, tegratest.Board{}, nil)
		be.spec = spec
		r, err := be.Power(context.Background())
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("total %q: err = %v, want %q", c.total, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(r.TotalMW-c.wantMW) > 1e-9 {
			t.Errorf("total %q = %v mW, want %v", c.total, r.TotalMW, c.wantMW)
		}
	}
}

func TestPowerGarbageSensorNamesFile(t *testing.T) {
	for _, c := range []struct {
		board tegratest.Board
		file  string
	}{
		{tegratest.AGXOrin64GBJP6(), "/sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon3/curr2_input"},
		{tegratest.AGXXavier(), "/sys/bus/i2c/drivers/ina3221x/1-0041/iio:device1/in_power1_input"},
	} {
		root := writeTree(t, c.board)
		if err := os.WriteFile(hostPath(root, c.file), []byte("12a4\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		be := openTree(t, root, c.board, nil)
		_, err := be.Power(context.Background())
		if err == nil || !strings.Contains(err.Error(), c.file) || !strings.Contains(err.Error(), `"12a4"`) {
			t.Errorf("%s: err = %v, want it to name %s and its contents", c.board.Name, err, c.file)
		}
	}
}

func TestPowerMissingSensors(t *testing.T) {
	b := tegratest.AGXOrin64GBJP5()
	root := writeTree(t, b)
	if err := os.RemoveAll(hostPath(root, "/sys/bus/i2c")); err != nil {
		t.Fatal(err)
	}
	be := openTree(t, root, b, nil) // power is not needed to open the board
	if _, err := be.Power(context.Background()); err == nil || !strings.Contains(err.Error(), "/sys/bus/i2c/drivers/ina3221") {
		t.Errorf("err = %v, want it to name the ina3221 driver directory", err)
	}
}

// eagainFS fails reads of one file with EAGAIN, as the cv* thermal zones do.
type eagainFS struct {
	OSFS
	path string
}

func (e eagainFS) ReadFile(p string) ([]byte, error) {
	if p == e.path {
		return nil, &os.PathError{Op: "read", Path: p, Err: syscall.EAGAIN}
	}
	return e.OSFS.ReadFile(p)
}

func TestThermalZones(t *testing.T) {
	b := tegratest.AGXOrin64GBJP6()
	root := writeTree(t, b)
	// thermal_zone2 is cv0-thermal; zone 10 sorts after zone 9 by number, not by name.
	if err := os.MkdirAll(hostPath(root, "/sys/class/thermal/thermal_zone10"), 0o755); err != nil {
		t.Fatal(err)
	}
	for f, v := range map[string]string{"type": "extra-thermal\n", "temp": "-1500\n"} {
		if err := os.WriteFile(hostPath(root, "/sys/class/thermal/thermal_zone10/"+f), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	be := openTree(t, root, b, eagainFS{OSFS: OSFS{Root: root}, path: "/sys/class/thermal/thermal_zone2/temp"})
	zs, err := be.Thermal(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(zs) != len(b.ThermalZones)+1 {
		t.Fatalf("%d zones, want %d", len(zs), len(b.ThermalZones)+1)
	}
	for i, z := range zs[:len(b.ThermalZones)] {
		if z.Zone != b.ThermalZones[i] {
			t.Errorf("zone %d = %q, want %q", i, z.Zone, b.ThermalZones[i])
		}
		if i == 2 {
			if !strings.Contains(z.Err, "resource temporarily unavailable") || z.Celsius != 0 {
				t.Errorf("cv0 zone = %+v, want an EAGAIN error and no temperature", z)
			}
			continue
		}
		if want := 40 + 0.5*float64(i); z.Err != "" || z.Celsius != want {
			t.Errorf("zone %s = %+v, want %v °C", z.Zone, z, want)
		}
	}
	if last := zs[len(zs)-1]; last.Zone != "extra-thermal" || last.Celsius != -1.5 {
		t.Errorf("zone 10 = %+v, want extra-thermal at -1.5 °C", last)
	}
}

func TestOpenMissingPieceNamesPathAndFix(t *testing.T) {
	for _, c := range []struct {
		name   string
		remove string
		want   []string
	}{
		{"no debugfs", "/sys/kernel/debug", []string{"/sys/kernel/debug/bpmp/debug/clk/emc/rate", "debugfs mounted", "root"}},
		{"no emc table", "/sys/kernel/debug/bpmp/debug/emc/possible_rates", []string{"/sys/kernel/debug/bpmp/debug/emc/possible_rates", "debugfs"}},
		{"no devfreq", "/sys/class/devfreq", []string{"/sys/class/devfreq", "of_node/name", "nvgpu"}},
		{"no cpufreq", "/sys/devices/system/cpu/cpufreq", []string{"/sys/devices/system/cpu/cpufreq", "cpufreq driver"}},
		{"no cpu table", "/sys/devices/system/cpu/cpufreq/policy0/scaling_available_frequencies", []string{"policy0/scaling_available_frequencies"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := tegratest.AGXOrin64GBJP5()
			root := writeTree(t, b)
			if err := os.RemoveAll(hostPath(root, c.remove)); err != nil {
				t.Fatal(err)
			}
			spec := b.Spec()
			spec.GPU.Paths = nil
			_, err := OpenWith(context.Background(), root, spec, powermode.BoardInfo{}, Options{})
			if err == nil {
				t.Fatal("Open succeeded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v, want it to mention %q", err, w)
				}
			}
		})
	}
}

func TestOpenFindsGPUThroughCatalogPathWithoutDevfreqClass(t *testing.T) {
	b := tegratest.AGXOrin64GBJP5()
	root := writeTree(t, b)
	if err := os.RemoveAll(hostPath(root, "/sys/class/devfreq")); err != nil {
		t.Fatal(err)
	}
	spec := b.Spec()
	spec.GPU.Paths = map[string]string{"jp5": b.GPUDevice}
	be, err := OpenWith(context.Background(), root, spec, powermode.BoardInfo{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := b.GPUDevice + "/devfreq/" + path.Base(b.GPUDevice); be.gpu.Dir != want {
		t.Errorf("gpu dir = %s, want %s", be.gpu.Dir, want)
	}
}

func TestRealpathStaysUnderRoot(t *testing.T) {
	root := t.TempDir()
	// An absolute link in a hand-made tree means "under the root", and ".." cannot
	// climb out of it.
	if err := os.MkdirAll(hostPath(root, "/sys/devices/gpu/devfreq/gpu"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(hostPath(root, "/sys/class/devfreq"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/sys/devices/gpu/devfreq/gpu", hostPath(root, "/sys/class/devfreq/abs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../../../../../sys/devices/gpu", hostPath(root, "/sys/class/devfreq/up")); err != nil {
		t.Fatal(err)
	}
	tr := tree{root: root, fs: OSFS{Root: root}}
	for link, want := range map[string]string{
		"/sys/class/devfreq/abs":        "/sys/devices/gpu/devfreq/gpu",
		"/sys/class/devfreq/up/devfreq": "/sys/devices/gpu/devfreq",
	} {
		got, err := tr.realpath(link)
		if err != nil || got != want {
			t.Errorf("realpath(%s) = %q, %v; want %q", link, got, err, want)
		}
	}
}
