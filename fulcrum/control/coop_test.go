package control

import (
	"context"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/internal/vclock"
)

// TestLockHeldAcrossATurnWaitOnVirtualTime: on a cooperative clock (the daemon on
// virtual time) the controller's lock parks whoever finds it held. An operator's mode
// change holds it while BetweenTurns waits for the running 200 ms training minibatch,
// and only the clock can end that minibatch; a status read meanwhile must wait its turn
// and then see the new mode. With a plain mutex the reader blocks outside the clock and
// the run stops (the clock's watchdog).
func TestLockHeldAcrossATurnWaitOnVirtualTime(t *testing.T) {
	clock := vclock.New(2 * time.Second)
	e := newEnv(t, clock)
	e.seed()
	var trainID string
	deliver := func(g sched.Grant) {
		if g.Worker != trainID {
			return
		}
		clock.AfterFunc(200*time.Millisecond, func() {
			if err := e.sched.Release(trainID, sched.Release{Grant: g.ID, Duration: 200 * time.Millisecond}); err != nil {
				t.Errorf("release: %v", err)
			}
		})
	}
	trainID, _ = e.register(deliver)
	if err := e.sched.Acquire(trainID, 1); err != nil { // the minibatch is on the GPU from t=0
		t.Fatal(err)
	}
	c, err := New(Options{Sched: e.sched, Board: e.board, Store: e.store, Clock: clock, Targets: plan.Targets{LatencyMS: 400, RateRPS: 20}})
	if err != nil {
		t.Fatal(err)
	}
	target := e.modes[1]
	var order []string
	clock.Go(func() {
		if _, err := c.ApplyMode(context.Background(), target); err != nil {
			t.Errorf("apply: %v", err)
		}
		order = append(order, "applied")
	})
	clock.Go(func() {
		st := c.Status()
		order = append(order, "status")
		if st.Current == nil || st.Current.Mode != target {
			t.Errorf("status read while the mode was being applied: current %+v, want %s", st.Current, target)
		}
	})
	if err := clock.RunFor(time.Second); err != nil {
		t.Fatal(err)
	}
	if len(order) != 2 || order[0] != "applied" {
		t.Fatalf("order %v, want the apply to finish before the status read", order)
	}
	if e.board.current() != target {
		t.Fatalf("board at %s, want %s", e.board.current(), target)
	}
}
