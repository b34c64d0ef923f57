package sched

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// At a mode where inference keeps a request queued at every moment (each batch takes as
// long as the gap between arrivals), a profile batch longer than the latency budget
// can neither pass the admission test nor find the queue empty. It must not wait
// forever (the live search stalled for minutes on such modes) and must not be forced in
// at the cost of deadlines: past profileCrowdFactor × ProfileWait it is refused with
// ErrProfileCrowdedOut, and every request is still served in time.
//
// With batch size 4 the queued request is served early as the profile batch's blocker
// (step 3); with batch size 1 every queued request is a full batch, due at once (step 1),
// so the profile path is never reached: the refusal must come before step 1. Seen in a
// three-stream search at 1 core, 345.6 MHz: no profile batch granted nor refused in
// 4.5 minutes.
func TestProfileCrowdedOutBySaturatedInference(t *testing.T) {
	for _, batch := range []int{4, 1} {
		t.Run(fmt.Sprintf("batch%d", batch), func(t *testing.T) { testProfileCrowdedOut(t, batch) })
	}
}

func testProfileCrowdedOut(t *testing.T, batch int) {
	c := cfg(100*msec, 10*msec, 5*msec)
	c.ProfileWait = 500 * msec
	h := newHarness(t, c)
	inf := h.register(proto.RoleInfer, "yolo", batch)
	tr := h.register(proto.RoleTrain, "resnet18", 32)
	h.must(h.s.Acquire(tr, 0))
	h.release(tr, h.one(), 10*msec) // warm-up
	h.must(h.s.Acquire(tr, 0))
	h.release(tr, h.one(), 300*msec) // expected ≥ 300 ms > L = 100 ms
	h.s.SetTrainingPaused(true)      // as the live profiler does while it measures a mode
	h.must(h.s.Acquire(tr, 0))
	h.must(h.s.Acquire(inf, 0))

	type res struct {
		d   time.Duration
		err error
	}
	done := make(chan res, 1)
	var held *Grant // the inference batch being served
	var asked time.Time
	take := func(step int) {
		for _, g := range h.grants() {
			switch g.Kind {
			case proto.KindProfile:
				h.s.mu.Lock()
				q, ids, turn := len(h.s.workers[inf].queue), len(h.s.workers[inf].ids), h.s.turn != nil
				h.s.mu.Unlock()
				t.Fatalf("profile batch granted at step %d with inference saturating the GPU (now: %d queued, %d in service, turn %v, held %v)", step, q, ids, turn, held != nil)
			case proto.KindTrain:
				t.Fatalf("training minibatch granted at step %d while training is paused", step)
			default:
				if held != nil {
					t.Fatalf("two inference grants at once (step %d)", step)
				}
				held = &g
			}
		}
	}
	var got *res
	for i := 0; i < 400 && got == nil; i++ {
		if i == 10 {
			h.s.mu.Lock()
			asked = h.clock.Now()
			h.s.mu.Unlock()
			go func() {
				d, err := h.s.Profile(context.Background(), tr, 32)
				done <- res{d, err}
			}()
			for waited := 0; ; waited++ {
				h.s.mu.Lock()
				n := len(h.s.profiles)
				h.s.mu.Unlock()
				if n > 0 {
					break
				}
				if waited > 5000 {
					t.Fatal("profile request never queued")
				}
				time.Sleep(time.Millisecond)
			}
		}
		// A request arrives every 20 ms and each batch takes 20 ms: the batch in service
		// is released only after the next request has arrived, so the queue is never
		// empty when the scheduler looks.
		prev := held // granted in an earlier step: released only after this arrival
		held = nil
		h.arrive(inf, fmt.Sprint(i))
		take(i)
		if prev != nil {
			h.release(inf, *prev, 20*msec)
			h.must(h.s.Acquire(inf, 0))
			take(i)
		} else {
			h.clock.Advance(20 * msec)
			take(i)
		}
		if i >= 10 {
			// The refusal is delivered under the scheduler's lock, before Release returns.
			for spin := 0; spin < 20; spin++ {
				select {
				case r := <-done:
					got = &r
				default:
				}
				if got != nil || h.clock.Now().Sub(asked) < profileCrowdFactor*c.ProfileWait {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	if got == nil {
		t.Fatal("the profile batch neither ran nor was refused: a live search stalls at this mode")
	}
	if !errors.Is(got.err, ErrProfileCrowdedOut) {
		t.Fatalf("profile result %v, %v; want ErrProfileCrowdedOut", got.d, got.err)
	}
	if waited := h.clock.Now().Sub(asked); waited < profileCrowdFactor*c.ProfileWait {
		t.Fatalf("refused after %v on the fake clock; want at least %d × ProfileWait = %v", waited, profileCrowdFactor, profileCrowdFactor*c.ProfileWait)
	}
	ws, _ := h.s.Snapshot().Workload(proto.RoleInfer, "yolo")
	if ws.Served == 0 || ws.DeadlineMisses != 0 {
		t.Fatalf("%d requests served, %d deadlines missed; want requests served and none missed", ws.Served, ws.DeadlineMisses)
	}
}
