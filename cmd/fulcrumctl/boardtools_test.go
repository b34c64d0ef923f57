package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api/apitest"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server/controlapi"
	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/profiler/store/storetest"
)

// The board's own tools through fulcrumctl, against fulcrumd's real pieces (a simulated
// AGX Orin tree, daemon.Board, the controller, the API on a unix socket): status shows
// the nvpmodel mode; mode apply --preset takes a live preset by name or id and refuses a
// reboot-only one; jetson_clocks makes status say fulcrumd stands down (DEGRADED, the
// power budget not enforced); mode resume takes the board back, and a second resume says
// there is nothing to resume.
func TestBoardToolsCommands(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	spec := testboard.Spec(t, testboard.AGXOrin)
	root := filepath.Join(t.TempDir(), "board")
	testboard.Sim(t, root, spec, sim.Options{Logger: log})
	board, err := daemon.OpenBoard(ctx, "sim:"+spec.Name, root, t.TempDir(), log)
	if err != nil {
		t.Fatal(err)
	}
	st := storetest.Open(t)
	clock := sched.NewFakeClock()
	sc := sched.New(sched.Config{}, clock, nil)
	presets, names := board.Presets()
	c, err := control.New(control.Options{Sched: sc, Board: board, Store: st, Clock: clock, Presets: presets, PresetNames: names,
		Targets: plan.Targets{LatencyMS: 100, PowerMW: 30000}})
	if err != nil {
		t.Fatal(err)
	}
	sock := apitest.Serve(t, allowAll, &controlapi.API{C: c, Started: clock.Now()})

	if out := mustRun(t, "status", "--socket", sock); !strings.Contains(out, "nvpmodel   2 MODE_30W") {
		t.Fatalf("status does not show the nvpmodel mode:\n%s", out)
	}
	if out := mustRun(t, "mode", "apply", "--socket", sock, "--preset", "2"); !strings.Contains(out, "applied: 8c cpu 1728MHz gpu 612MHz emc 3199MHz") {
		t.Fatalf("mode apply --preset 2:\n%s", out)
	}
	mustRun(t, "mode", "apply", "--socket", sock, "--preset", "mode_30w")
	if _, _, err := fulcrumctl(ctx, "mode", "apply", "--socket", sock, "--preset", "MAXN"); err == nil || !strings.Contains(err.Error(), "needs a reboot") {
		t.Fatalf("mode apply --preset MAXN (another TPC mask): %v", err)
	}
	if _, _, err := fulcrumctl(ctx, "mode", "apply", "--socket", sock, "--preset", "MAXN", "--gpu-hz", "612000000"); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("preset and knobs: %v", err)
	}

	// jetson_clocks.
	write := func(rel string, v int64) {
		if err := os.WriteFile(filepath.Join(root, rel), []byte(strconv.FormatInt(v, 10)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for cpu := 1; cpu < spec.CPU.Cores; cpu++ {
		write("sys/devices/system/cpu/cpu"+strconv.Itoa(cpu)+"/online", 1)
	}
	for _, cl := range spec.CPU.Clusters {
		p := "sys/devices/system/cpu/cpufreq/policy" + strconv.Itoa(cl.Policy)
		write(p+"/scaling_max_freq", slices.Max(spec.CPU.FreqsKHz))
		write(p+"/scaling_min_freq", slices.Max(spec.CPU.FreqsKHz))
	}
	write("sys/class/devfreq/17000000.gpu/max_freq", slices.Max(spec.GPU.FreqsHz))
	write("sys/class/devfreq/17000000.gpu/min_freq", slices.Max(spec.GPU.FreqsHz))
	clock.Advance(c.Config().Period)
	c.Step(ctx)

	out := mustRun(t, "status", "--socket", sock)
	for _, want := range []string{"(set by another tool: fulcrumd stands down", "DEGRADED: another tool set the board to 12c", "the 30.0 W power budget is not enforced"} {
		if !strings.Contains(out, want) {
			t.Errorf("status after jetson_clocks does not say %q:\n%s", want, out)
		}
	}
	if out := mustRun(t, "mode", "resume", "--socket", sock); !strings.Contains(out, "board taken back: 8c cpu 1728MHz gpu 612MHz") {
		t.Fatalf("mode resume:\n%s", out)
	}
	if cur, err := board.Current(ctx); err != nil || cur.Cores != 8 || cur.GPUHz != 612000000 {
		t.Fatalf("board after resume: %v (%v)", cur, err)
	}
	if _, _, err := fulcrumctl(ctx, "mode", "resume", "--socket", sock); err == nil || !strings.Contains(err.Error(), "not standing down") {
		t.Fatalf("second resume: %v", err)
	}
}
