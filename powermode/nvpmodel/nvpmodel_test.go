package nvpmodel_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/faketree"
	"github.com/fulcrum-edge/fulcrum/powermode/nvpmodel"
)

// agxOrinConf is a conf for the AGX Orin 64GB written by this project in the syntax
// nvpmodel reads (the file on a board is nvpmodel_p3701_0000.conf): no text is copied
// from NVIDIA's file, the power models are generated from the values table below. It
// uses every syntax feature a real conf has: a header comment, FILE and CLOCK params with
// _KNEXT duplicates, "<PARAM" without a space and TYPE=CLOCK for EMC, a DLA clock we do
// not use, a HWMON block with three-field lines (as Xavier NX's conf has), string values,
// -1 caps, per-cluster CPU params and a trailing PM_CONFIG. The caps and TPC masks are
// the module's published values: MAXN 0, MODE_15W 248, MODE_30W 240, MODE_50W 0, so from
// the default MODE_30W every other preset needs a reboot.
var agxOrinConf = buildAGXOrinConf()

// orinModel is one power model of agxOrinConf: caps as nvpmodel writes them ("-1": none).
type orinModel struct {
	id, cores, tpcMask int
	name               string
	cpuMax             string // every online cluster's MAX_FREQ
	gpuMax, emcMax     string
	dlaMax             string // "" leaves the DLA line out
	ocLimit            bool   // the VDDIN_OC_LIMIT lines
}

func buildAGXOrinConf() string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("# Test conf for nvpmodel.Parse: the AGX Orin 64GB's four power models.")
	w("# Sections: PARAM (what a name writes), POWER_MODEL (the values), PM_CONFIG (the default).")
	w("")
	w("< PARAM TYPE=FILE NAME=CPU_ONLINE >")
	for i := range 12 {
		w("CORE_%d /sys/devices/system/cpu/cpu%d/online", i, i)
	}
	w("")
	for _, f := range []struct{ name, arg, file string }{
		{"TPC_POWER_GATING", "TPC_PG_MASK", "tpc_pg_mask"},
		{"GPU_POWER_CONTROL_ENABLE", "GPU_PWR_CNTL_EN", "power/control"},
		{"GPU_POWER_CONTROL_DISABLE", "GPU_PWR_CNTL_DIS", "power/control"},
	} {
		w("< PARAM TYPE=FILE NAME=%s >", f.name)
		w("%s /sys/devices/gpu.0/%s", f.arg, f.file)
		w("")
	}
	for i, first := range []int{0, 4, 8} {
		cpufreq := fmt.Sprintf("/sys/devices/system/cpu/cpu%d/cpufreq/", first)
		w("< PARAM TYPE=CLOCK NAME=CPU_A78_%d >", i)
		w("FREQ_TABLE %sscaling_available_frequencies", cpufreq)
		w("MAX_FREQ %sscaling_max_freq", cpufreq)
		w("MIN_FREQ %sscaling_min_freq", cpufreq)
		if i == 0 {
			w("FREQ_TABLE_KNEXT %sscaling_available_frequencies", cpufreq)
			w("MAX_FREQ_KNEXT %sscaling_max_freq", cpufreq)
			w("MIN_FREQ_KNEXT %sscaling_min_freq", cpufreq)
		}
		w("")
	}
	w("< PARAM TYPE=CLOCK NAME=GPU >")
	for _, dir := range []string{"devfreq/17000000.ga10b/", "devfreq_dev/"} {
		knext := ""
		if dir == "devfreq_dev/" {
			knext = "_KNEXT"
		}
		w("FREQ_TABLE%s /sys/devices/17000000.ga10b/%savailable_frequencies", knext, dir)
		w("MAX_FREQ%s /sys/devices/17000000.ga10b/%smax_freq", knext, dir)
		w("MIN_FREQ%s /sys/devices/17000000.ga10b/%smin_freq", knext, dir)
	}
	w("")
	w("< PARAM TYPE=CLOCK NAME=DLA0_CORE >")
	w("MAX_FREQ /sys/devices/platform/13e40000.host1x/15880000.nvdla0/acm/clk_cap/dla0_core")
	w("")
	w("<PARAM TYPE=CLOCK NAME=EMC >")
	w("MAX_FREQ /sys/kernel/nvpmodel_emc_cap/emc_iso_cap")
	w("MAX_FREQ_KNEXT /sys/kernel/nvpmodel_clk_cap/emc")
	w("")
	w("< PARAM TYPE=HWMON NAME=VDDIN_OC_LIMIT >")
	w("WARN /sys/bus/i2c/drivers/ina3221/1-0040/hwmon curr1_max")
	w("CRIT /sys/bus/i2c/drivers/ina3221/1-0040/hwmon curr1_crit")
	for _, m := range []orinModel{
		{id: 0, name: "MAXN", cores: 12, tpcMask: 0, cpuMax: "-1", gpuMax: "-1", emcMax: "0", dlaMax: "-1"},
		{id: 1, name: "MODE_15W", cores: 4, tpcMask: 248, cpuMax: "1113600", gpuMax: "408000000", emcMax: "2133000000", dlaMax: "614400000"},
		{id: 2, name: "MODE_30W", cores: 8, tpcMask: 240, cpuMax: "1728000", gpuMax: "612000000", emcMax: "-1", ocLimit: true},
		{id: 3, name: "MODE_50W", cores: 12, tpcMask: 0, cpuMax: "1497600", gpuMax: "816000000", emcMax: "0"},
	} {
		w("")
		w("< POWER_MODEL ID=%d NAME=%s >", m.id, m.name)
		for i := range 12 {
			on := 0
			if i < m.cores {
				on = 1
			}
			w("CPU_ONLINE CORE_%d %d", i, on)
		}
		w("TPC_POWER_GATING TPC_PG_MASK %d", m.tpcMask)
		w("GPU_POWER_CONTROL_ENABLE GPU_PWR_CNTL_EN on")
		for c := range (m.cores + 3) / 4 {
			w("CPU_A78_%d MIN_FREQ 729600", c)
			w("CPU_A78_%d MAX_FREQ %s", c, m.cpuMax)
		}
		w("GPU MIN_FREQ 0")
		w("GPU MAX_FREQ %s", m.gpuMax)
		w("GPU_POWER_CONTROL_DISABLE GPU_PWR_CNTL_DIS auto")
		if m.dlaMax != "" {
			w("DLA0_CORE MAX_FREQ %s", m.dlaMax)
		}
		w("EMC MAX_FREQ %s", m.emcMax)
		if m.ocLimit {
			w("VDDIN_OC_LIMIT WARN 3000")
			w("VDDIN_OC_LIMIT CRIT 5000")
		}
	}
	w("")
	w("# the default mode")
	w("< PM_CONFIG DEFAULT=2 >")
	return b.String()
}

// lineOf is the 1-based number of the first line of text that contains sub.
func lineOf(text, sub string) int {
	for i, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			return i + 1
		}
	}
	return 0
}

func TestParseRealConf(t *testing.T) {
	c, err := nvpmodel.Parse(strings.NewReader(agxOrinConf))
	if err != nil {
		t.Fatal(err)
	}
	if c.Default != 2 || len(c.Models) != 4 || len(c.Params) != 11 {
		t.Fatalf("default %d, %d models, %d params", c.Default, len(c.Models), len(c.Params))
	}
	gpu, ok := c.Param("GPU")
	if !ok || gpu.Type != "CLOCK" || gpu.Args["MAX_FREQ"] != "/sys/devices/17000000.ga10b/devfreq/17000000.ga10b/max_freq" || gpu.Line != lineOf(agxOrinConf, "NAME=GPU >") {
		t.Errorf("GPU param = %+v", gpu)
	}
	m, _ := c.Model(1)
	if v, _ := m.Value("GPU_POWER_CONTROL_ENABLE", "GPU_PWR_CNTL_EN"); v != "on" || m.Name != "MODE_15W" {
		t.Errorf("model 1 = %s, GPU_PWR_CNTL_EN %q", m.Name, v)
	}
	emc, _ := c.Param("EMC")
	hw, _ := c.Param("VDDIN_OC_LIMIT")
	if emc == nil || emc.Type != "CLOCK" || hw == nil || hw.Type != "HWMON" || hw.Attrs["CRIT"] != "curr1_crit" ||
		hw.Args["WARN"] != "/sys/bus/i2c/drivers/ina3221/1-0040/hwmon" {
		t.Errorf("EMC = %+v, VDDIN_OC_LIMIT = %+v", emc, hw)
	}
	m, _ = c.Model(2)
	if v, _ := m.Value("VDDIN_OC_LIMIT", "CRIT"); v != "5000" {
		t.Errorf("model 2 VDDIN_OC_LIMIT CRIT = %q", v)
	}

	spec := testboard.Spec(t, testboard.AGXOrin)
	ps, err := c.Presets(spec)
	if err != nil {
		t.Fatal(err)
	}
	want := []nvpmodel.Preset{
		{ID: 0, Name: "MAXN", Caps: powermode.Mode{Cores: 12},
			Mode: powermode.Mode{Cores: 12, CPUKHz: 2201600, GPUHz: 1300500000, EMCHz: 3199000000}, NeedsReboot: true},
		{ID: 1, Name: "MODE_15W", Caps: powermode.Mode{Cores: 4, CPUKHz: 1113600, GPUHz: 408000000, EMCHz: 2133000000},
			Mode: powermode.Mode{Cores: 4, CPUKHz: 1113600, GPUHz: 408000000, EMCHz: 2133000000}, TPCPGMask: 248, NeedsReboot: true},
		{ID: 2, Name: "MODE_30W", Caps: powermode.Mode{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000},
			Mode: powermode.Mode{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000}, TPCPGMask: 240, Default: true},
		{ID: 3, Name: "MODE_50W", Caps: powermode.Mode{Cores: 12, CPUKHz: 1497600, GPUHz: 816000000},
			Mode: powermode.Mode{Cores: 12, CPUKHz: 1497600, GPUHz: 816000000, EMCHz: 3199000000}, NeedsReboot: true},
	}
	if len(ps) != len(want) {
		t.Fatalf("got %d presets", len(ps))
	}
	for i := range want {
		if ps[i] != want[i] {
			t.Errorf("preset %d:\n got %+v\nwant %+v", i, ps[i], want[i])
		}
	}
	// Relative to MAXN (mask 0), only MAXN and MODE_50W are reachable live.
	ps, err = c.PresetsFrom(spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.NeedsReboot != (p.ID == 1 || p.ID == 2) {
			t.Errorf("from mode 0: preset %d NeedsReboot = %v", p.ID, p.NeedsReboot)
		}
	}
	if _, err := c.PresetsFrom(spec, 9); err == nil || !strings.Contains(err.Error(), "current mode 9") {
		t.Errorf("unknown current mode: err = %v", err)
	}
	// The same conf does not fit a 6-core board.
	if _, err := c.Presets(testboard.Spec(t, "orin-nano-8gb")); err == nil || !strings.Contains(err.Error(), "CORE_6") {
		t.Errorf("conf on a 6-core board: err = %v", err)
	}
}

// Caps that are not on the board's grid snap to the highest level at or below them, as
// the kernel caps a clock: NVIDIA's Xavier MODE_10W GPU cap of 520 MHz is 420.75 MHz on
// the gv11b table, not the 522.75 MHz level above it.
func TestPresetsSnap(t *testing.T) {
	conf := `< PARAM TYPE=FILE NAME=CPU_ONLINE >
CORE_0 /sys/devices/system/cpu/cpu0/online
CORE_1 /sys/devices/system/cpu/cpu1/online
< PARAM TYPE=CLOCK NAME=CPU_DENVER_0 >
MAX_FREQ /sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq
< PARAM TYPE=CLOCK NAME=GPU >
MAX_FREQ /sys/devices/17000000.gv11b/devfreq/17000000.gv11b/max_freq
< PARAM TYPE=FILE NAME=EMC >
MAX_FREQ /sys/kernel/nvpmodel_emc_cap/emc_iso_cap
< POWER_MODEL ID=1 NAME=MODE_10W >
CPU_ONLINE CORE_1 1
CPU_DENVER_0 MAX_FREQ 1200000
GPU MAX_FREQ 520000000
EMC MAX_FREQ 1066000000
< POWER_MODEL ID=0 NAME=MAXN >
EMC MAX_FREQ -1
< PM_CONFIG DEFAULT=1 >
`
	c, err := nvpmodel.Parse(strings.NewReader(conf))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := c.Presets(testboard.Spec(t, "agx-xavier"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (powermode.Mode{Cores: 2, CPUKHz: 1190400, GPUHz: 420750000, EMCHz: 1065600000}); ps[0].Mode != want {
		t.Errorf("MODE_10W = %v, want %v", ps[0].Mode, want)
	}
	// No CPU_ONLINE lines: every core; -1 EMC: no cap.
	if want := (powermode.Mode{Cores: 8, CPUKHz: 2265600, GPUHz: 1377000000, EMCHz: 2133000000}); ps[1].Mode != want || ps[1].Caps != (powermode.Mode{Cores: 8}) {
		t.Errorf("MAXN = %v caps %v, want %v", ps[1].Mode, ps[1].Caps, want)
	}
}

func TestParseErrors(t *testing.T) {
	head := "< PARAM TYPE=FILE NAME=EMC >\nMAX_FREQ /sys/kernel/nvpmodel_emc_cap/emc_iso_cap\n"
	for _, tc := range []struct {
		name, conf, want string
	}{
		{"no PM_CONFIG", head + "< POWER_MODEL ID=0 NAME=MAXN >\nEMC MAX_FREQ 0\n", "PM_CONFIG"},
		{"no models", head + "< PM_CONFIG DEFAULT=0 >\n", "no < POWER_MODEL >"},
		{"default unknown", head + "< POWER_MODEL ID=0 NAME=MAXN >\n< PM_CONFIG DEFAULT=3 >\n", "line 4: PM_CONFIG DEFAULT=3"},
		{"unterminated header", "< PARAM TYPE=FILE NAME=EMC\n", "line 1: section header"},
		{"bad type", "< PARAM TYPE=DIR NAME=EMC >\n", "line 1: PARAM TYPE=\"DIR\": want FILE, CLOCK or HWMON"},
		{"hwmon two fields", "< PARAM TYPE=HWMON NAME=OC >\nWARN /sys/hwmon\n", "line 2: in PARAM OC (HWMON)"},
		{"file three fields", "<PARAM TYPE=FILE NAME=EMC >\nMAX_FREQ /sys/x curr1_max\n", "line 2: in PARAM EMC: \"MAX_FREQ /sys/x curr1_max\": want ARG_NAME /path"},
		{"bad attribute", "< PARAM TYPE FILE >\n", "line 1: section attribute"},
		{"param line", "< PARAM TYPE=FILE NAME=EMC >\nMAX_FREQ\n", "line 2: in PARAM EMC"},
		{"duplicate param", head + head, "line 3: PARAM EMC defined again (first on line 1)"},
		{"bad id", head + "< POWER_MODEL ID=x NAME=A >\n", "line 3: POWER_MODEL ID=\"x\""},
		{"duplicate id", head + "< POWER_MODEL ID=0 NAME=A >\n< POWER_MODEL ID=0 NAME=B >\n", "line 4: POWER_MODEL ID=0 defined again"},
		{"setting fields", head + "< POWER_MODEL ID=0 NAME=A >\nEMC MAX_FREQ\n", "line 4: in POWER_MODEL 0"},
		{"unknown param", head + "< POWER_MODEL ID=0 NAME=A >\nGPU MAX_FREQ 1\n", "line 4: in POWER_MODEL 0: no PARAM NAME=GPU"},
		{"unknown arg", head + "< POWER_MODEL ID=0 NAME=A >\nEMC MIN_FREQ 1\n", "line 4: in POWER_MODEL 0: PARAM EMC has no argument MIN_FREQ"},
		{"outside", "# hi\nCORE_0 /sys\n", "line 2: \"CORE_0 /sys\" outside"},
		{"bad default", head + "< PM_CONFIG DEFAULT=-1 >\n", "line 3: PM_CONFIG DEFAULT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := nvpmodel.Parse(strings.NewReader(tc.conf))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestPresetValueErrors(t *testing.T) {
	spec := testboard.Spec(t, testboard.AGXOrin)
	head := "< PARAM TYPE=FILE NAME=CPU_ONLINE >\nCORE_1 /x\nCORE_12 /x\nFOO /x\n< PARAM TYPE=CLOCK NAME=GPU >\nMAX_FREQ /x\n< PARAM TYPE=FILE NAME=TPC_POWER_GATING >\nTPC_PG_MASK /x\n< POWER_MODEL ID=0 NAME=A >\n"
	for _, tc := range []struct{ line, want string }{
		{"CPU_ONLINE CORE_1 2", "line 10: POWER_MODEL 0 (A) CPU_ONLINE CORE_1 = \"2\": want 1 or 0"},
		{"CPU_ONLINE CORE_12 1", "line 10: POWER_MODEL 0 (A) names CORE_12"},
		{"CPU_ONLINE FOO 1", "want CORE_<n>"},
		{"GPU MAX_FREQ fast", "GPU MAX_FREQ = \"fast\": want Hz, 0 or -1"},
		{"GPU MAX_FREQ -2", "GPU MAX_FREQ = \"-2\""},
		{"TPC_POWER_GATING TPC_PG_MASK ff", "TPC_PG_MASK = \"ff\""},
	} {
		c, err := nvpmodel.Parse(strings.NewReader(head + tc.line + "\n< PM_CONFIG DEFAULT=0 >\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.line, err)
		}
		if _, err := c.Presets(spec); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.line, err, tc.want)
		}
	}
}

// The conf faketree generates for every catalog board round-trips to its presets.
func TestFaketreeConfRoundTrip(t *testing.T) {
	c := testboard.Catalog(t)
	for _, name := range c.Names() {
		spec, _ := c.Board(name)
		for _, layout := range faketree.Layouts(spec) {
			tr, err := faketree.Build(t.TempDir(), spec, faketree.Options{Layout: layout})
			if err != nil {
				t.Fatal(err)
			}
			conf, err := nvpmodel.Load(tr.Root())
			if err != nil {
				t.Fatalf("%s/%s: %v", name, layout, err)
			}
			ps, err := conf.Presets(spec)
			if err != nil {
				t.Fatalf("%s/%s: %v", name, layout, err)
			}
			if conf.Default != spec.NVP.Default || len(ps) != len(spec.NVP.Presets) {
				t.Fatalf("%s/%s: default %d, %d presets", name, layout, conf.Default, len(ps))
			}
			space, _ := spec.Space()
			for i, p := range ps {
				want := space.Snap(spec.PresetMode(spec.NVP.Presets[i]))
				if p.Mode != want || p.Name != spec.NVP.Presets[i].Name || p.ID != spec.NVP.Presets[i].ID {
					t.Errorf("%s/%s preset %d: %+v, want mode %v", name, layout, i, p, want)
				}
			}
			id, err := nvpmodel.ReadStatus(tr.Root())
			if err != nil || id != spec.NVP.Default {
				t.Errorf("%s/%s: status %d, %v", name, layout, id, err)
			}
		}
	}
}

func TestLoadAbsoluteLink(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc/nvpmodel"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/nvpmodel/nvpmodel_p3701_0005.conf"), []byte(agxOrinConf), 0o644); err != nil {
		t.Fatal(err)
	}
	// As on a real board: an absolute link, which must resolve under root, not /.
	if err := os.Symlink("/etc/nvpmodel/nvpmodel_p3701_0005.conf", filepath.Join(root, "etc/nvpmodel.conf")); err != nil {
		t.Fatal(err)
	}
	c, err := nvpmodel.Load(root)
	if err != nil || c.Default != 2 {
		t.Fatalf("Load = %v, %v", c, err)
	}
	if _, err := nvpmodel.Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "--root") {
		t.Errorf("missing conf: err = %v", err)
	}
}

func TestReadStatus(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    int
		err     string
	}{
		{"pmode:0002\n", 2, ""},
		{"pmode:0000 fmode:quiet\n", 0, ""},
		{"fmode:cool pmode:0011", 11, ""},
		{"pmode:xx\n", 0, "want pmode:NNNN"},
		{"\n", 0, "no pmode"},
		{"", 0, "no pmode"},
	} {
		root := t.TempDir()
		dir := filepath.Join(root, "var/lib/nvpmodel")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "status"), []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		id, err := nvpmodel.ReadStatus(root)
		if tc.err == "" && (err != nil || id != tc.want) {
			t.Errorf("%q: %d, %v; want %d", tc.content, id, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q: err = %v, want %q", tc.content, err, tc.err)
		}
	}
	if _, err := nvpmodel.ReadStatus(t.TempDir()); err == nil || !strings.Contains(err.Error(), "nvpmodel -q") {
		t.Errorf("missing status: err = %v", err)
	}
}

// ForBoard: the live conf wins, relative to the mode in the status file; the catalog is
// the fallback; the reboot rule decides which presets are live.
func TestForBoard(t *testing.T) {
	spec := testboard.Spec(t, testboard.AGXOrin)
	write := func(t *testing.T, root, rel, content string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	names := func(ps []nvpmodel.Preset) string {
		var s []string
		for _, p := range ps {
			s = append(s, p.Name)
		}
		return strings.Join(s, ",")
	}
	for _, tc := range []struct {
		name, conf, status string
		source, live       string
		current            int
		known              bool
		note               string
	}{
		// Our own conf, the board in MAXN (mask 0): MODE_50W (mask 0) is live too.
		{"live conf from MAXN", agxOrinConf, "pmode:0000\n", nvpmodel.SourceLiveConf, "MAXN,MODE_50W", 0, true, ""},
		{"live conf default", agxOrinConf, "pmode:0002 fmode:quiet\n", nvpmodel.SourceLiveConf, "MODE_30W", 2, true, ""},
		{"live conf, no status", agxOrinConf, "", nvpmodel.SourceLiveConf, "MODE_30W", 2, false, "assuming the conf's default mode 2"},
		{"live conf, unknown status", agxOrinConf, "pmode:0009\n", nvpmodel.SourceLiveConf, "MODE_30W", 2, false, "mode 9"},
		{"no conf: catalog", "", "pmode:0002\n", nvpmodel.SourceCatalog, "MODE_30W", 2, true, ""},
		{"no conf, MAXN: catalog", "", "pmode:0000\n", nvpmodel.SourceCatalog, "MAXN,MODE_50W", 0, true, ""},
		{"no conf, no status: catalog default", "", "", nvpmodel.SourceCatalog, "MODE_30W", 2, false, "assuming the catalog's default mode 2"},
		{"no conf, unknown status: catalog default", "", "pmode:0007\n", nvpmodel.SourceCatalog, "MODE_30W", 2, false, "catalog entry does not have"},
		{"conf of a 6-core board: catalog", strings.Replace(agxOrinConf, "CORE_11 /sys", "CORE_12 /sys", 1), "pmode:0002\n", nvpmodel.SourceCatalog, "MODE_30W", 2, true, "live nvpmodel conf not used"},
		{"broken conf: catalog", "< PARAM TYPE=FILE NAME=EMC\n", "pmode:0002\n", nvpmodel.SourceCatalog, "MODE_30W", 2, true, "does not end with >"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.conf != "" {
				write(t, root, "etc/nvpmodel/nvpmodel_p3701_0000.conf", tc.conf)
				if err := os.Symlink("/etc/nvpmodel/nvpmodel_p3701_0000.conf", filepath.Join(root, "etc/nvpmodel.conf")); err != nil {
					t.Fatal(err)
				}
			}
			if tc.status != "" {
				write(t, root, "var/lib/nvpmodel/status", tc.status)
			}
			bp, err := nvpmodel.ForBoard(root, spec)
			if err != nil {
				t.Fatal(err)
			}
			if bp.Source != tc.source || bp.Current != tc.current || bp.CurrentKnown != tc.known || names(bp.Live()) != tc.live {
				t.Errorf("source %s current %d known %v live %s; want %s %d %v %s", bp.Source, bp.Current, bp.CurrentKnown, names(bp.Live()), tc.source, tc.current, tc.known, tc.live)
			}
			if note := strings.Join(bp.Notes, "; "); (tc.note == "") != (note == "") || !strings.Contains(note, tc.note) {
				t.Errorf("notes %q, want %q", note, tc.note)
			}
			for _, p := range bp.Presets {
				if p.Source != tc.source {
					t.Errorf("preset %s source %q", p.Name, p.Source)
				}
			}
			modes, mnames := bp.LiveModes()
			if strings.Join(mnames, ",") != tc.live || len(modes) != len(mnames) {
				t.Errorf("LiveModes names %v", mnames)
			}
		})
	}
}

// The catalog's presets agree with a conf that says the same thing: caps snapped at or
// below, masks and NeedsReboot as the conf gives them.
func TestCatalogMatchesConf(t *testing.T) {
	spec := testboard.Spec(t, testboard.AGXOrin)
	c, err := nvpmodel.Parse(strings.NewReader(agxOrinConf))
	if err != nil {
		t.Fatal(err)
	}
	fromConf, err := c.PresetsFrom(spec, 2)
	if err != nil {
		t.Fatal(err)
	}
	cat, err := nvpmodel.Catalog(spec, 2, true)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range cat.Presets {
		p.Source = ""
		if p != fromConf[i] {
			t.Errorf("preset %d:\ncatalog %+v\n   conf %+v", i, p, fromConf[i])
		}
	}
}

// The GPU's tpc_pg_mask is trusted over the status file: after `nvpmodel -m 0` (MAXN,
// mask 0) from MODE_30W (mask 240) without a reboot, the status names MAXN while the GPU
// still runs mask 240, so MAXN and MODE_50W need the reboot and MODE_30W is the live one.
// With no node the status file's mode gives the mask, as before.
func TestTPCMaskFromGPUWins(t *testing.T) {
	spec := testboard.Spec(t, testboard.AGXOrin)
	for _, tc := range []struct {
		name, status string
		removeNode   bool
		live, source string
		note         string
	}{
		{"status and GPU agree", "pmode:0002\n", false, "MODE_30W", nvpmodel.TPCMaskSysfs, ""},
		{"status says MAXN, GPU runs 240", "pmode:0000\n", false, "MODE_30W", nvpmodel.TPCMaskSysfs, "but the GPU runs TPC mask 240"},
		{"no node: the status's mode", "pmode:0000\n", true, "MAXN,MODE_50W", nvpmodel.TPCMaskStatus, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := faketree.Build(t.TempDir(), spec, faketree.Options{}) // boots in MODE_30W
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(tr.Root(), nvpmodel.StatusPath), []byte(tc.status), 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.removeNode {
				if err := os.Remove(filepath.Join(tr.Root(), nvpmodel.TPCMaskPath)); err != nil {
					t.Fatal(err)
				}
			}
			bp, err := nvpmodel.ForBoard(tr.Root(), spec)
			if err != nil {
				t.Fatal(err)
			}
			var live []string
			for _, p := range bp.Live() {
				live = append(live, p.Name)
			}
			if strings.Join(live, ",") != tc.live || bp.TPCMaskSource != tc.source {
				t.Errorf("live %v (mask %d from %s), want %s from %s", live, bp.TPCMask, bp.TPCMaskSource, tc.live, tc.source)
			}
			if note := strings.Join(bp.Notes, "; "); (tc.note == "") != (note == "") || !strings.Contains(note, tc.note) {
				t.Errorf("notes %q, want %q", note, tc.note)
			}
		})
	}
}

// Now reads the status file again: an nvpmodel -m after start shows.
func TestNowRereadsStatus(t *testing.T) {
	spec := testboard.Spec(t, testboard.AGXOrin)
	tr, err := faketree.Build(t.TempDir(), spec, faketree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bp, err := nvpmodel.ForBoard(tr.Root(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if id, name, ok := bp.Now(); !ok || id != 2 || name != "MODE_30W" {
		t.Fatalf("Now = %d %q %v, want 2 MODE_30W", id, name, ok)
	}
	if err := os.WriteFile(filepath.Join(tr.Root(), nvpmodel.StatusPath), []byte("pmode:0003\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if id, name, ok := bp.Now(); !ok || id != 3 || name != "MODE_50W" {
		t.Fatalf("after nvpmodel -m 3: Now = %d %q %v, want 3 MODE_50W", id, name, ok)
	}
}
