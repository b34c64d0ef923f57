package sched

import (
	"fmt"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// Each stream's requests get its own deadline: a partial batch of the stream with the
// tighter budget falls due first, the other one waits for its own budget.
func TestStreamLatencyBudgets(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 50*msec, 20*msec))
	cam := h.register(proto.RoleInfer, "cam", 8)
	cls := h.register(proto.RoleInfer, "cls", 8)
	h.must(h.s.SetStreamLatencyBudgets(map[string]time.Duration{"cam": 50 * msec, "gone": 0}))
	h.must(h.s.Acquire(cam, 0))
	h.must(h.s.Acquire(cls, 0))
	h.arrive(cam, "c1")
	h.arrive(cls, "k1")
	h.clock.Advance(29 * msec) // cam's slack: 50 − 20 = 30 ms
	h.none()
	h.clock.Advance(1 * msec)
	g := h.one()
	if g.Worker != cam || fmt.Sprint(g.RequestIDs) != "[c1]" || g.Deadline != 20*msec {
		t.Fatalf("grant %+v: want cam's partial batch [c1] with 20ms left, at its own 50ms budget", g)
	}
	h.release(cam, g, 20*msec) // t = 50 ms
	h.clock.Advance(29 * msec) // t = 79 ms: cls's slack (100 − 20) not gone
	h.none()
	h.clock.Advance(1 * msec)
	g = h.one()
	if g.Worker != cls || fmt.Sprint(g.RequestIDs) != "[k1]" || g.Deadline != 20*msec {
		t.Fatalf("grant %+v: want cls's batch at the shared 100ms budget", g)
	}
	st, _ := h.s.Snapshot().Workload(proto.RoleInfer, "cam")
	if st.LatencyBudgetMS != 50 {
		t.Fatalf("cam's budget in the snapshot: %v ms, want 50", st.LatencyBudgetMS)
	}
	st, _ = h.s.Snapshot().Workload(proto.RoleInfer, "cls")
	if st.LatencyBudgetMS != 100 {
		t.Fatalf("cls's budget in the snapshot: %v ms, want the shared 100", st.LatencyBudgetMS)
	}
	big := map[string]time.Duration{}
	for i := range MaxStreamBudgets + 1 {
		big[fmt.Sprint(i)] = msec
	}
	if err := h.s.SetStreamLatencyBudgets(big); err == nil {
		t.Fatal("more than MaxStreamBudgets budgets accepted")
	}
	st, _ = h.s.Snapshot().Workload(proto.RoleInfer, "cam")
	if st.LatencyBudgetMS != 50 {
		t.Fatalf("a refused update changed cam's budget to %v ms", st.LatencyBudgetMS)
	}
}

// Training turns are time shares: with equal weights a workload whose minibatch takes 3×
// as long gets a third of the minibatches (equal GPU time); weight 3 gives it as many
// minibatches (3× the time). A workload that joins late starts level, without catching up
// on the time it was away; a worker that does not come back within TrainRejoinGrace does
// not hold the others up.
func TestTrainingTimeShares(t *testing.T) {
	run := func(h *harness, ids []string, durs map[string]time.Duration, n int) map[string]int {
		counts := map[string]int{}
		for range n {
			g := h.one()
			counts[g.Worker]++
			h.release(g.Worker, g, durs[g.Worker])
			h.must(h.s.Acquire(g.Worker, 0))
		}
		return counts
	}
	h := newHarness(t, cfg(100*msec, 10*msec, 10*msec))
	fast, slow := h.register(proto.RoleTrain, "fast", 8), h.register(proto.RoleTrain, "slow", 8)
	durs := map[string]time.Duration{fast: 10 * msec, slow: 30 * msec}
	h.must(h.s.Acquire(fast, 0))
	h.must(h.s.Acquire(slow, 0))
	if c := run(h, nil, durs, 40); c[fast] != 30 || c[slow] != 10 {
		t.Fatalf("equal weights: %v minibatches, want 30 fast and 10 slow (equal GPU time)", c)
	}
	h.must(h.s.SetTrainWeights(map[string]float64{"slow": 3}))
	if c := run(h, nil, durs, 40); c[fast] != 20 || c[slow] != 20 {
		t.Fatalf("slow weighted 3: %v minibatches, want 20 each (GPU time 1:3)", c)
	}
	if err := h.s.SetTrainWeights(map[string]float64{"slow": 0}); err == nil {
		t.Fatal("a zero weight accepted")
	}
	// The least-served worker releases and does not acquire again: after the grace the
	// other workload's minibatch runs.
	h.must(h.s.SetTrainWeights(nil))
	g := h.one() // granted before the reset
	for g.Worker != fast {
		h.release(g.Worker, g, durs[g.Worker])
		h.must(h.s.Acquire(g.Worker, 0))
		g = h.one()
	}
	h.release(fast, g, 10*msec) // fast 10 ms, slow 30 ms since the reset
	h.none()                    // fast is the least served: its acquire is awaited
	h.clock.Advance(TrainRejoinGrace)
	if g = h.one(); g.Worker != slow {
		t.Fatalf("after the grace: grant to %s, want slow", g.Worker)
	}
	h.release(slow, g, 30*msec)
	h.must(h.s.Acquire(fast, 0))
	h.must(h.s.Acquire(slow, 0))
	// A late joiner gets its share from now on, not the time it missed.
	late := h.register(proto.RoleTrain, "late", 8)
	durs[late] = 10 * msec
	h.must(h.s.Acquire(late, 0))
	c := run(h, nil, durs, 70)
	if c[late] < 25 || c[late] > 35 || c[fast] < 25 || c[fast] > 35 {
		t.Fatalf("after a third workload joined: %v minibatches, want fast and late about level (30 each) and slow a third of that", c)
	}
}
