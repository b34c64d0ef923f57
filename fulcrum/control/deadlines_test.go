package control

import (
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// The scheduler's deadlines come from the controller's targets only (docs/design.md §9,
// issue 29): at New, on a shared change, on a workload's own budget, on reset — and
// a refused change leaves them as they were.
func TestSchedulerDeadlinesFollowTheTargets(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	c := e.controller(Config{}, plan.Targets{LatencyMS: 250, PowerMW: 35000, RateRPS: 20})
	e.register(nil)
	check := func(when string, sharedMS, inferMS float64) {
		t.Helper()
		snap := e.sched.Snapshot()
		wl, _ := snap.Workload(proto.RoleInfer, tInfer)
		if snap.LatencyBudgetMS != sharedMS || wl.LatencyBudgetMS != inferMS {
			t.Fatalf("%s: the scheduler holds %v ms (shared) and %v ms for %s; the targets say %v and %v",
				when, snap.LatencyBudgetMS, wl.LatencyBudgetMS, tInfer, sharedMS, inferMS)
		}
		tg := c.Targets()
		if tg.LatencyMS != sharedMS || tg.LatencyOf(tInfer) != inferMS {
			t.Fatalf("%s: targets %+v; want %v ms shared, %v ms for %s", when, tg, sharedMS, inferMS, tInfer)
		}
	}
	check("at New", 250, 250)
	if err := c.SetTargets(plan.Targets{LatencyMS: 120, PowerMW: 35000, RateRPS: 20}); err != nil {
		t.Fatal(err)
	}
	check("after a shared change", 120, 120)
	if err := c.SetStreamTarget(tInfer, StreamTarget{LatencyMS: 60}, nil); err != nil {
		t.Fatal(err)
	}
	check("after the stream's own budget", 120, 60)
	if err := c.SetTargets(plan.Targets{LatencyMS: 90, PowerMW: 35000, RateRPS: 20}); err != nil {
		t.Fatal(err)
	}
	check("after another shared change", 90, 60)
	if err := c.SetTargets(plan.Targets{LatencyMS: 0.01}); err == nil {
		t.Fatal("a latency budget of 0.01 ms was accepted")
	}
	if err := c.SetTargets(plan.Targets{LatencyMS: 70, Streams: map[string]StreamTarget{tInfer: {LatencyMS: 30}}}); err == nil {
		t.Fatal("SetTargets took per-workload targets (they are SetStreamTarget's)")
	}
	check("after refused changes", 90, 60)
	if err := c.ResetBudgets(nil); err != nil {
		t.Fatal(err)
	}
	check("after reset", 250, 250)
}
