package control

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// A stream whose requests are served near the end of their budget grows its learned
// admission room: the controller reports it as an event (one per RoomEventEvery,
// however many changes) and judges plans with the margin plus that room, as the
// scheduler applies it.
func TestLearnedRoomReachesDecisionAndEvents(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.sched = sched.New(sched.Config{TrustReportedDurations: true, Margin: 5 * time.Millisecond,
		RoomMaxFrac: 0.5, RoomInterval: time.Second}, e.clock, nil)
	e.sched.SetLatencyBudget(400 * time.Millisecond) // the controller sets its own at New
	// Grants may be delivered from the controller's goroutines (c.Step's actions) too.
	var mu sync.Mutex
	var grants []sched.Grant
	_, in := e.register(func(g sched.Grant) {
		mu.Lock()
		grants = append(grants, g)
		mu.Unlock()
	})
	taken := func() []sched.Grant {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(grants)
	}
	c := e.controller(Config{}, plan.Targets{LatencyMS: 400, PowerMW: 35000, RateRPS: 20})
	if m := c.Rules().Admission.MarginMS; m != 5 {
		t.Fatalf("decision margin %v ms before any room was learned, want the configured 5", m)
	}
	// Each request arrives 390 ms old and is served within 1 ms: p99 390 ms, in the
	// 5 % guard band under 400 ms.
	serve := func(n int) {
		for i := range n {
			mu.Lock()
			grants = nil
			mu.Unlock()
			if err := e.sched.Acquire(in, 0); err != nil {
				t.Fatal(err)
			}
			if err := e.sched.Arrivals(in, []proto.Request{{ID: fmt.Sprint(e.clock.Now().UnixNano(), i), AgeMS: 390}}); err != nil {
				t.Fatal(err)
			}
			// Due at once; a between-turns action the controller queued may run first.
			got := taken()
			for deadline := time.Now().Add(10 * time.Second); len(got) == 0 && time.Now().Before(deadline); got = taken() {
				time.Sleep(time.Millisecond)
			}
			if len(got) != 1 {
				t.Fatalf("request %d: %d grants, want its batch at once (it is due)", i, len(got))
			}
			e.clock.Advance(time.Millisecond)
			if err := e.sched.Release(in, sched.Release{Grant: got[0].ID, Duration: time.Millisecond}); err != nil {
				t.Fatal(err)
			}
			e.clock.Advance(100 * time.Millisecond)
			c.Step(t.Context())
		}
	}
	serve(110) // 11 s: two evaluations with ≥ 50 latencies each
	wl, _ := e.sched.Snapshot().Workload(proto.RoleInfer, tInfer)
	if wl.RoomChanges < 2 || wl.RoomLearnedMS <= 0 || wl.AdmissionRoomMS != 5+wl.RoomLearnedMS {
		t.Fatalf("room %v ms (learned %v ms) after %d changes: want it grown at least twice", wl.AdmissionRoomMS, wl.RoomLearnedMS, wl.RoomChanges)
	}
	if m := c.Rules().Admission.MarginMS; m != 5+wl.RoomLearnedMS {
		t.Fatalf("decision margin %v ms, want the scheduler's room %v ms", m, 5+wl.RoomLearnedMS)
	}
	if n := countKind(c.Events().List(0), KindRoom); n != 1 {
		t.Fatalf("%d admission_room events for %d changes within %v: want 1 (rate-limited)", n, wl.RoomChanges, RoomEventEvery)
	}
	// The event says which rule moved the room: here the latencies near the budget.
	for _, ev := range c.Events().List(0) {
		if ev.Kind == KindRoom && !strings.Contains(ev.Reason, "the last because") {
			t.Fatalf("admission_room event %q: want the rule behind the change named", ev.Reason)
		}
	}
	serve(300) // 30 s more
	if n := countKind(c.Events().List(0), KindRoom); n != 2 {
		t.Fatalf("%d admission_room events after %v more: want 2", n, RoomEventEvery)
	}
}
