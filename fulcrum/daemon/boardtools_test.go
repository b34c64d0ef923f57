package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
)

// jetsonClocks writes what jetson_clocks writes into a simulated AGX Orin's tree (jp6):
// every core online, CPU and GPU min = max = top, EMC locked at its top rate.
func jetsonClocks(t *testing.T, root string, spec *powermode.BoardSpec) powermode.Mode {
	t.Helper()
	write := func(rel, v string) {
		if err := os.WriteFile(filepath.Join(root, rel), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for cpu := 1; cpu < spec.CPU.Cores; cpu++ {
		write("sys/devices/system/cpu/cpu"+strconv.Itoa(cpu)+"/online", "1")
	}
	top := powermode.Mode{Cores: spec.CPU.Cores, CPUKHz: slices.Max(spec.CPU.FreqsKHz), GPUHz: slices.Max(spec.GPU.FreqsHz), EMCHz: slices.Max(spec.EMC.RatesHz)}
	for _, cl := range spec.CPU.Clusters {
		p := "sys/devices/system/cpu/cpufreq/policy" + strconv.Itoa(cl.Policy)
		write(p+"/scaling_max_freq", strconv.FormatInt(top.CPUKHz, 10))
		write(p+"/scaling_min_freq", strconv.FormatInt(top.CPUKHz, 10))
	}
	write("sys/class/devfreq/17000000.gpu/max_freq", strconv.FormatInt(top.GPUHz, 10))
	write("sys/class/devfreq/17000000.gpu/min_freq", strconv.FormatInt(top.GPUHz, 10))
	write("sys/kernel/debug/bpmp/debug/clk/emc/mrq_rate_locked", "1")
	write("sys/kernel/debug/bpmp/debug/clk/emc/rate", strconv.FormatInt(top.EMCHz, 10))
	return top
}

// The simulated board boots in the nvpmodel mode its status file names (MODE_30W: 8
// cores at 1728 MHz, GPU 612 MHz), not with every knob at its maximum; presets resolve
// by name or id, a reboot-only one is refused; the nvpmodel mode is read live.
func TestSimBootsInStatusPreset(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	spec := testboard.Spec(t, testboard.AGXOrin)
	dir := filepath.Join(t.TempDir(), "board")
	testboard.Sim(t, dir, spec, sim.Options{Logger: log})
	b, err := OpenBoard(ctx, "sim:agx-orin-64gb", dir, t.TempDir(), log)
	if err != nil {
		t.Fatal(err)
	}
	want30W := powermode.Mode{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000}
	if cur, err := b.Current(ctx); err != nil || cur != want30W {
		t.Fatalf("simulated board boots at %v (%v), want MODE_30W's %v", cur, err, want30W)
	}
	if id, name, ok := b.NvpmodelMode(); !ok || id != 2 || name != "MODE_30W" {
		t.Fatalf("NvpmodelMode = %d %q %v", id, name, ok)
	}
	for _, q := range []string{"MODE_30W", "mode_30w", "2"} {
		if m, name, err := b.Preset(q); err != nil || m != want30W || name != "MODE_30W" {
			t.Errorf("Preset(%q) = %v %q %v", q, m, name, err)
		}
	}
	for q, want := range map[string]string{"MAXN": "needs a reboot", "0": "needs a reboot", "MODE_9W": "no nvpmodel preset"} {
		if _, _, err := b.Preset(q); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "2 MODE_30W") {
			t.Errorf("Preset(%q): %v, want %q and the live presets named", q, err, want)
		}
	}
}

// After another tool set the board (LeaveAsIs, as the controller calls it on standing
// down or adopting), Close leaves that tool's settings and no snapshot; once fulcrumd
// takes the board back, the next change snapshots the other tool's state, which Close
// then restores.
func TestExitLeavesOtherToolsSettings(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	spec := testboard.Spec(t, testboard.AGXOrin)
	dir := filepath.Join(t.TempDir(), "board")
	testboard.Sim(t, dir, spec, sim.Options{Logger: log})
	state := t.TempDir()
	snapFile := filepath.Join(state, powermode.SnapshotFile)
	b, err := OpenBoard(ctx, "sim:agx-orin-64gb", dir, state, log)
	if err != nil {
		t.Fatal(err)
	}
	target := powermode.Mode{Cores: 4, CPUKHz: 1113600, GPUHz: 408000000, EMCHz: 2133000000}
	if err := b.Apply(ctx, target); err != nil {
		t.Fatal(err)
	}
	top := jetsonClocks(t, dir, spec)
	if cur, _ := b.Current(ctx); cur != top {
		t.Fatalf("after jetson_clocks the board reads %v, want %v", cur, top)
	}
	b.LeaveAsIs("another tool set the board")
	if _, err := os.Stat(snapFile); !os.IsNotExist(err) {
		t.Fatalf("snapshot file kept after LeaveAsIs: %v", err)
	}
	b.Close(ctx)
	if cur, _ := b.Current(ctx); cur != top {
		t.Fatalf("board at %v after Close, want jetson_clocks' %v left as it was", cur, top)
	}

	// Taken back (resume): the next write snapshots jetson_clocks' state, and a clean
	// stop returns the board to it.
	b, err = OpenBoard(ctx, "sim:agx-orin-64gb", dir, state, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Apply(ctx, target); err != nil {
		t.Fatal(err)
	}
	b.Close(ctx)
	if cur, _ := b.Current(ctx); cur != top {
		t.Fatalf("board at %v after resume and Close, want %v", cur, top)
	}
}
