package control

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// Setting the budgets in force again (shared or one stream's) logs no "changed from X
// to X" event; a real change still logs one.
func TestNoOpBudgetsLogNoEvent(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	c := e.controller(Config{}, plan.Targets{LatencyMS: 400, PowerMW: 35000, RateRPS: 20})
	a := NewAPI(c, time.Time{})
	ctx := context.Background()
	lat, w := 400.0, 2.0
	budgetEvents := func() int { return countKind(c.Events().List(0), KindBudget) }
	if _, err := a.SetBudgets(ctx, api.BudgetsUpdate{LatencyMS: &lat}, api.Caller{}); err != nil {
		t.Fatal(err)
	}
	if n := budgetEvents(); n != 0 {
		t.Fatalf("%d budget events after setting the latency in force, want 0: %v", n, c.Events().List(0))
	}
	for range 2 {
		if _, err := a.SetBudgets(ctx, api.BudgetsUpdate{Workload: "trainer", TrainWeight: &w}, api.Caller{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := budgetEvents(); n != 1 {
		t.Fatalf("%d budget events after setting one weight twice, want 1: %v", n, c.Events().List(0))
	}
	lat = 300
	if _, err := a.SetBudgets(ctx, api.BudgetsUpdate{LatencyMS: &lat}, api.Caller{}); err != nil {
		t.Fatal(err)
	}
	if n := budgetEvents(); n != 2 {
		t.Fatalf("%d budget events after a real change, want 2", n)
	}
	// One way to print budgets: the events use fulcrumctl budget get's words.
	var reasons []string
	for _, ev := range c.Events().List(0) {
		reasons = append(reasons, ev.Reason)
	}
	all := strings.Join(reasons, "\n")
	for _, want := range []string{
		"budgets of stream trainer changed from shared to {training weight 2}",
		"budgets changed from {latency 400ms (p99), power 35W, rate 20 req/s} to {latency 300ms (p99), power 35W, rate 20 req/s}",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("events lack %q:\n%s", want, all)
		}
	}
}
