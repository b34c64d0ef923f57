package sched

import (
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// RealClock must hand out times carrying Go's monotonic reading: every duration and
// deadline in the scheduler and controller is a Sub/Add on those, so a wall-clock step
// (NTP, an operator's date -s) moves none of them. A time passed through UTC(), Round(0)
// or a serialised form loses the reading; this guards RealClock against that.
func TestRealClockIsMonotonic(t *testing.T) {
	now := RealClock{}.Now()
	if !strings.Contains(now.String(), " m=") {
		t.Fatalf("RealClock.Now() %v carries no monotonic reading; durations would follow wall-clock jumps", now)
	}
}

// A jump of the scheduler's clock far past every deadline while requests wait and
// training holds the turn (e.g. a host suspended for an hour): nothing stalls, the
// waiting requests are dispatched as soon as the turn is free and counted as deadline
// misses, and the latencies recorded are the elapsed times, not negative or wrapped.
func TestClockJumpPastDeadlines(t *testing.T) {
	c := cfg(100*msec, 50*msec, 10*msec)
	// Above the jump: this test is about the clock, not the hold limit (a real suspend
	// does not advance Go's timers; TestHoldLimit covers the limit).
	c.HoldMin = 2 * time.Hour
	h := newHarness(t, c)
	tr := h.register(proto.RoleTrain, "resnet", 8)
	inf := h.register(proto.RoleInfer, "yolo", 4)
	h.must(h.s.Acquire(tr, 1))
	gt := h.one()
	h.must(h.s.Acquire(inf, 1))
	h.arrive(inf, "a", "b")
	h.none() // the turn is training's
	h.clock.Advance(time.Hour)
	h.must(h.s.Release(tr, Release{Grant: gt.ID, Duration: 50 * msec}))
	gi := h.one()
	if gi.Kind != proto.KindInfer || len(gi.RequestIDs) != 2 {
		t.Fatalf("after the jump, grant %+v; want the two waiting requests at once", gi)
	}
	h.release(inf, gi, 10*msec)
	wl, _ := h.s.Snapshot().Workload(proto.RoleInfer, "yolo")
	if wl.Served != 2 || wl.DeadlineMisses != 2 {
		t.Fatalf("after the jump: %+v; want 2 served, both deadline misses", wl)
	}
	if wl.Latency.MaxMS < float64(time.Hour/time.Millisecond) || wl.Latency.P50MS <= 0 {
		t.Fatalf("latency %+v; want the hour the requests waited", wl.Latency)
	}
	// And scheduling goes on normally afterwards.
	h.must(h.s.Acquire(inf, 2))
	h.arrive(inf, "c", "d", "e", "f")
	if g := h.one(); len(g.RequestIDs) != 4 {
		t.Fatalf("after the jump a full batch was not dispatched: %+v", g)
	}
}
