package control

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/apitest"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
	"github.com/fulcrum-edge/fulcrum/fulcrum/metrics"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/faketree"
	"github.com/fulcrum-edge/fulcrum/powermode/tegra"
)

// countingBoard counts the mode writes tried on a real (tegra) backend.
type countingBoard struct {
	powermode.Backend
	mu    sync.Mutex
	tries int
}

func (b *countingBoard) Apply(ctx context.Context, m powermode.Mode) error {
	b.mu.Lock()
	b.tries++
	b.mu.Unlock()
	return b.Backend.Apply(ctx, m)
}

func (b *countingBoard) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tries
}

// gauge reads one unlabelled gauge from the controller's metrics.
func gauge(t *testing.T, c *Controller, name string) float64 {
	t.Helper()
	m := metrics.New(metrics.FromController(NewAPI(c, time.Now()), c.Counters), metrics.Options{})
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.Metric) == 1 {
			return f.Metric[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s missing", name)
	return 0
}

// A board whose GPU clock file refuses writes (a directory in its place: that fails for
// root too, unlike chmod 0444): the status says DEGRADED with the board's error, the
// plan is shown as not in force, fulcrum_degraded is 1, retries back off, and once the
// file takes writes again the controller applies and re-plans.
func TestBoardRefusesModeChanges(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	ctx := context.Background()
	tree, err := faketree.Build(t.TempDir(), e.spec, faketree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	be, err := tegra.Open(ctx, tree.Root(), e.spec, powermode.BoardInfo{Name: e.spec.Name})
	if err != nil {
		t.Fatal(err)
	}
	board := &countingBoard{Backend: be}
	c, err := New(Options{Sched: e.sched, Board: board, Store: e.store, Clock: e.clock,
		Targets: plan.Targets{LatencyMS: 400, PowerMW: 40000, RateRPS: 20}})
	if err != nil {
		t.Fatal(err)
	}
	e.register(nil)
	e.tick(c, 100*time.Millisecond)
	first := c.Status().Current
	if first == nil || c.Status().Degraded != "" {
		t.Fatalf("no plan applied on a writable board: %+v", c.Status())
	}

	minFreq := filepath.Join(tree.Root(), "sys", "class", "devfreq", "17000000.gpu", "min_freq")
	saved, err := os.ReadFile(minFreq)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(minFreq); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(minFreq, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.SetTargets(plan.Targets{LatencyMS: 400, PowerMW: 25000, RateRPS: 20}); err != nil {
		t.Fatal(err)
	}
	tries := board.count()
	e.tick(c, 20*time.Second)
	st := c.Status()
	if !strings.Contains(st.Degraded, "refuses mode changes") || st.Wanted == nil || st.ApplyError == "" {
		t.Fatalf("board refusing writes: degraded %q, wanted %+v, error %q", st.Degraded, st.Wanted, st.ApplyError)
	}
	// Backed off (1, 2, 4, 8 s…): 5 tries in 20 s, not one per cooldown (20).
	if n := board.count() - tries; n < 3 || n > 6 {
		t.Fatalf("%d writes tried in 20 s while the board refused them; want 3 to 6 (backed off)", n)
	}
	as, err := NewAPI(c, time.Time{}).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !as.Degraded || as.Plan == nil || as.Plan.ApplyError == "" || as.Plan.Mode != st.Wanted.Mode || as.Mode == as.Plan.Mode {
		t.Fatalf("API status: degraded %v, plan %+v, board mode %s: want DEGRADED and the plan shown as not in force", as.Degraded, as.Plan, as.Mode.Human())
	}
	if g := gauge(t, c, "fulcrum_degraded"); g != 1 {
		t.Fatalf("fulcrum_degraded %v while the board refuses writes", g)
	}
	if g := gauge(t, c, "fulcrum_plan_in_force"); g != 0 {
		t.Fatalf("fulcrum_plan_in_force %v while the board refuses writes", g)
	}

	// Writable again: the next retry applies, and the controller re-plans.
	if err := os.Remove(minFreq); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(minFreq, saved, 0o644); err != nil {
		t.Fatal(err)
	}
	seq := c.Status().LastEvent
	e.tick(c, 31*time.Second)
	st = c.Status()
	evs := c.Events().List(seq)
	if st.Degraded != "" || st.Wanted != nil || countKind(evs, KindDegraded) != 1 || countKind(evs, KindReplan) != 1 {
		t.Fatalf("board writable again: degraded %q, events %v; want recovered and one replan", st.Degraded, kinds(evs))
	}
	if cur, err := board.Current(ctx); err != nil || st.Current == nil || cur != st.Current.Mode {
		t.Fatalf("board at %v (%v), plan %+v", cur, err, st.Current)
	}
	if g := gauge(t, c, "fulcrum_degraded"); g != 0 {
		t.Fatalf("fulcrum_degraded %v after recovery", g)
	}
}

// The 1 s average power in the status is measured on an idle daemon too (no workers:
// the controller does not plan), and a status before any reading says there is none.
func TestIdlePowerAverage(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	c := e.controller(Config{}, plan.Targets{LatencyMS: 400})
	ctx := context.Background()
	as, err := NewAPI(c, time.Time{}).Status(ctx)
	if err != nil || as.Power == nil {
		t.Fatalf("status: %+v, %v", as.Power, err)
	}
	if as.Power.Avg1sSamples != 0 || as.Power.Avg1sMW != 0 {
		t.Fatalf("before any reading: %+v, want no samples", as.Power)
	}
	e.board.set(21000, nil)
	e.tick(c, 2*time.Second)
	as, err = NewAPI(c, time.Time{}).Status(ctx)
	if err != nil || as.Power == nil || as.Power.Avg1sSamples == 0 || as.Power.Avg1sMW != 21000 {
		t.Fatalf("idle daemon drawing 21 W: power %+v (%v), want a 1 s average of 21000 mW", as.Power, err)
	}
}

// An infeasible plan: the status names the same binding constraint as the decision's
// event, and says DEGRADED (docs/operations.md).
func TestInfeasibleStatusMatchesEvent(t *testing.T) {
	for _, b := range []plan.Targets{
		{LatencyMS: 400, PowerMW: 5000, RateRPS: 20}, // power alone
		{LatencyMS: 5, PowerMW: 40000, RateRPS: 20},  // latency alone
		// Both broken, power most: the status used to check latency first and said so.
		{LatencyMS: 80, PowerMW: 2000, RateRPS: 20},
		{LatencyMS: 150, PowerMW: 3000, RateRPS: 20},
	} {
		e := newEnv(t, sched.NewFakeClock())
		e.seed()
		c := e.controller(Config{}, b)
		e.register(nil)
		e.board.set(10000, nil)
		e.tick(c, 200*time.Millisecond)
		var plan *Event
		for _, ev := range c.Events().List(0) {
			if ev.Kind == KindPlan {
				plan = &ev
			}
		}
		if plan == nil || plan.Predicted == nil || plan.Predicted.Feasible {
			t.Fatalf("budgets %+v: plan event %+v, want an infeasible plan", b, plan)
		}
		_, after, ok := strings.Cut(plan.Reason, "binding constraint is ")
		if !ok {
			t.Fatalf("budgets %+v: plan reason %q names no binding constraint", b, plan.Reason)
		}
		word, _, _ := strings.Cut(after, ":")
		if word == "arrival rate" {
			word = "gpu_share"
		}
		as, err := NewAPI(c, time.Time{}).Status(context.Background())
		if err != nil || as.Plan == nil {
			t.Fatalf("status: %+v, %v", as.Plan, err)
		}
		if as.Plan.Binding != word || !as.Degraded || !strings.Contains(as.DegradedReason, "meets the "+word+" budget") {
			t.Errorf("budgets %+v: event says %q binds; status binding %q, degraded %v %q", b, word, as.Plan.Binding, as.Degraded, as.DegradedReason)
		}
	}
}

// A garbage import through fulcrumd's real controller is a 400 saying what is wrong (it
// was a 500 "internal"), and stores nothing.
func TestGarbageImportIsBadRequest(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	c := e.controller(Config{}, plan.Targets{LatencyMS: 400})
	cl := client.New(apitest.Serve(t, server.Config{Policy: server.PolicyFunc(func(api.Caller) error { return nil })}, NewAPI(c, time.Time{})))
	defer cl.Close()
	_, err := cl.ImportProfiles(context.Background(), strings.NewReader("\x00garbage;;\nnot a table\n"), api.ImportOptions{})
	ae := api.AsError(err)
	if err == nil || ae.Status != 400 || ae.Code != api.CodeBadRequest || !strings.Contains(ae.Message, "csv header lacks column(s)") {
		t.Fatalf("garbage import: %v (status %d), want a 400 naming the missing columns", err, ae.Status)
	}
	if n, _ := e.store.Count(); n != 0 {
		t.Fatalf("garbage import stored %d profiles", n)
	}
}
