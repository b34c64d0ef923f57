package faketree_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/faketree"
)

func build(t *testing.T, spec *powermode.BoardSpec, opts faketree.Options) *faketree.Tree {
	t.Helper()
	tr, err := faketree.Build(t.TempDir(), spec, opts)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func read(t *testing.T, tr *faketree.Tree, abs string) string {
	t.Helper()
	s, err := tr.ReadFile(abs)
	if err != nil {
		t.Fatalf("read %s: %v", abs, err)
	}
	return s
}

func spaced(vals []int64, trailing bool) string {
	var s []string
	for _, v := range vals {
		s = append(s, strconv.FormatInt(v, 10))
	}
	out := strings.Join(s, " ")
	if trailing {
		out += " "
	}
	return out + "\n"
}

// gpuNodeNames are the of_node names GPU discovery accepts (jetson-stats' list).
var gpuNodeNames = []string{"gv11b", "gp10b", "ga10b", "gpu"}

// discoverGPU finds the GPU the way jetson-stats does: every /sys/class/devfreq entry
// whose device/of_node/name is a GPU node name.
func discoverGPU(t *testing.T, tr *faketree.Tree) (devfreqDir, node string) {
	t.Helper()
	entries, err := os.ReadDir(tr.Path("/sys/class/devfreq"))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, e := range entries {
		p := filepath.Join(tr.Path("/sys/class/devfreq"), e.Name())
		raw, err := os.ReadFile(filepath.Join(p, "device", "of_node", "name"))
		if err != nil {
			t.Fatalf("devfreq %s: %v", e.Name(), err)
		}
		name := strings.TrimRight(string(raw), "\x00")
		if slices.Contains(gpuNodeNames, name) {
			real, err := filepath.EvalSymlinks(p)
			if err != nil {
				t.Fatal(err)
			}
			found = append(found, real)
			node = name
		}
	}
	if len(entries) < 3 || len(found) != 1 {
		t.Fatalf("devfreq entries %d, GPU matches %v: want the GPU among decoys", len(entries), found)
	}
	return found[0], node
}

func TestBuildEveryBoardAndLayout(t *testing.T) {
	c := testboard.Catalog(t)
	for _, name := range c.Names() {
		spec, _ := c.Board(name)
		layouts := faketree.Layouts(spec)
		if len(layouts) == 0 {
			t.Errorf("%s: no layouts", name)
		}
		for _, layout := range layouts {
			t.Run(name+"/"+layout, func(t *testing.T) {
				tr := build(t, spec, faketree.Options{Layout: layout})
				if tr.Layout() != layout {
					t.Errorf("layout %s, want %s", tr.Layout(), layout)
				}
				checkTree(t, tr, spec)
			})
		}
	}
}

// checkTree asserts the formats every board's tree must have.
func checkTree(t *testing.T, tr *faketree.Tree, spec *powermode.BoardSpec) {
	t.Helper()
	if got := read(t, tr, "/proc/device-tree/model"); got != spec.Model+"\x00" {
		t.Errorf("model = %q", got)
	}
	compat := read(t, tr, "/proc/device-tree/compatible")
	if !strings.HasSuffix(compat, "\x00") || !slices.Equal(strings.Split(strings.TrimSuffix(compat, "\x00"), "\x00"), spec.Compatible) {
		t.Errorf("compatible = %q, want %q NUL-separated and NUL-terminated", compat, spec.Compatible)
	}
	rel := read(t, tr, "/etc/nv_tegra_release")
	major, rev, _ := strings.Cut(strings.TrimPrefix(tr.L4T(), "R"), ".")
	if want := "# R" + major + " (release), REVISION: " + rev + ", GCID: "; !strings.HasPrefix(rel, want) {
		t.Errorf("nv_tegra_release = %q, want prefix %q", rel, want)
	}
	// The tree boots in the default nvpmodel mode the status file names: that preset's
	// cores online, its caps as the scaling limits (not every knob at its maximum).
	var def powermode.PresetSpec
	for _, p := range spec.NVP.Presets {
		if p.ID == spec.NVP.Default {
			def = p
		}
	}
	space, err := spec.Space()
	if err != nil {
		t.Fatal(err)
	}
	boot := space.Snap(spec.PresetMode(def))
	all := fmt.Sprintf("0-%d\n", spec.CPU.Cores-1)
	for _, f := range []string{"online", "present", "possible"} {
		want := all
		if f == "online" {
			want = faketree.RangeList(seq(boot.Cores)) + "\n"
		}
		if got := read(t, tr, "/sys/devices/system/cpu/"+f); got != want {
			t.Errorf("cpu/%s = %q, want %q", f, got, want)
		}
	}
	if _, err := os.Stat(tr.Path("/sys/devices/system/cpu/cpu0/online")); !os.IsNotExist(err) {
		t.Errorf("cpu0/online: want no such file, got %v", err)
	}
	for cpu := 1; cpu < spec.CPU.Cores; cpu++ {
		want := "1\n"
		if cpu >= boot.Cores {
			want = "0\n"
		}
		if got := read(t, tr, fmt.Sprintf("/sys/devices/system/cpu/cpu%d/online", cpu)); got != want {
			t.Errorf("cpu%d/online = %q, want %q", cpu, got, want)
		}
	}
	freqs := spaced(spec.CPU.FreqsKHz, true)
	for _, cl := range spec.CPU.Clusters {
		for _, cpu := range cl.CPUs {
			// Through the cpuN/cpufreq link, as readers go.
			d := fmt.Sprintf("/sys/devices/system/cpu/cpu%d/cpufreq/", cpu)
			if got := read(t, tr, d+"scaling_available_frequencies"); got != freqs {
				t.Errorf("%s available = %q, want %q", d, got, freqs)
			}
			target, err := os.Readlink(tr.Path(fmt.Sprintf("/sys/devices/system/cpu/cpu%d/cpufreq", cpu)))
			if want := fmt.Sprintf("../cpufreq/policy%d", cl.Policy); err != nil || target != want {
				t.Errorf("cpu%d/cpufreq -> %q (%v), want %q", cpu, target, err, want)
			}
		}
		p := fmt.Sprintf("/sys/devices/system/cpu/cpufreq/policy%d/", cl.Policy)
		var cpus, online []string
		for _, c := range cl.CPUs {
			cpus = append(cpus, strconv.Itoa(c))
			if c < boot.Cores {
				online = append(online, strconv.Itoa(c))
			}
		}
		// An inactive policy (every CPU offline) keeps its hardware range: nvpmodel
		// cannot write its cap there.
		clusterMax := boot.CPUKHz
		if len(online) == 0 {
			clusterMax = slices.Max(spec.CPU.FreqsKHz)
		}
		want := map[string]string{
			"scaling_min_freq":            spaced(spec.CPU.FreqsKHz[:1], false),
			"scaling_max_freq":            spaced([]int64{clusterMax}, false),
			"cpuinfo_max_freq":            spaced([]int64{slices.Max(spec.CPU.FreqsKHz)}, false),
			"scaling_governor":            "schedutil\n",
			"related_cpus":                strings.Join(cpus, " ") + "\n",
			"affected_cpus":               strings.Join(online, " ") + "\n",
			"scaling_available_governors": "interactive conservative ondemand userspace powersave performance schedutil \n",
		}
		for f, w := range want {
			if got := read(t, tr, p+f); got != w {
				t.Errorf("%s%s = %q, want %q", p, f, got, w)
			}
		}
	}
	df, node := discoverGPU(t, tr)
	if df != tr.Path(tr.GPUDevfreq()) {
		t.Errorf("discovered %s, want %s", df, tr.Path(tr.GPUDevfreq()))
	}
	if want := strings.SplitN(filepath.Base(tr.GPUDevice()), ".", 2)[1]; node != want {
		t.Errorf("GPU of_node name %q, want %q", node, want)
	}
	gpu := map[string]string{
		"available_frequencies": spaced(spec.GPU.FreqsHz, false),
		"min_freq":              spaced(spec.GPU.FreqsHz[:1], false),
		"max_freq":              spaced([]int64{boot.GPUHz}, false),
		"governor":              "nvhost_podgov\n",
	}
	for f, w := range gpu {
		if got := read(t, tr, tr.GPUDevfreq()+"/"+f); got != w {
			t.Errorf("gpu %s = %q, want %q", f, got, w)
		}
	}
	if got := read(t, tr, tr.GPUDevice()+"/load"); got != "0\n" {
		t.Errorf("gpu load = %q", got)
	}
	var khz []string
	for _, r := range spec.EMC.RatesHz {
		khz = append(khz, strconv.FormatInt(r/1000, 10))
	}
	if got, want := read(t, tr, "/sys/kernel/debug/bpmp/debug/emc/possible_rates"), strings.Join(khz, " ")+" (kHz)\n"; got != want {
		t.Errorf("possible_rates = %q, want %q", got, want)
	}
	if got := read(t, tr, "/sys/kernel/debug/bpmp/debug/clk/emc/mrq_rate_locked"); got != "0\n" {
		t.Errorf("mrq_rate_locked = %q", got)
	}
	if got, want := read(t, tr, tr.EMCCapPath()), strconv.FormatInt(def.EMCMaxHz, 10)+"\n"; got != want {
		t.Errorf("emc cap = %q, want %q (the default preset's)", got, want)
	}
	for i, z := range spec.Thermal {
		if got := read(t, tr, fmt.Sprintf("/sys/class/thermal/thermal_zone%d/type", i)); got != z+"\n" {
			t.Errorf("thermal_zone%d/type = %q, want %q", i, got, z)
		}
	}
	conf := read(t, tr, "/etc/nvpmodel.conf")
	if !strings.Contains(conf, fmt.Sprintf("< PM_CONFIG DEFAULT=%d >", spec.NVP.Default)) {
		t.Errorf("nvpmodel.conf lacks PM_CONFIG: %q", conf)
	}
	if got, want := read(t, tr, "/var/lib/nvpmodel/status"), fmt.Sprintf("pmode:%04d\n", spec.NVP.Default); got != want {
		t.Errorf("status = %q, want %q", got, want)
	}
	// Every rail readable through the driver's path, and every symlink resolves.
	for _, s := range spec.Power.Sensors {
		drv := "ina3221"
		if spec.Power.Driver == "iio" {
			drv = "ina3221x"
		}
		if _, err := os.Stat(tr.Path("/sys/bus/i2c/drivers/" + drv + "/" + s.Addr)); err != nil {
			t.Errorf("sensor %s: %v", s.Addr, err)
		}
	}
	d, err := tr.Digest()
	if err != nil {
		t.Fatal(err)
	}
	for p, v := range d {
		if strings.HasPrefix(v, "link ") {
			if _, err := os.Stat(tr.Path(p)); err != nil {
				t.Errorf("dangling link %s (%s): %v", p, v, err)
			}
		}
	}
}

func TestAGXOrinExactFiles(t *testing.T) {
	spec := testboard.Spec(t, testboard.AGXOrin)
	for _, tc := range []struct {
		layout, gpuDev, node, bus, release string
	}{
		{"jp6", "/sys/devices/platform/bus@0/17000000.gpu", "gpu", "../../../../devices/platform/bus@0/c240000.i2c/i2c-1/1-0040",
			"# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed Jan  8 01:49:37 UTC 2025\n"},
		{"jp5", "/sys/devices/17000000.ga10b", "ga10b", "../../../../devices/c240000.i2c/i2c-1/1-0040",
			"# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, DATE: Tue Aug  1 19:57:35 UTC 2023\n"},
	} {
		t.Run(tc.layout, func(t *testing.T) {
			tr := build(t, spec, faketree.Options{Layout: tc.layout})
			exact := map[string]string{
				"/proc/device-tree/model":      "NVIDIA Jetson AGX Orin Developer Kit\x00",
				"/proc/device-tree/compatible": "nvidia,p3737-0000+p3701-0005\x00nvidia,p3701-0005\x00nvidia,tegra234\x00",
				"/sys/devices/system/cpu/cpufreq/policy4/scaling_available_frequencies":       "115200 192000 268800 345600 422400 499200 576000 652800 729600 806400 883200 960000 1036800 1113600 1190400 1267200 1344000 1420800 1497600 1574400 1651200 1728000 1804800 1881600 1958400 2035200 2112000 2188800 2201600 \n",
				"/sys/devices/system/cpu/cpufreq/policy8/related_cpus":                        "8 9 10 11\n",
				"/sys/devices/system/cpu/online":                                              "0-7\n", // MODE_30W: 8 cores
				tc.gpuDev + "/devfreq/" + filepath.Base(tc.gpuDev) + "/available_frequencies": "306000000 408000000 510000000 612000000 714000000 816000000 918000000 1020000000 1122000000 1224000000 1300500000\n",
				"/sys/class/devfreq/" + filepath.Base(tc.gpuDev) + "/device/of_node/name":     tc.node + "\x00",
				"/sys/kernel/debug/bpmp/debug/emc/possible_rates":                             "204000 665600 2133000 3199000 (kHz)\n",
				"/sys/kernel/debug/bpmp/debug/clk/emc/rate":                                   "3199000000\n",
				"/sys/kernel/debug/bpmp/debug/clk/emc/max_rate":                               "3199000000\n",
				"/sys/kernel/debug/bpmp/debug/clk/emc/min_rate":                               "204000000\n",
				"/var/lib/nvpmodel/status":                                                    "pmode:0002\n",
				"/sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon1/in1_label":                  "VDD_GPU_SOC\n",
				"/sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon1/in7_label":                  "sum of shunt voltages\n",
				"/sys/bus/i2c/drivers/ina3221/1-0041/hwmon/hwmon4/name":                       "ina3221\n",
				"/sys/bus/i2c/drivers/ina3221/1-0041/hwmon/hwmon4/in1_label":                  "NC\n",
				"/sys/bus/i2c/drivers/ina3221/1-0041/hwmon/hwmon4/in2_label":                  "VDDQ_VDD2_1V8AO\n",
				"/sys/class/hwmon/hwmon0/name":                                                "soctherm_oc\n",
				"/sys/class/hwmon/hwmon0/oc3_event_cnt":                                       "0\n",
			}
			if tc.layout == "jp6" {
				exact["/sys/kernel/nvpmodel_clk_cap/emc"] = "0\n"
			} else {
				exact["/sys/kernel/nvpmodel_emc_cap/emc_iso_cap"] = "0\n"
			}
			for p, want := range exact {
				if got := read(t, tr, p); got != want {
					t.Errorf("%s = %q, want %q", p, got, want)
				}
			}
			if got := strings.SplitAfter(read(t, tr, "/etc/nv_tegra_release"), "\n")[0]; got != tc.release {
				t.Errorf("nv_tegra_release line 1 = %q, want %q", got, tc.release)
			}
			links := map[string]string{
				"/sys/bus/i2c/drivers/ina3221/1-0040":                          tc.bus,
				"/etc/nvpmodel.conf":                                           "nvpmodel/nvpmodel_p3701_0000.conf",
				"/proc/device-tree":                                            "../sys/firmware/devicetree/base",
				"/sys/devices/system/cpu/cpu5/cpufreq":                         "../cpufreq/policy4",
				tc.gpuDev + "/devfreq/" + filepath.Base(tc.gpuDev) + "/device": "../../../" + filepath.Base(tc.gpuDev),
			}
			for p, want := range links {
				if got, err := os.Readlink(tr.Path(p)); err != nil || got != want {
					t.Errorf("link %s -> %q (%v), want %q", p, got, err, want)
				}
			}
			// hwmon directories are found by globbing; their numbers are not 0-based.
			for addr, want := range map[string]string{"1-0040": "hwmon1", "1-0041": "hwmon4"} {
				m, _ := filepath.Glob(tr.Path("/sys/bus/i2c/drivers/ina3221/" + addr + "/hwmon/hwmon*"))
				if len(m) != 1 || filepath.Base(m[0]) != want {
					t.Errorf("%s hwmon = %v, want %s", addr, m, want)
				}
			}
			if got := read(t, tr, "/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq"); got != "115200\n" {
				t.Errorf("cpu0 cur = %q", got)
			}
		})
	}
}

func TestStateOptionsAndReadings(t *testing.T) {
	spec := testboard.Spec(t, testboard.AGXOrin)
	st := faketree.BootState(spec)
	st.OnlineCores = 6
	st.CPUMaxKHz = 1728000
	st.GPUGovernor = "userspace"
	st.EMCLocked = true
	st.EMCHz = 2133000000
	st.PMode = 1
	tr := build(t, spec, faketree.Options{
		L4T:     "R35.4.1",
		State:   &st,
		Rails:   map[string]faketree.Reading{"VDD_CPU_CV": {MV: 4984, MA: 1203.6}},
		TempsMC: map[string]int64{"gpu-thermal": 61500},
	})
	if tr.Layout() != "jp5" {
		t.Errorf("L4T R35 gave layout %s", tr.Layout())
	}
	exact := map[string]string{
		"/sys/devices/system/cpu/online":                           "0-5\n",
		"/sys/devices/system/cpu/offline":                          "6-11\n",
		"/sys/devices/system/cpu/present":                          "0-11\n",
		"/sys/devices/system/cpu/cpu5/online":                      "1\n",
		"/sys/devices/system/cpu/cpu6/online":                      "0\n",
		"/sys/devices/system/cpu/cpufreq/policy4/affected_cpus":    "4 5\n",
		"/sys/devices/system/cpu/cpufreq/policy8/affected_cpus":    "\n",
		"/sys/devices/system/cpu/cpufreq/policy0/scaling_max_freq": "1728000\n",
		tr.GPUDevfreq() + "/governor":                              "userspace\n",
		"/sys/kernel/debug/bpmp/debug/clk/emc/mrq_rate_locked":     "1\n",
		"/sys/kernel/debug/bpmp/debug/clk/emc/rate":                "2133000000\n",
		"/var/lib/nvpmodel/status":                                 "pmode:0001\n",
		"/sys/class/thermal/thermal_zone1/temp":                    "61500\n",
		"/sys/class/thermal/thermal_zone0/temp":                    "45250\n",
		"/sys/class/hwmon/hwmon1/in2_input":                        "4984\n",
		"/sys/class/hwmon/hwmon1/curr2_input":                      "1204\n",
		"/sys/class/hwmon/hwmon1/in5_input":                        "6020\n", // 1204 mA × 5 mΩ = 6020 µV
	}
	for p, want := range exact {
		if got := read(t, tr, p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	bad := st
	bad.OnlineCores = 0
	if _, err := faketree.Build(t.TempDir(), spec, faketree.Options{State: &bad}); err == nil {
		t.Error("OnlineCores 0: want error")
	}
	for _, o := range []faketree.Options{{Layout: "jp4"}, {Layout: "jp7"}, {L4T: "R34.1"}, {Layout: "jp6", L4T: "R35.4.1"}} {
		if _, err := faketree.Build(t.TempDir(), spec, o); err == nil {
			t.Errorf("options %+v: want error", o)
		}
	}
	if _, err := faketree.Build(filepath.Join(t.TempDir(), "missing"), spec, faketree.Options{}); err == nil {
		t.Error("missing root: want error")
	}
}

func TestSetRailHwmon(t *testing.T) {
	spec := testboard.Spec(t, testboard.AGXOrin)
	tr := build(t, spec, faketree.Options{})
	if err := tr.SetRail("VDD_GPU_SOC", 5096, 4020.4); err != nil {
		t.Fatal(err)
	}
	if err := tr.SetRail("VIN_SYS_5V0", 5008, 900); err != nil {
		t.Fatal(err)
	}
	h := "/sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon1/"
	cpuMA, err := strconv.Atoi(strings.TrimSpace(read(t, tr, h+"curr2_input")))
	if err != nil {
		t.Fatal(err)
	}
	sum := 4020 + cpuMA + 900
	exact := map[string]string{
		"in1_input":   "5096\n",
		"curr1_input": "4020\n",
		"in4_input":   "20100\n",
		"in3_input":   "5008\n",
		"curr3_input": "900\n",
		"in6_input":   "4500\n",
		"curr4_input": strconv.Itoa(sum) + "\n",
		"in7_input":   strconv.Itoa(sum*faketree.ShuntMicroOhm/1000) + "\n",
	}
	for f, want := range exact {
		if got := read(t, tr, h+f); got != want {
			t.Errorf("%s = %q, want %q", f, got, want)
		}
	}
	for _, bad := range []string{"NC", "1-0041/ch1", "VDD_IN", ""} {
		if err := tr.SetRail(bad, 5000, 100); err == nil {
			t.Errorf("SetRail(%q): want error", bad)
		}
	}
	if err := tr.SetRail("VDD_CPU_CV", -1, 100); err == nil {
		t.Error("negative voltage: want error")
	}
	if got, want := tr.Rails(), []string{"VDDQ_VDD2_1V8AO", "VDD_CPU_CV", "VDD_GPU_SOC", "VIN_SYS_5V0"}; !slices.Equal(got, want) {
		t.Errorf("Rails() = %v, want %v", got, want)
	}
}

func TestSetRailIIO(t *testing.T) {
	spec := testboard.Spec(t, "agx-xavier")
	tr := build(t, spec, faketree.Options{})
	if tr.Layout() != "jp4" {
		t.Fatalf("xavier layout %s", tr.Layout())
	}
	if err := tr.SetRail("VDDRQ", 4990, 412.5); err != nil {
		t.Fatal(err)
	}
	d := "/sys/bus/i2c/drivers/ina3221x/1-0041/iio:device1/"
	exact := map[string]string{
		"rail_name_1":       "VDDRQ\n",
		"in_voltage1_input": "4990\n",
		"in_current1_input": "413\n", // rounded half away from zero
		"in_power1_input":   "2058\n",
		"rail_name_2":       "SYS5V\n",
	}
	for f, want := range exact {
		if got := read(t, tr, d+f); got != want {
			t.Errorf("%s = %q, want %q", f, got, want)
		}
	}
	if got := read(t, tr, "/sys/bus/i2c/drivers/ina3221x/1-0040/iio:device0/rail_name_0"); got != "GPU\n" {
		t.Errorf("rail_name_0 = %q", got)
	}
	if got := read(t, tr, "/sys/class/devfreq/17000000.gv11b/device/of_node/name"); got != "gv11b\x00" {
		t.Errorf("gv11b of_node name = %q", got)
	}
}

// Two builds of the same board and options are byte-identical; a change shows up.
func TestDigestDeterministic(t *testing.T) {
	spec := testboard.Spec(t, testboard.AGXOrin)
	a := build(t, spec, faketree.Options{})
	b := build(t, spec, faketree.Options{})
	da, err := a.Digest()
	if err != nil {
		t.Fatal(err)
	}
	db, err := b.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(da, db) {
		t.Fatal("two builds differ")
	}
	if err := b.WriteFile("/sys/devices/system/cpu/cpu3/online", "0\n"); err != nil {
		t.Fatal(err)
	}
	db, _ = b.Digest()
	if maps.Equal(da, db) || db["/sys/devices/system/cpu/cpu3/online"] != "file 0644 0\n" {
		t.Errorf("digest after write: %q", db["/sys/devices/system/cpu/cpu3/online"])
	}
	if da["/etc/nvpmodel.conf"] != "link nvpmodel/nvpmodel_p3701_0000.conf" {
		t.Errorf("digest of link: %q", da["/etc/nvpmodel.conf"])
	}
}

// SetRail from several goroutines keeps the sum channel consistent with the channels.
func TestSetRailConcurrent(t *testing.T) {
	spec := testboard.Spec(t, testboard.AGXOrin)
	tr := build(t, spec, faketree.Options{})
	var wg sync.WaitGroup
	for i, r := range []string{"VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 20 {
				if err := tr.SetRail(r, 5000, float64(100*i+k)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	h := "/sys/class/hwmon/hwmon1/"
	if got := read(t, tr, h+"curr4_input"); got != strconv.Itoa(19+119+219)+"\n" {
		t.Errorf("curr4_input = %q", got)
	}
}

func TestRangeList(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{0}, "0"},
		{[]int{0, 1, 2, 3}, "0-3"},
		{[]int{8, 9, 0, 1, 2, 3, 10, 11}, "0-3,8-11"},
		{[]int{0, 2, 4, 5}, "0,2,4-5"},
	} {
		if got := faketree.RangeList(tc.in); got != tc.want {
			t.Errorf("RangeList(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// The generated conf follows NVIDIA's published confs: the file name of the module's
// conf, EMC as "<PARAM TYPE=CLOCK", _KNEXT arguments, NVIDIA's CPU MIN_FREQ, and clock
// lines only for clusters with online cores.
func TestConfRealLayout(t *testing.T) {
	for _, tc := range []struct {
		board, link string
		want        []string
		not         []string
	}{
		{"agx-orin-64gb", "nvpmodel/nvpmodel_p3701_0000.conf", []string{
			"<PARAM TYPE=CLOCK NAME=EMC >\nMAX_FREQ /sys/kernel/nvpmodel_emc_cap/emc_iso_cap\nMAX_FREQ_KNEXT /sys/kernel/nvpmodel_clk_cap/emc\n",
			"MAX_FREQ_KNEXT /sys/devices/system/cpu/cpu8/cpufreq/scaling_max_freq\n",
			"TPC_PG_MASK 248\nGPU_POWER_CONTROL_ENABLE GPU_PWR_CNTL_EN on\nCPU_A78_0 MIN_FREQ 729600\nCPU_A78_0 MAX_FREQ 1113600\nGPU MIN_FREQ 0\n",
		}, []string{"TYPE=FILE NAME=EMC", "MIN_FREQ 115200"}},
		{"orin-nx-16gb-super", "nvpmodel/nvpmodel_p3767_0000_super.conf", []string{
			"< POWER_MODEL ID=4 NAME=40W >", "GPU MAX_FREQ 1173000000\n", "< PM_CONFIG DEFAULT=4 >",
		}, nil},
		{"agx-xavier", "nvpmodel/nvpmodel_t194.conf", []string{
			"< PARAM TYPE=CLOCK NAME=EMC >\n", "CPU_DENVER_0 MIN_FREQ 1200000\nCPU_DENVER_0 MAX_FREQ 1200000\nGPU MIN_FREQ 0\nGPU MAX_FREQ 520000000\n",
		}, []string{"CPU_DENVER_1 MAX_FREQ 1200000\nGPU MIN_FREQ 0\nGPU MAX_FREQ 520000000"}},
	} {
		t.Run(tc.board, func(t *testing.T) {
			tr := build(t, testboard.Spec(t, tc.board), faketree.Options{})
			if got, err := os.Readlink(filepath.Join(tr.Root(), "etc/nvpmodel.conf")); err != nil || got != tc.link {
				t.Errorf("link = %q (%v), want %q", got, err, tc.link)
			}
			if got := read(t, tr, "/sys/devices/gpu.0/tpc_pg_mask"); tc.board == "agx-orin-64gb" && got != "240\n" {
				t.Errorf("tpc_pg_mask = %q, want MODE_30W's 240", got)
			}
			conf := read(t, tr, "/etc/nvpmodel.conf")
			for _, w := range tc.want {
				if !strings.Contains(conf, w) {
					t.Errorf("conf lacks %q", w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(conf, n) {
					t.Errorf("conf has %q", n)
				}
			}
		})
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// The Xavier NX's INA3221 sits on I2C bus 7 (c250000.i2c), not bus 1: the driver link
// and the device directory follow the sensor's address.
func TestXavierNXSensorOnBus7(t *testing.T) {
	spec, err := testboard.Catalog(t).Board("xavier-nx")
	if err != nil {
		t.Fatal(err)
	}
	tr := build(t, spec, faketree.Options{})
	target, err := os.Readlink(tr.Path("/sys/bus/i2c/drivers/ina3221/7-0040"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(target, "devices/c250000.i2c/i2c-7/7-0040") {
		t.Errorf("ina3221 7-0040 links to %s, want .../devices/c250000.i2c/i2c-7/7-0040", target)
	}
	if got := read(t, tr, "/sys/devices/c250000.i2c/i2c-7/7-0040/name"); got != "ina3221\n" {
		t.Errorf("7-0040/name = %q", got)
	}
}
