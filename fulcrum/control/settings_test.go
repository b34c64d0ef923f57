package control

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// A held mode the controller lets go of by itself (a power step-down here) is dropped
// from the saved settings by the control loop, so a restart does not re-apply a mode
// that broke the power budget; the run-time budgets stay saved. The file is written
// atomically (no temporary file left behind).
func TestHeldModeLetGoIsForgottenOnDisk(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	path := filepath.Join(t.TempDir(), SettingsFileName)
	c, err := New(Options{Sched: e.sched, Board: e.board, Store: e.store, Clock: e.clock,
		Targets: plan.Targets{LatencyMS: 400, PowerMW: 35000, RateRPS: 20}, SettingsPath: path})
	if err != nil {
		t.Fatal(err)
	}
	e.register(nil)
	e.board.set(20000, nil)
	e.tick(c, 300*time.Millisecond)
	a := NewAPI(c, e.clock.Now())
	ctx := context.Background()
	pw := 30000.0
	if _, err := a.SetBudgets(ctx, api.BudgetsUpdate{PowerMW: &pw}, api.Caller{}); err != nil {
		t.Fatal(err)
	}
	m := e.modes[len(e.modes)-1]
	if _, err := a.ApplyMode(ctx, m, api.Caller{}); err != nil {
		t.Fatal(err)
	}
	s, err := SettingsFile{Path: path}.Load()
	if err != nil || s.HeldMode == nil || *s.HeldMode != m || s.Budgets == nil || s.Budgets.PowerMW != 30000 {
		t.Fatalf("saved %+v (%v), want the held mode %v and power 30 W", s, err, m)
	}
	// Power over budget: the controller steps down and lets the held mode go.
	e.board.set(45000, nil)
	e.tick(c, 3*time.Second)
	if c.Held() {
		t.Fatal("still held after the power budget broke; the test needs a step-down")
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(runCtx) }()
	defer func() { stop(); <-done }()
	for range 2000 { // rounds of the fake clock, not time: a bound on a hang
		e.clock.Advance(c.cfg.Period)
		if s, err = (SettingsFile{Path: path}).Load(); err == nil && s.HeldMode == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err != nil || s.HeldMode != nil || s.Budgets == nil || s.Budgets.PowerMW != 30000 {
		t.Fatalf("saved after the step-down: %+v (%v), want no held mode and power 30 W still", s, err)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*.tmp"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("settings file %v (%v), want mode 0640", fi, err)
	}
}
