//go:build gpu && cgo

package nvml

// GPU-only test: go test -tags gpu ./powermode/nvml/ on a machine with a discrete NVIDIA
// GPU. Read-only (clock control off): it changes nothing. Not run in the session that
// wrote it (no GPU there).

import (
	"context"
	"errors"
	"testing"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

func TestRealGPUReadOnly(t *testing.T) {
	b, err := Open(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	lv := b.Supported().Levels()
	t.Logf("%+v: %d modes, memory clocks %v Hz, %d graphics clocks %d..%d Hz", b.Info(), b.Supported().Size(),
		lv.EMCHz, len(lv.GPUHz), lv.GPUHz[0], lv.GPUHz[len(lv.GPUHz)-1])
	if len(lv.GPUHz) < 2 {
		t.Errorf("only %d graphics clocks listed: the sized query is not returning the table", len(lv.GPUHz))
	}
	cur, err := b.Current(ctx)
	if err != nil || !b.Space().Contains(cur) {
		t.Fatalf("current %s: %v", cur, err)
	}
	p, err := b.Power(ctx)
	if err != nil || p.TotalMW <= 0 {
		t.Fatalf("power %+v: %v", p, err)
	}
	e1, err := b.EnergyMJ(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Apply(ctx, cur); err != nil {
		t.Fatalf("read-only: applying the mode the GPU is set to writes nothing and succeeds: %v", err)
	}
	other := b.Supported().Modes()[0]
	if other == cur {
		other = b.Supported().Modes()[1]
	}
	if err := b.Apply(ctx, other); err == nil {
		t.Fatalf("read-only backend applied %s", other.Human())
	}
	t.Logf("current %s, power %.0f mW, energy %d mJ", cur.Human(), p.TotalMW, e1)
}

// The board lock's node (the GPU's PCI device directory in sysfs) exists and takes an
// exclusive flock: a second lock is refused.
func TestRealGPUBoardLock(t *testing.T) {
	b, err := Open(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := powermode.LockBoard(b.LockPath())
	if err != nil {
		t.Fatalf("lock %s: %v", b.LockPath(), err)
	}
	defer l.Close()
	if _, err := powermode.LockBoard(b.LockPath()); !errors.Is(err, powermode.ErrBoardLocked) {
		t.Fatalf("second lock: %v; want ErrBoardLocked", err)
	}
	t.Logf("board lock on %s", b.LockPath())
}
