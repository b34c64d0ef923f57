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
