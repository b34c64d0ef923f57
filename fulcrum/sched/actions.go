package sched

// Work between turns: actions (mode changes) and profile batches.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// BetweenTurns runs fn while no minibatch is on the GPU: it waits for the running turn to
// end, holds the turn itself while fn runs (new grants wait), then lets scheduling
// resume. The power-mode controller applies mode changes through it. It returns fn's
// error, or ctx's if ctx ends before fn starts.
func (s *Scheduler) BetweenTurns(ctx context.Context, fn func(context.Context) error) error {
	a := &action{ctx: ctx, fn: fn, done: make(chan error, 1)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("scheduler is closed")
	}
	s.actions = append(s.actions, a)
	s.schedule()
	s.unlockAndDeliver()
	select {
	case err := <-a.done:
		return err
	case <-ctx.Done():
		s.mu.Lock()
		n := len(s.actions)
		s.actions = slices.DeleteFunc(s.actions, func(x *action) bool { return x == a })
		removed := len(s.actions) < n
		s.mu.Unlock()
		if removed {
			return ctx.Err()
		}
		// Already started: its result is what happened.
		return <-a.done
	}
}

// Profile asks worker id to run a synthetic batch of the given size at its next turn and
// returns the worker-measured time. It blocks until the release (or ctx ends, in which
// case the request is withdrawn if it has not been granted yet).
func (s *Scheduler) Profile(ctx context.Context, id string, batch int) (time.Duration, error) {
	if batch < 1 || batch > proto.MaxBatch {
		return 0, fmt.Errorf("profile batch %d out of range 1..%d", batch, proto.MaxBatch)
	}
	p := &profileReq{worker: id, batch: batch, done: make(chan profileResult, 1)}
	s.mu.Lock()
	p.queued = s.clock.Now()
	if _, ok := s.workers[id]; !ok {
		s.mu.Unlock()
		return 0, fmt.Errorf("profile: worker %q is not registered (see the daemon's worker list)", id)
	}
	s.profiles = append(s.profiles, p)
	s.schedule()
	s.unlockAndDeliver()
	select {
	case r := <-p.done:
		return r.d, r.err
	case <-ctx.Done():
		s.mu.Lock()
		n := len(s.profiles)
		s.profiles = slices.DeleteFunc(s.profiles, func(x *profileReq) bool { return x == p })
		removed := len(s.profiles) < n
		s.mu.Unlock()
		if removed {
			return 0, ctx.Err()
		}
		r := <-p.done
		return r.d, r.err
	}
}
