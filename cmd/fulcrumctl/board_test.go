package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/faketree"
	"github.com/fulcrum-edge/fulcrum/powermode/tegra/tegratest"
)

// runBoard runs `fulcrumctl board args...` in-process and returns its stdout.
func runBoard(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append([]string{"board"}, args...))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func boardInfo(t *testing.T, root string) boardInfoJSON {
	t.Helper()
	out, err := runBoard(t, "info", "--root", root, "--json")
	if err != nil {
		t.Fatalf("board info: %v", err)
	}
	var info boardInfoJSON
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&info); err != nil {
		t.Fatalf("board info --json: %v\n%s", err, out)
	}
	return info
}

func treeDigest(t *testing.T, root string) map[string]string {
	t.Helper()
	d, err := tegratest.Digest(root)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestBoardInfoJSONOnHandWrittenTrees(t *testing.T) {
	for _, c := range []struct {
		tree    tegratest.Board
		catalog string
	}{
		{tegratest.AGXOrin64GBJP5(), "agx-orin-64gb"},
		{tegratest.AGXOrin64GBJP6(), "agx-orin-64gb"},
		{tegratest.AGXXavier(), "agx-xavier"},
	} {
		t.Run(c.tree.Name+"-"+c.tree.GPUNode, func(t *testing.T) {
			root := t.TempDir()
			if err := tegratest.Write(root, c.tree); err != nil {
				t.Fatal(err)
			}
			info := boardInfo(t, root)
			if info.Board.Name != c.catalog {
				t.Errorf("board.name = %q, want %q", info.Board.Name, c.catalog)
			}
			if info.Board.Module == "" || info.Board.L4T == "" {
				t.Errorf("board = %+v, want module and l4t", info.Board)
			}
			b := c.tree
			if info.Cores != b.Cores() || len(info.Levels.Cores) != b.Cores() {
				t.Errorf("cores = %d, levels.cores = %v, want %d", info.Cores, info.Levels.Cores, b.Cores())
			}
			if !slices.Equal(info.Levels.CPUKHz, b.CPUFreqsKHz) || !slices.Equal(info.Levels.GPUHz, b.GPUFreqsHz) || !slices.Equal(info.Levels.EMCHz, b.EMCRatesHz) {
				t.Errorf("levels = %+v, want the tree's tables", info.Levels)
			}
			if want := b.Cores() * len(b.CPUFreqsKHz) * len(b.GPUFreqsHz) * len(b.EMCRatesHz); info.SpaceSize != want {
				t.Errorf("space_size = %d, want %d", info.SpaceSize, want)
			}
			wantCur := powermode.Mode{Cores: b.Cores(), CPUKHz: slices.Max(b.CPUFreqsKHz), GPUHz: slices.Max(b.GPUFreqsHz), EMCHz: slices.Max(b.EMCRatesHz)}
			if info.Current != wantCur {
				t.Errorf("current = %v, want %v", info.Current, wantCur)
			}
			if info.Power == nil || info.Power.TotalMW != b.ExpectedTotalMW() {
				t.Errorf("power = %+v, want total %v mW", info.Power, b.ExpectedTotalMW())
			}
			if len(info.Thermal) != len(b.ThermalZones) || info.Thermal[0].Zone != b.ThermalZones[0] {
				t.Errorf("thermal = %+v, want zones %v", info.Thermal, b.ThermalZones)
			}
			human, err := runBoard(t, "info", "--root", root)
			if err != nil {
				t.Fatal(err)
			}
			// Rails in W, V and A as a person reads power elsewhere (the JSON keeps mW).
			r0 := info.Power.Rails[0]
			railW := strconv.FormatFloat(r0.PowerMW/1000, 'f', 3, 64)
			for _, want := range []string{c.catalog, strconv.Itoa(info.SpaceSize) + " modes", wantCur.String(), r0.Name, b.ThermalZones[0], "RAIL", railW} {
				if !strings.Contains(human, want) {
					t.Errorf("human output lacks %q:\n%s", want, human)
				}
			}
		})
	}
}

func TestBoardModes(t *testing.T) {
	root := t.TempDir()
	b := tegratest.OrinNano8GB()
	b.Compatible = []string{"nvidia,p3768-0000+p3767-0005", "nvidia,p3767-0005", "nvidia,tegra234"}
	if err := tegratest.Write(root, b); err != nil {
		t.Fatal(err)
	}
	want := b.Cores() * len(b.CPUFreqsKHz) * len(b.GPUFreqsHz) * len(b.EMCRatesHz)
	out, err := runBoard(t, "modes", "--root", root, "--count")
	if err != nil || strings.TrimSpace(out) != strconv.Itoa(want) {
		t.Fatalf("modes --count = %q, %v; want %d", out, err, want)
	}
	out, err = runBoard(t, "modes", "--root", root, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var js struct {
		SpaceSize int              `json:"space_size"`
		Modes     []powermode.Mode `json:"modes"`
	}
	if err := json.Unmarshal([]byte(out), &js); err != nil {
		t.Fatal(err)
	}
	if js.SpaceSize != want || len(js.Modes) != want {
		t.Errorf("modes --json: space_size %d, %d modes; want %d", js.SpaceSize, len(js.Modes), want)
	}
	first := powermode.Mode{Cores: 1, CPUKHz: b.CPUFreqsKHz[0], GPUHz: b.GPUFreqsHz[0], EMCHz: b.EMCRatesHz[0]}
	if js.Modes[0] != first {
		t.Errorf("first mode = %v, want %v", js.Modes[0], first)
	}
	out, err = runBoard(t, "modes", "--root", root)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(out, "\n"); lines != want+1 {
		t.Errorf("modes: %d lines, want a header and %d modes", lines, want)
	}
}

func TestBoardApplyRestoreCycle(t *testing.T) {
	root, state := t.TempDir(), t.TempDir()
	if err := tegratest.Write(root, tegratest.AGXOrin64GBJP6()); err != nil {
		t.Fatal(err)
	}
	original := treeDigest(t, root)
	snapFile := filepath.Join(state, powermode.SnapshotFile)

	// A value that is not a level: an error naming the nearest levels, no change, no snapshot.
	_, err := runBoard(t, "apply", "--root", root, "--state-dir", state, "--cores", "8", "--cpu-khz", "1700000", "--gpu-hz", "612000000", "--emc-hz", "3199000000")
	if err == nil || !strings.Contains(err.Error(), "nearest: 1651200 or 1728000") {
		t.Fatalf("off-table apply: err = %v", err)
	}
	if _, err := os.Stat(snapFile); !os.IsNotExist(err) {
		t.Errorf("off-table apply left a snapshot (stat err %v)", err)
	}
	if d := tegratest.DiffDigests(original, treeDigest(t, root)); len(d) > 0 {
		t.Errorf("off-table apply changed %v", d)
	}
	if _, err := runBoard(t, "apply", "--root", root, "--state-dir", state, "--cores", "8"); err == nil || !strings.Contains(err.Error(), "required") {
		t.Errorf("apply without frequencies: err = %v, want required flags", err)
	}

	m1 := powermode.Mode{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 2133000000}
	out, err := runBoard(t, "apply", "--root", root, "--state-dir", state, "--cores", "8", "--cpu-khz", "1728000", "--gpu-hz", "612000000", "--emc-hz", "2133000000")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "saved the board's state to "+snapFile) || !strings.Contains(out, m1.String()) {
		t.Errorf("apply output:\n%s", out)
	}
	if got := boardInfo(t, root).Current; got != m1 {
		t.Errorf("current after apply = %v, want %v", got, m1)
	}
	first, err := os.ReadFile(snapFile)
	if err != nil {
		t.Fatal(err)
	}
	// A second apply keeps the first snapshot: it still describes the original state.
	m2 := powermode.Mode{Cores: 4, CPUKHz: 1113600, GPUHz: 408000000, EMCHz: 204000000}
	out, err = runBoard(t, "apply", "--root", root, "--state-dir", state, "--cores", "4", "--cpu-khz", "1113600", "--gpu-hz", "408000000", "--emc-hz", "204000000")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "keeping the earlier snapshot") {
		t.Errorf("second apply output:\n%s", out)
	}
	if again, _ := os.ReadFile(snapFile); !bytes.Equal(again, first) {
		t.Error("second apply replaced the snapshot")
	}
	if got := boardInfo(t, root).Current; got != m2 {
		t.Errorf("current after second apply = %v, want %v", got, m2)
	}

	out, err = runBoard(t, "restore", "--root", root, "--state-dir", state)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "restored the state saved at") {
		t.Errorf("restore output:\n%s", out)
	}
	if d := tegratest.DiffDigests(original, treeDigest(t, root)); len(d) > 0 {
		t.Errorf("after restore the tree differs from the original in %v", d)
	}
	if _, err := os.Stat(snapFile); !os.IsNotExist(err) {
		t.Errorf("restore left the snapshot (stat err %v)", err)
	}
	out, err = runBoard(t, "restore", "--root", root, "--state-dir", state)
	if err != nil || !strings.Contains(out, "nothing to restore") {
		t.Errorf("restore with no snapshot = %q, %v", out, err)
	}
}

func TestBoardNotAJetson(t *testing.T) {
	_, err := runBoard(t, "info", "--root", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "not a Jetson") {
		t.Errorf("err = %v, want not a Jetson", err)
	}
}

// Every catalog board, built by faketree in each layout it supports: info reports the
// catalog's tables, and apply then restore leaves the tree byte-identical.
func TestBoardEveryCatalogBoardViaFaketree(t *testing.T) {
	cat := testboard.Catalog(t)
	for _, name := range cat.Names() {
		spec, _ := cat.Board(name)
		for _, l4t := range spec.L4T {
			t.Run(name+"/"+l4t, func(t *testing.T) {
				root, state := t.TempDir(), t.TempDir()
				if _, err := faketree.Build(root, spec, faketree.Options{L4T: l4t}); err != nil {
					t.Fatal(err)
				}
				info := boardInfo(t, root)
				if info.Board.Name != name {
					t.Fatalf("detected %q, want %q", info.Board.Name, name)
				}
				sp, _ := spec.Space()
				if info.SpaceSize != sp.Size() || !slices.Equal(info.Levels.CPUKHz, spec.CPU.FreqsKHz) || !slices.Equal(info.Levels.GPUHz, spec.GPU.FreqsHz) || !slices.Equal(info.Levels.EMCHz, spec.EMC.RatesHz) {
					t.Errorf("levels %+v (size %d), want the catalog's (size %d)", info.Levels, info.SpaceSize, sp.Size())
				}
				if info.Power == nil || info.Power.TotalMW <= 0 {
					t.Errorf("power = %+v (errors %v)", info.Power, info.Errors)
				}
				original := treeDigest(t, root)
				lv := spec.Levels()
				m := powermode.Mode{Cores: (spec.CPU.Cores + 1) / 2, CPUKHz: lv.CPUKHz[len(lv.CPUKHz)/2], GPUHz: lv.GPUHz[0], EMCHz: lv.EMCHz[0]}
				args := []string{"apply", "--root", root, "--state-dir", state, "--cores", strconv.Itoa(m.Cores),
					"--cpu-khz", strconv.FormatInt(m.CPUKHz, 10), "--gpu-hz", strconv.FormatInt(m.GPUHz, 10), "--emc-hz", strconv.FormatInt(m.EMCHz, 10)}
				if _, err := runBoard(t, args...); err != nil {
					t.Fatal(err)
				}
				if got := boardInfo(t, root).Current; got != m {
					t.Errorf("current = %v, want %v", got, m)
				}
				if _, err := runBoard(t, "restore", "--root", root, "--state-dir", state); err != nil {
					t.Fatal(err)
				}
				if d := tegratest.DiffDigests(original, treeDigest(t, root)); len(d) > 0 {
					t.Errorf("after restore the tree differs in %v", d)
				}
			})
		}
	}
}

// boardTestConf is our own conf for the AGX Orin 64GB in the syntax of NVIDIA's
// (_KNEXT arguments, "<PARAM" EMC of TYPE=CLOCK, a HWMON block), with NVIDIA's TPC masks
// for MAXN (0) and MODE_15W (248) but a different name for mode 3, so the output shows
// that the live conf, not the catalog, was read.
const boardTestConf = `# FORMAT: see NVIDIA's confs
< PARAM TYPE=FILE NAME=TPC_POWER_GATING >
TPC_PG_MASK /sys/devices/gpu.0/tpc_pg_mask
TPC_PG_MASK_KNEXT /sys/devices/platform/gpu.0/tpc_pg_mask

< PARAM TYPE=CLOCK NAME=CPU_A78_0 >
MAX_FREQ /sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq
MIN_FREQ /sys/devices/system/cpu/cpu0/cpufreq/scaling_min_freq
MAX_FREQ_KNEXT /sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq
MIN_FREQ_KNEXT /sys/devices/system/cpu/cpu0/cpufreq/scaling_min_freq

< PARAM TYPE=CLOCK NAME=GPU >
MAX_FREQ /sys/devices/17000000.ga10b/devfreq/17000000.ga10b/max_freq
MAX_FREQ_KNEXT /sys/devices/platform/17000000.gpu/devfreq_dev/max_freq

<PARAM TYPE=CLOCK NAME=EMC >
MAX_FREQ /sys/kernel/nvpmodel_emc_cap/emc_iso_cap
MAX_FREQ_KNEXT /sys/kernel/nvpmodel_clk_cap/emc

< PARAM TYPE=HWMON NAME=VDDIN_OC_LIMIT >
WARN /sys/bus/i2c/devices/1-0040/hwmon curr1_max

< POWER_MODEL ID=0 NAME=MAXN >
TPC_POWER_GATING TPC_PG_MASK 0
CPU_A78_0 MIN_FREQ 729600
CPU_A78_0 MAX_FREQ -1
GPU MAX_FREQ -1
EMC MAX_FREQ 0
VDDIN_OC_LIMIT WARN 3000

< POWER_MODEL ID=1 NAME=MODE_15W >
TPC_POWER_GATING TPC_PG_MASK 248
CPU_A78_0 MIN_FREQ 729600
CPU_A78_0 MAX_FREQ 1113600
GPU MAX_FREQ 408000000
EMC MAX_FREQ 2133000000

< POWER_MODEL ID=3 NAME=MODE_50W_LIVE >
TPC_POWER_GATING TPC_PG_MASK 0
CPU_A78_0 MIN_FREQ 729600
CPU_A78_0 MAX_FREQ 1497600
GPU MAX_FREQ 816000000
EMC MAX_FREQ -1

< PM_CONFIG DEFAULT=0 >
`

// board info --json says where the presets came from and which need a reboot; board
// modes --json offers only those that do not.
func TestBoardInfoNvpmodel(t *testing.T) {
	for _, tc := range []struct {
		name, conf, status, source string
		running                    int
		reboot, live               []string
		mask                       string // the GPU's tpc_pg_mask ("": no node)
	}{
		{"live conf", boardTestConf, "pmode:0000\n", "live-conf", 0, []string{"MODE_15W"}, []string{"MAXN", "MODE_50W_LIVE"}, ""},
		{"catalog", "", "pmode:0002\n", "catalog", 2, []string{"MAXN", "MODE_15W", "MODE_50W"}, []string{"MODE_30W"}, ""},
		// The status names MAXN (mask 0), the GPU runs MODE_30W's mask 240 (nvpmodel -m 0
		// without the reboot): the GPU's mask wins, MAXN is not offered.
		{"GPU mask wins", "", "pmode:0000\n", "catalog", 0, []string{"MAXN", "MODE_15W", "MODE_50W"}, []string{"MODE_30W"}, "240"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			b := tegratest.AGXOrin64GBJP6()
			b.NvpmodelConf, b.NvpmodelConfName, b.NvpmodelStatus = tc.conf, "nvpmodel_p3701_0000.conf", tc.status
			b.TPCPGMask = tc.mask
			if err := tegratest.Write(root, b); err != nil {
				t.Fatal(err)
			}
			nv := boardInfo(t, root).Nvpmodel
			if nv == nil || nv.Source != tc.source || nv.Running == nil || *nv.Running != tc.running {
				t.Fatalf("nvpmodel = %+v", nv)
			}
			var reboot []string
			for _, p := range nv.Presets {
				if p.Source != tc.source {
					t.Errorf("preset %s source %q", p.Name, p.Source)
				}
				if p.NeedsReboot {
					reboot = append(reboot, p.Name)
				}
			}
			if !slices.Equal(reboot, tc.reboot) {
				t.Errorf("needs_reboot: %v, want %v", reboot, tc.reboot)
			}
			out, err := runBoard(t, "modes", "--root", root, "--json")
			if err != nil {
				t.Fatal(err)
			}
			var js struct {
				Presets []struct{ Name string } `json:"presets"`
			}
			if err := json.Unmarshal([]byte(out), &js); err != nil {
				t.Fatal(err)
			}
			var live []string
			for _, p := range js.Presets {
				live = append(live, p.Name)
			}
			if !slices.Equal(live, tc.live) {
				t.Errorf("modes --json presets %v, want %v", live, tc.live)
			}
			human, err := runBoard(t, "info", "--root", root)
			if err != nil || !strings.Contains(human, "nvpmodel presets ("+tc.source+")") || !strings.Contains(human, "needs reboot: not used") {
				t.Errorf("human output (%v):\n%s", err, human)
			}
		})
	}
}

// While another process holds the board lock (a fulcrumd driving the board), board
// apply and board restore refuse before they write the board or touch the snapshot: the
// snapshot belongs to the holder. Once the lock is free, restore works.
func TestBoardCommandsRefusedWhileBoardHeld(t *testing.T) {
	root, state := t.TempDir(), t.TempDir()
	if err := tegratest.Write(root, tegratest.AGXOrin64GBJP6()); err != nil {
		t.Fatal(err)
	}
	original := treeDigest(t, root)
	if _, err := runBoard(t, "apply", "--root", root, "--state-dir", state, "--cores", "8", "--cpu-khz", "1728000", "--gpu-hz", "612000000", "--emc-hz", "2133000000"); err != nil {
		t.Fatal(err)
	}
	snapFile := filepath.Join(state, powermode.SnapshotFile)
	snap, err := os.ReadFile(snapFile)
	if err != nil {
		t.Fatal(err)
	}
	applied := treeDigest(t, root)
	be, _, err := openBoard(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	held, err := powermode.LockBoard(be.LockPath()) // as a running fulcrumd holds it
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"restore", "--root", root, "--state-dir", state},
		{"apply", "--root", root, "--state-dir", state, "--cores", "4", "--cpu-khz", "1113600", "--gpu-hz", "408000000", "--emc-hz", "204000000"},
	} {
		_, err := runBoard(t, args...)
		if !errors.Is(err, powermode.ErrBoardLocked) || !strings.Contains(err.Error(), "fulcrumctl mode apply") {
			t.Fatalf("board %s while the board is held: %v; want ErrBoardLocked and the way through fulcrumd", args[0], err)
		}
		if d := tegratest.DiffDigests(applied, treeDigest(t, root)); len(d) > 0 {
			t.Fatalf("board %s while the board is held changed %v", args[0], d)
		}
		if got, err := os.ReadFile(snapFile); err != nil || !bytes.Equal(got, snap) {
			t.Fatalf("board %s while the board is held: snapshot %v (changed: %v)", args[0], err, !bytes.Equal(got, snap))
		}
	}
	held.Close()
	if _, err := runBoard(t, "restore", "--root", root, "--state-dir", state); err != nil {
		t.Fatal(err)
	}
	if d := tegratest.DiffDigests(original, treeDigest(t, root)); len(d) > 0 {
		t.Fatalf("after restore the tree differs from the original in %v", d)
	}
}
