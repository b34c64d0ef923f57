package sim

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/configs"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/faketree"
)

func spec(t testing.TB, name string) *powermode.BoardSpec {
	t.Helper()
	c, err := powermode.LoadCatalog(configs.FS, "boards")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Board(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newBoard(t testing.TB, name string, opts Options) *Board {
	t.Helper()
	b, err := New(filepath.Join(t.TempDir(), "board"), spec(t, name), opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readInt(t testing.TB, b *Board, abs string) int64 {
	t.Helper()
	s, err := b.Tree().ReadFile(abs)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", abs, err)
	}
	return v
}

func write(t testing.TB, b *Board, abs, v string) {
	t.Helper()
	if err := os.WriteFile(b.Tree().Path(abs), []byte(v+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// railsMW reads every connected INA3221 channel back from the hwmon files, as a
// reader of a real board would (mV × mA / 1000), and the NC channels' currents.
func railsMW(t testing.TB, b *Board) (byLabel map[string]float64, ncMA float64) {
	t.Helper()
	byLabel = map[string]float64{}
	matches, _ := filepath.Glob(b.Tree().Path("/sys/bus/i2c/drivers/ina3221/*/hwmon/hwmon*"))
	if len(matches) == 0 {
		t.Fatal("no ina3221 hwmon directories")
	}
	for _, dir := range matches {
		for c := 1; c <= 3; c++ {
			label, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("in%d_label", c)))
			if err != nil {
				continue
			}
			num := func(f string) float64 {
				raw, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				v, err := strconv.ParseFloat(strings.TrimSpace(string(raw)), 64)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			mv, ma := num(fmt.Sprintf("in%d_input", c)), num(fmt.Sprintf("curr%d_input", c))
			if l := strings.TrimSpace(string(label)); l == "NC" {
				ncMA += ma
			} else {
				byLabel[l] = mv * ma / 1000
			}
		}
	}
	return byLabel, ncMA
}

func sum(m map[string]float64) float64 {
	s := 0.0
	for _, v := range m {
		s += v
	}
	return s
}

func TestStepIdleAndBusy(t *testing.T) {
	b := newBoard(t, "agx-orin-64gb", Options{})
	sp := b.paths.spec
	maxn := sp.PresetMode(sp.NVP.Presets[0])

	// Idle after boot: schedutil/podgov sit at their minimum clocks.
	res, err := b.Step(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rails, nc := railsMW(t, b)
	if nc != 0 {
		t.Errorf("NC channels carry %v mA", nc)
	}
	if got := sum(rails); math.Abs(got-res.TotalMW) > 0.01*res.TotalMW {
		t.Errorf("idle rails sum to %.0f mW, model says %.0f", got, res.TotalMW)
	}
	if res.TotalMW < 6000 || res.TotalMW > 10500 {
		t.Errorf("idle board %.0f mW, want ~7–10 W", res.TotalMW)
	}
	if f := readInt(t, b, b.paths.gpuDevfreq+"/cur_freq"); f != sp.GPU.FreqsHz[0] {
		t.Errorf("idle GPU cur_freq %d, want min %d", f, sp.GPU.FreqsHz[0])
	}
	if l := readInt(t, b, b.paths.gpuDev+"/load"); l != 0 {
		t.Errorf("idle GPU load %d", l)
	}

	// A registered minibatch makes the board busy at the scaling maxima (pinned at the
	// top: the board boots in its default nvpmodel preset).
	pinTop(t, b)
	w := b.opts.Workloads["resnet18-train"]
	file, err := registerActivity(b.Root(), Activity{Workload: w.Name, Role: "train", Batch: 32, PID: os.Getpid(), StartedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	res, err = b.Step(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != maxn {
		t.Errorf("busy mode %s, want %s", res.Mode, maxn)
	}
	want := w.PowerMW(sp, maxn, 32)
	rails, _ = railsMW(t, b)
	if got := sum(rails); math.Abs(got-want) > 0.01*want {
		t.Errorf("busy rails sum %.0f mW, model %.0f", got, want)
	}
	if rails["VDD_GPU_SOC"] < rails["VIN_SYS_5V0"] || rails["VDD_GPU_SOC"] < rails["VDD_CPU_CV"] {
		t.Errorf("GPU-heavy training should load VDD_GPU_SOC most: %v", rails)
	}
	if f := readInt(t, b, "/sys/devices/system/cpu/cpufreq/policy8/scaling_cur_freq"); f != maxn.CPUKHz {
		t.Errorf("busy cpu cur_freq %d", f)
	}
	if l := readInt(t, b, b.paths.gpuDev+"/load"); l < 900 || l > 1000 {
		t.Errorf("busy GPU load %d, want ≈ 1000", l)
	}

	// The backend writes a MODE_15W-like mode into the tree: 4 cores, capped clocks,
	// EMC locked at 2133 MHz. The next step follows it.
	m15 := sp.PresetMode(sp.NVP.Presets[1])
	for c := 4; c < 12; c++ {
		write(t, b, fmt.Sprintf("/sys/devices/system/cpu/cpu%d/online", c), "0")
	}
	for _, p := range []int{0, 4, 8} {
		write(t, b, fmt.Sprintf("/sys/devices/system/cpu/cpufreq/policy%d/scaling_max_freq", p), strconv.FormatInt(m15.CPUKHz, 10))
	}
	write(t, b, b.paths.gpuDevfreq+"/min_freq", strconv.FormatInt(m15.GPUHz, 10))
	write(t, b, b.paths.gpuDevfreq+"/max_freq", strconv.FormatInt(m15.GPUHz, 10))
	write(t, b, emcClkDir+"/mrq_rate_locked", "1")
	write(t, b, emcClkDir+"/rate", "2000000000") // off-table: the BPMP rounds up
	res, err = b.Step(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != m15 {
		t.Errorf("mode after writes %s, want %s", res.Mode, m15)
	}
	if s, _ := b.Tree().ReadFile("/sys/devices/system/cpu/online"); s != "0-3\n" {
		t.Errorf("online list %q, want 0-3", s)
	}
	if s, _ := b.Tree().ReadFile("/sys/devices/system/cpu/offline"); s != "4-11\n" {
		t.Errorf("offline list %q, want 4-11", s)
	}
	rails, _ = railsMW(t, b)
	if got, want := sum(rails), w.PowerMW(sp, m15, 32); math.Abs(got-want) > 0.01*want {
		t.Errorf("MODE_15W rails sum %.0f mW, model %.0f", got, want)
	}
	if f := readInt(t, b, b.paths.gpuDevfreq+"/cur_freq"); f != m15.GPUHz {
		t.Errorf("GPU cur_freq %d, want %d", f, m15.GPUHz)
	}

	// Done: back to idle, at the new (pinned) clocks.
	os.Remove(file)
	res, err = b.Step(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Active) != 0 || res.Mode.GPUHz != m15.GPUHz {
		t.Errorf("after the minibatch: %d active, mode %s", len(res.Active), res.Mode)
	}
}

func TestStaleActivityIsDropped(t *testing.T) {
	b := newBoard(t, "agx-orin-64gb", Options{})
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	file, err := registerActivity(b.Root(), Activity{Workload: "resnet18-train", Role: "train", Batch: 32, PID: dead})
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Step(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Active) != 0 {
		t.Errorf("activity of exited pid %d counted", dead)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("stale activity file left: %v", err)
	}
}

func TestThermalFollowsPower(t *testing.T) {
	b := newBoard(t, "agx-orin-64gb", Options{ThermalTau: time.Second})
	now := time.Now()
	if _, err := b.Step(now); err != nil {
		t.Fatal(err)
	}
	gpuZone := "/sys/class/thermal/thermal_zone1/temp" // gpu-thermal on this board
	idle := readInt(t, b, gpuZone)
	pinTop(t, b) // MAXN-like: every knob at its top
	if _, err := registerActivity(b.Root(), Activity{Workload: "resnet18-train", Role: "train", Batch: 32, PID: os.Getpid()}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 20; i++ {
		if _, err := b.Step(now.Add(time.Duration(i) * 500 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	hot := readInt(t, b, gpuZone)
	if hot < idle+10000 || hot > 100000 {
		t.Errorf("gpu-thermal %d m°C after 10 s of training at MAXN (idle %d): want a rise of >10 °C, below 100 °C", hot, idle)
	}
}

func TestRailPowersConserveTotal(t *testing.T) {
	p := PowerBreakdown{SysMW: 4000, SoCMW: 1500, CPUMW: 3000, GPUMW: 9000, DRAMMW: 700}
	for _, name := range []string{"agx-orin-64gb", "agx-xavier"} {
		sp := spec(t, name)
		r := RailPowers(sp, p)
		if got := sum(r); math.Abs(got-p.TotalMW()) > 1e-6 {
			t.Errorf("%s: rails %v sum to %v, want %v", name, r, got, p.TotalMW())
		}
		for l, v := range r {
			if v <= 0 {
				t.Errorf("%s: rail %s reads %v mW", name, l, v)
			}
		}
	}
	// A board whose total is one rail (VDD_IN): that rail is the total, and its
	// children do not add up to more than it.
	nano := &powermode.BoardSpec{Power: powermode.PowerSpec{Total: "VDD_IN", Sensors: []powermode.SensorSpec{{Addr: "1-0040", Channels: []powermode.ChannelSpec{
		{Channel: 1, Label: "VDD_IN"}, {Channel: 2, Label: "VDD_CPU_GPU_CV"}, {Channel: 3, Label: "VDD_SOC"}}}}}}
	r := RailPowers(nano, p)
	if r["VDD_IN"] != p.TotalMW() || r["VDD_CPU_GPU_CV"] != p.CPUMW+p.GPUMW || r["VDD_SOC"] != p.SoCMW {
		t.Errorf("VDD_IN board rails %v", r)
	}
}

func TestNewRefusesForeignDirectories(t *testing.T) {
	orin, xavier := spec(t, "agx-orin-64gb"), spec(t, "agx-xavier")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(dir, orin, Options{}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("non-empty foreign dir: err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "notes.txt")); err != nil {
		t.Errorf("foreign file touched: %v", err)
	}

	sim := filepath.Join(t.TempDir(), "sim")
	if _, err := New(sim, orin, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(sim, xavier, Options{}); err == nil || !strings.Contains(err.Error(), "agx-orin-64gb") {
		t.Errorf("other board over an Orin tree: err = %v", err)
	}
	// The same board again rebuilds the tree from scratch.
	if err := os.WriteFile(filepath.Join(sim, "sys/devices/system/cpu/cpu5/online"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := New(sim, orin, Options{})
	if err != nil {
		t.Fatalf("rebuild over a previous tree of the same board: %v", err)
	}
	if s, _ := b.Tree().ReadFile("/sys/devices/system/cpu/cpu5/online"); s != "1\n" {
		t.Errorf("rebuilt tree kept old state: cpu5/online = %q", s)
	}
}

func TestRunLoopFollowsWrites(t *testing.T) {
	b := newBoard(t, "agx-orin-64gb", Options{Interval: 5 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	target := int64(612000000)
	write(t, b, b.paths.gpuDevfreq+"/max_freq", strconv.FormatInt(target, 10))
	write(t, b, b.paths.gpuDevfreq+"/min_freq", strconv.FormatInt(target, 10))
	deadline := time.Now().Add(10 * time.Second)
	for readInt(t, b, b.paths.gpuDevfreq+"/cur_freq") != target {
		if time.Now().After(deadline) {
			t.Fatal("the physics loop never updated GPU cur_freq after a write")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v after cancel, want nil", err)
	}
	raw, _ := b.Tree().ReadFile(markerPath)
	if !strings.Contains(raw, `"pid":0`) {
		t.Errorf("marker after a clean stop: %s", raw)
	}
}

func TestEveryCatalogBoardSimulates(t *testing.T) {
	c, err := powermode.LoadCatalog(configs.FS, "boards")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range c.Names() {
		sp, _ := c.Board(name)
		// The newest layout of each board; faketree's tests cover every layout.
		layouts := faketree.Layouts(sp)
		for _, layout := range layouts[len(layouts)-1:] {
			t.Run(name+"/"+layout, func(t *testing.T) {
				b, err := New(filepath.Join(t.TempDir(), "b"), sp, Options{Layout: layout})
				if err != nil {
					t.Fatal(err)
				}
				idle, err := b.Step(time.Now())
				if err != nil {
					t.Fatal(err)
				}
				pinTop(t, b)
				w := b.opts.Workloads["resnet18-train"]
				if _, err := registerActivity(b.Root(), Activity{Workload: w.Name, Role: "train", Batch: 32, PID: os.Getpid()}); err != nil {
					t.Fatal(err)
				}
				busy, err := b.Step(time.Now())
				if err != nil {
					t.Fatal(err)
				}
				top := sp.PresetMode(powermode.PresetSpec{})
				if busy.Mode != top {
					t.Errorf("busy mode %s, want the board's top %s", busy.Mode, top)
				}
				if want := w.PowerMW(sp, top, 32); math.Abs(busy.TotalMW-want) > 1e-6*want {
					t.Errorf("busy %0.f mW, model %.0f", busy.TotalMW, want)
				}
				// 1.5×: the smallest modules (Orin Nano 4GB, 10 W at most) idle near half
				// their top; every board must still rise clearly under training.
				if busy.TotalMW < idle.TotalMW*1.5 {
					t.Errorf("training at the top mode %.0f mW, idle %.0f mW: want a clear rise", busy.TotalMW, idle.TotalMW)
				}
				t.Logf("%s: idle %.1f W, resnet18 at top %.1f W, %.0f ms", name, idle.TotalMW/1000, busy.TotalMW/1000, w.TimeMS(sp, top, 32))
			})
		}
	}
}

// pinTop writes what jetson_clocks writes: every core online, each CPU policy and the GPU
// at their top frequency, the EMC locked at its top rate (the board boots in its default
// nvpmodel preset, not there).
func pinTop(t *testing.T, b *Board) {
	t.Helper()
	sp := b.Tree().Spec()
	tr := b.Tree()
	w := func(abs string, v int64) {
		if err := tr.WriteFile(abs, strconv.FormatInt(v, 10)+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	for cpu := 1; cpu < sp.CPU.Cores; cpu++ {
		w(fmt.Sprintf("/sys/devices/system/cpu/cpu%d/online", cpu), 1)
	}
	for _, cl := range sp.CPU.Clusters {
		p := fmt.Sprintf("/sys/devices/system/cpu/cpufreq/policy%d/", cl.Policy)
		w(p+"scaling_max_freq", slices.Max(sp.CPU.FreqsKHz))
		w(p+"scaling_min_freq", slices.Max(sp.CPU.FreqsKHz))
	}
	w(tr.GPUDevfreq()+"/max_freq", slices.Max(sp.GPU.FreqsHz))
	w(tr.GPUDevfreq()+"/min_freq", slices.Max(sp.GPU.FreqsHz))
	w("/sys/kernel/debug/bpmp/debug/clk/emc/mrq_rate_locked", 1)
	w("/sys/kernel/debug/bpmp/debug/clk/emc/rate", slices.Max(sp.EMC.RatesHz))
}
