package sched

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// A profile batch longer than the latency budget can never pass the admission test while
// requests keep arriving; it must run at the first moment no request is queued, after the
// waiting ones are served.
func TestOverdueProfileRunsWhenQueueIsEmpty(t *testing.T) {
	c := cfg(100*msec, 10*msec, 5*msec)
	c.ProfileWait = 500 * msec
	h := newHarness(t, c)
	inf := h.register(proto.RoleInfer, "yolo", 4)
	tr := h.register(proto.RoleTrain, "resnet18", 32)
	h.must(h.s.Acquire(tr, 0))
	h.release(tr, h.one(), 10*msec) // warm-up
	h.must(h.s.Acquire(tr, 0))
	h.release(tr, h.one(), 300*msec) // expected ≥ 300 ms > L = 100 ms
	h.must(h.s.Acquire(tr, 0))
	h.must(h.s.Acquire(inf, 0))

	type res struct {
		d   time.Duration
		err error
	}
	done := make(chan res, 1)
	// Requests every 20 ms for 2 s; every grant is released at once (training 300 ms,
	// inference 2 ms, the profile 300 ms). The profile must run, and only when no request
	// is queued.
	profiled := false
	queueLen := func() int {
		h.s.mu.Lock()
		defer h.s.mu.Unlock()
		return len(h.s.workers[inf].queue)
	}
	lastQueue := 0
	handle := func(step, queuedAtGrant int) {
		for _, g := range h.grants() {
			switch g.Kind {
			case proto.KindProfile:
				if queuedAtGrant < 0 {
					queuedAtGrant = queueLen()
				}
				if queuedAtGrant > 0 {
					t.Fatalf("profile granted with %d request(s) queued (step %d)", queuedAtGrant, step)
				}
				profiled = true
				h.release(tr, g, 300*msec)
			case proto.KindTrain:
				h.release(tr, g, 300*msec)
				h.must(h.s.Acquire(tr, 0))
			default:
				h.release(inf, g, 2*msec)
				h.must(h.s.Acquire(inf, 0))
			}
		}
	}
	for i := 0; i < 100 && !profiled; i++ {
		if i == 10 { // the arrival rate is established: ask for the profile
			go func() {
				d, err := h.s.Profile(context.Background(), tr, 32)
				done <- res{d, err}
			}()
			for waited := 0; ; waited++ {
				h.s.mu.Lock()
				n := len(h.s.profiles)
				granted := h.s.turn != nil && h.s.turn.grant.Kind == proto.KindProfile // the queue was empty
				h.s.mu.Unlock()
				if n > 0 || granted {
					break
				}
				if waited > 5000 {
					t.Fatal("profile request never queued")
				}
				time.Sleep(time.Millisecond)
			}
		}
		// Grants the clock advance caused were made with the queue as it was at the end of
		// the previous step; grants after an arrival or a release, with the queue as now.
		handle(i, lastQueue)
		h.arrive(inf, fmt.Sprint(i))
		for round := 0; round < 3; round++ {
			handle(i, -1)
		}
		lastQueue = queueLen()
		h.clock.Advance(20 * msec)
	}
	if !profiled {
		t.Fatal("the overdue profile batch was never granted")
	}
	if r := <-done; r.err != nil || r.d != 300*msec {
		t.Fatalf("profile result %v, %v; want 300ms", r.d, r.err)
	}
}

// A profile batch over the admission room runs at the first moment no request is queued,
// not after ProfileWait: with the queue empty the admission test refuses it at every later
// moment too, so the wait only left the GPU idle while a search waited (about 1 s a
// profile batch on fulcrumd's defaults, 6–10 s a mode beside a 50 ms budget).
func TestProfileOverTheRoomDoesNotWait(t *testing.T) {
	c := cfg(100*msec, 10*msec, 5*msec)
	c.ProfileWait = 500 * msec
	h := newHarness(t, c)
	inf := h.register(proto.RoleInfer, "yolo", 4)
	tr := h.register(proto.RoleTrain, "resnet18", 32)
	h.must(h.s.Acquire(tr, 0))
	h.release(tr, h.one(), 10*msec) // warm-up
	h.must(h.s.Acquire(tr, 0))
	h.release(tr, h.one(), 300*msec) // expected ≥ 300 ms > L = 100 ms
	h.must(h.s.Acquire(tr, 0))
	h.must(h.s.Acquire(inf, 0))
	// Requests every 50 ms, served at once: the queue is empty between them.
	serve := func() (profiled bool) {
		for _, g := range h.grants() {
			switch g.Kind {
			case proto.KindProfile:
				profiled = true
				h.release(tr, g, 300*msec)
			case proto.KindTrain:
				h.release(tr, g, 300*msec)
				h.must(h.s.Acquire(tr, 0))
			default:
				h.release(inf, g, 2*msec)
				h.must(h.s.Acquire(inf, 0))
			}
		}
		return profiled
	}
	h.s.SetTrainingPaused(true) // as the live profiler does while it measures a mode
	for i := range 10 {
		h.arrive(inf, fmt.Sprint(i))
		serve()
		h.clock.Advance(50 * msec)
		serve()
	}
	done := make(chan error, 1)
	go func() {
		_, err := h.s.Profile(context.Background(), tr, 32)
		done <- err
	}()
	asked := h.clock.Now()
	for i := 0; ; i++ {
		if serve() {
			break
		}
		if i > 20000 {
			t.Fatal("the profile batch was never granted")
		}
		if i%100 == 99 { // let the Profile goroutine queue its request, then move time on
			h.arrive(inf, fmt.Sprint("late", i))
			h.clock.Advance(50 * msec)
		}
		time.Sleep(10 * time.Microsecond)
	}
	if waited := h.clock.Now().Sub(asked); waited >= c.ProfileWait {
		t.Fatalf("the profile batch over the room waited %v of the fake clock with the queue empty; want it at the first idle moment, before ProfileWait (%v)", waited, c.ProfileWait)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
