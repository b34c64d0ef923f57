package sched

// Work between turns: actions (mode changes) and profile batches.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	samplestats "github.com/fulcrum-edge/fulcrum/internal/stats"
)

// BetweenTurns runs fn while no minibatch is on the GPU: it waits for the running turn to
// end, holds the turn itself while fn runs (new grants wait), then lets scheduling
// resume. The power-mode controller applies mode changes through it. It returns fn's
// error, or ctx's if ctx ends before fn starts.
func (s *Scheduler) BetweenTurns(ctx context.Context, fn func(context.Context) error) error {
	a := &action{ctx: ctx, fn: fn, done: NewEvent(s.clock)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("scheduler is closed")
	}
	s.actions = append(s.actions, a)
	s.schedule()
	s.unlockAndDeliver()
	if a.done.Wait(ctx) == nil {
		return a.err
	}
	s.mu.Lock()
	n := len(s.actions)
	s.actions = slices.DeleteFunc(s.actions, func(x *action) bool { return x == a })
	removed := len(s.actions) < n
	s.mu.Unlock()
	if removed {
		return ctx.Err()
	}
	// Already started: its result is what happened.
	_ = a.done.Wait(context.Background())
	return a.err
}

// ErrProfilesDeclined: the worker said at registration that it runs no profile batches
// (its client has no on_profile handler).
var ErrProfilesDeclined = errors.New("the worker declined profile batches at registration (its client has no on_profile handler; set one to profile this workload live)")

// RealBatchMS returns the median time (ms) of the latest real — training or inference,
// not profile — batches of size batch that workload (role, name) ran and released at or
// after since (the zero time: at whatever modes they ran), and how many there are (at
// most realKeep). A profile batch far faster than this did not run the workload.
func (s *Scheduler) RealBatchMS(role, name string, batch int, since time.Time) (float64, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	wl, ok := s.workloads[role+"/"+name]
	if !ok {
		return 0, 0
	}
	var ms []float64
	for _, r := range wl.real[batch] {
		if !r.at.Before(since) {
			ms = append(ms, r.ms)
		}
	}
	if len(ms) == 0 {
		return 0, 0
	}
	return samplestats.Median(ms), len(ms)
}

// realKeep is how many real batch times per size RealBatchMS keeps.
const realKeep = 16

// realBatch is a real batch's time (ms) and when it was released.
type realBatch struct {
	at time.Time
	ms float64
}

// addReal records a real batch's time (ms), released at now.
func (wl *workload) addReal(batch int, ms float64, now time.Time) {
	if wl.real == nil {
		wl.real = map[int][]realBatch{}
	}
	xs := append(wl.real[batch], realBatch{at: now, ms: ms})
	if len(xs) > realKeep {
		xs = xs[len(xs)-realKeep:]
	}
	wl.real[batch] = xs
}

// Profile asks worker id to run a synthetic batch of the given size at its next turn and
// returns the worker-measured time. It blocks until the release (or ctx ends, in which
// case the request is withdrawn if it has not been granted yet).
func (s *Scheduler) Profile(ctx context.Context, id string, batch int) (time.Duration, error) {
	if batch < 1 || batch > proto.MaxBatch {
		return 0, fmt.Errorf("profile batch %d out of range 1..%d", batch, proto.MaxBatch)
	}
	p := &profileReq{worker: id, batch: batch, done: NewEvent(s.clock)}
	s.mu.Lock()
	p.queued = s.clock.Now()
	w, ok := s.workers[id]
	if !ok {
		s.mu.Unlock()
		return 0, fmt.Errorf("profile: worker %q is not registered (see the daemon's worker list)", id)
	}
	if w.spec.NoProfiles {
		s.mu.Unlock()
		return 0, fmt.Errorf("profile: worker %s (%s): %w", id, w.spec.Workload, ErrProfilesDeclined)
	}
	s.profiles = append(s.profiles, p)
	s.schedule()
	s.unlockAndDeliver()
	if p.done.Wait(ctx) == nil {
		return p.res.d, p.res.err
	}
	s.mu.Lock()
	n := len(s.profiles)
	s.profiles = slices.DeleteFunc(s.profiles, func(x *profileReq) bool { return x == p })
	removed := len(s.profiles) < n
	s.mu.Unlock()
	if removed {
		return 0, ctx.Err()
	}
	_ = p.done.Wait(context.Background())
	return p.res.d, p.res.err
}
