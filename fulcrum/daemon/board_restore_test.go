package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
)

// The first mode change saves a snapshot; Close restores it and removes the file; a
// crash (no Close) is repaired by the next OpenBoard.
func TestBoardSnapshotRestore(t *testing.T) {
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
	before, err := b.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The simulated board runs MODE_30W (TPC mask 240) from its live conf: every other
	// AGX Orin preset has another mask and needs a reboot, so none is offered.
	presets, names := b.Presets()
	want30W := powermode.Mode{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000}
	if b.NVP == nil || b.NVP.Source != "live-conf" || len(presets) != 1 || presets[0] != want30W || names[0] != "MODE_30W" {
		t.Fatalf("presets %v %v (nvpmodel %+v)", presets, names, b.NVP)
	}
	if got := b.Nvpmodel(); got != "MODE_30W" {
		t.Errorf("Nvpmodel() = %q", got)
	}
	target := powermode.Mode{Cores: 4, CPUKHz: 1113600, GPUHz: 408000000, EMCHz: 2133000000}
	if target == before {
		t.Fatal("pick another target mode")
	}
	if _, err := os.Stat(snapFile); !os.IsNotExist(err) {
		t.Fatalf("snapshot before any change: %v", err)
	}
	for range 2 {
		if err := b.Apply(ctx, target); err != nil {
			t.Fatal(err)
		}
	}
	if cur, _ := b.Current(ctx); cur != target {
		t.Fatalf("board at %s after Apply(%s)", cur, target)
	}
	if _, err := os.Stat(snapFile); err != nil {
		t.Fatalf("no snapshot saved before the first change: %v", err)
	}
	b.Close(ctx)
	if cur, _ := b.Current(ctx); cur != before {
		t.Fatalf("board at %s after Close, want %s restored", cur, before)
	}
	if _, err := os.Stat(snapFile); !os.IsNotExist(err) {
		t.Fatalf("snapshot left after a clean Close: %v", err)
	}

	// Crash: changed, never closed; the next start restores.
	b, err = OpenBoard(ctx, "sim:agx-orin-64gb", dir, state, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Apply(ctx, target); err != nil {
		t.Fatal(err)
	}
	b.crash()
	b2, err := OpenBoard(ctx, "sim:agx-orin-64gb", dir, state, log)
	if err != nil {
		t.Fatal(err)
	}
	if cur, _ := b2.Current(ctx); cur != before {
		t.Fatalf("board at %s after a restart following a crash, want %s", cur, before)
	}
	if _, err := os.Stat(snapFile); !os.IsNotExist(err) {
		t.Fatalf("snapshot left after the restart restored it: %v", err)
	}
}
