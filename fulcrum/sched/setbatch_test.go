package sched

import (
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// SetInferBatch changes how many queued requests one grant carries, and refuses sizes
// the worker did not register, training workers and unknown ids.
func TestSetInferBatch(t *testing.T) {
	h := newHarness(t, cfg(time.Second, 100*msec, 10*msec))
	id, _, err := h.s.Register(WorkerSpec{Role: proto.RoleInfer, Workload: "i", Batch: 2, BatchSizes: []int{1, 2, 4}}, func(g Grant) {
		h.mu.Lock()
		h.got = append(h.got, g)
		h.mu.Unlock()
	})
	h.must(err)
	tr := h.register(proto.RoleTrain, "t", 8)
	for _, c := range []struct {
		id    string
		batch int
		want  string
	}{{id, 3, "not 3"}, {tr, 2, "train worker"}, {"nobody", 2, "not registered"}, {id, 0, "out of range"}} {
		if err := h.s.SetInferBatch(c.id, c.batch); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SetInferBatch(%s, %d) = %v, want an error containing %q", c.id, c.batch, err, c.want)
		}
	}
	h.must(h.s.SetInferBatch(id, 4))
	if w := h.s.Snapshot().Workers[0]; w.Batch != 4 || len(w.BatchSizes) != 3 {
		t.Fatalf("snapshot after SetInferBatch: %+v", w)
	}
	h.arrive(id, "a", "b", "c", "d", "e")
	h.must(h.s.Acquire(id, 1))
	g := h.one()
	if g.Kind != proto.KindInfer || g.Batch != 4 || len(g.RequestIDs) != 4 {
		t.Fatalf("grant after SetInferBatch(4): %+v; want a full batch of 4", g)
	}
}

// LatencyRecent forgets served requests older than RecentWindow while Latency keeps them.
func TestLatencyRecentWindow(t *testing.T) {
	c := cfg(time.Second, 100*msec, 10*msec)
	c.RecentWindow = 2 * time.Second
	h := newHarness(t, c)
	id := h.register(proto.RoleInfer, "i", 1)
	h.arrive(id, "a")
	h.must(h.s.Acquire(id, 1))
	h.release(id, h.one(), 40*msec)
	wl, _ := h.s.Snapshot().Workload(proto.RoleInfer, "i")
	if wl.LatencyRecent.Count != 1 || wl.Latency.Count != 1 {
		t.Fatalf("right after: recent %+v, window %+v", wl.LatencyRecent, wl.Latency)
	}
	h.clock.Advance(3 * time.Second)
	wl, _ = h.s.Snapshot().Workload(proto.RoleInfer, "i")
	if wl.LatencyRecent.Count != 0 || wl.Latency.Count != 1 {
		t.Fatalf("3 s later: recent %+v (want empty), window %+v (want 1)", wl.LatencyRecent, wl.Latency)
	}
}
