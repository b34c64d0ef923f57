package lifetime_test

import (
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon"
	"github.com/fulcrum-edge/fulcrum/fulcrum/lifetime"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// windowAfterPlan counts the seconds after the first plan the scheduler's own recent p99
// window (every request in it, the search's too) was over the budget: what the harness
// counted as broken after the plan before it judged the plan's requests only.
type windowAfterPlan struct {
	budgetMS float64
	minCount int
	seconds  int
}

func (w *windowAfterPlan) probe() lifetime.Probe {
	return lifetime.Probe{At: time.Second, Every: time.Second, Do: func(in *lifetime.Instant) {
		planned := false
		for _, e := range in.Events() {
			planned = planned || e.Kind == control.KindApply && e.Err == "" && e.Mode != nil
		}
		if !planned {
			return
		}
		wl, ok := in.Snapshot().Workload(proto.RoleInfer, "mobilenetv3-infer")
		if r := wl.LatencyRecent; ok && r.Count >= w.minCount && r.P99MS > w.budgetMS {
			w.seconds++
		}
	}}
}

// TestSearchLateRequestsAreNotBreaksAfterThePlan (issue 32/31): the first search's
// whole-minibatch profile turns at slow modes leave late requests in the scheduler's 5 s
// recent window after the 130 ms plan is applied (k = 1; until 2026-11-27 the scenario
// was micro-batches beside 60 ms, where the search no longer runs turns over the room). A run in which no request that arrived
// after the plan was late broke no budget after it: the harness judges the time after
// the plan by the same p99-over-the-recent-window rule over the requests that arrived
// after the plan, and counts the window's carry-over in the run's broken time only.
// Before, the harness counted those seconds after the plan (4 s at seed 1, 5 s at seed 4).
func TestSearchLateRequestsAreNotBreaksAfterThePlan(t *testing.T) {
	carried := 0
	for _, seed := range []int64{1, 4} {
		sc := microPair(afterPlanBudgetMS, 6*time.Minute, seed, false)
		w := &windowAfterPlan{budgetMS: afterPlanBudgetMS, minCount: daemon.DefaultOptions().Control.MinLatency}
		sc.Probes = []lifetime.Probe{w.probe()}
		r := run(t, sc)
		s := r.Streams[0]
		t.Logf("seed %d: first plan %.1f s; the scheduler's window over the budget %d s after it; broken after the plan %.0f s of %.0f s; %d of %d requests late after the plan",
			seed, r.FirstPlanS, w.seconds, r.LatencyBrokenAfterPlanS, r.LatencyBrokenS, s.LateAfterPlan, s.ServedAfterPlan)
		if r.FirstPlanS < 0 || s.ServedAfterPlan == 0 {
			t.Fatalf("seed %d: no plan, or no request after it, in %s", seed, sc.Duration)
		}
		if r.LatencyBrokenAfterPlanS > r.LatencyBrokenS {
			t.Errorf("seed %d: %.0f s broken after the plan, more than the run's %.0f s", seed, r.LatencyBrokenAfterPlanS, r.LatencyBrokenS)
		}
		if s.LateAfterPlan > 0 {
			continue
		}
		if w.seconds > 0 {
			carried++
		}
		if r.LatencyBrokenAfterPlanS != 0 {
			t.Errorf("seed %d: no request that arrived after the plan was late, yet %.0f s broken after it (the scheduler's window, holding the search's requests, was over the budget %d s)",
				seed, r.LatencyBrokenAfterPlanS, w.seconds)
		}
		if r.LatencyBrokenS < float64(w.seconds) {
			t.Errorf("seed %d: the run's broken time %.0f s leaves out the %d s the search's requests kept the window over the budget after the plan", seed, r.LatencyBrokenS, w.seconds)
		}
	}
	if carried == 0 {
		t.Fatal("no run left the search's late requests in the window after the plan with none late after it: the scenario no longer tests the rule")
	}
}

// afterPlanBudgetMS: a budget whose room holds a whole resnet18 minibatch (≥ 99 ms) at
// the AGX's fastest modes only, so that the search's visits to slower modes run turns
// over it (k = 1: nothing to leave out) and the plan keeps it.
const afterPlanBudgetMS = 130
