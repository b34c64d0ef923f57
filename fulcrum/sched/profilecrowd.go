package sched

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// profileCrowdFactor: a profile batch the admission test has kept out for this many
// ProfileWaits, without a single moment at which no inference request was queued, is
// refused with ErrProfileCrowdedOut (docs/runtime.md "Profile batches").
const profileCrowdFactor = 3

// ErrProfileCrowdedOut: inference kept a request queued the whole time a profile batch
// waited, so the batch could run only by making requests miss their deadlines. At such
// a mode inference alone keeps the GPU busy: the live profiler judges it over the
// latency budget and moves on.
var ErrProfileCrowdedOut = errors.New("inference requests stayed queued the whole time: no room for a profile batch without missing deadlines")

// crowdBound is how long a profile batch may wait before it is refused (0: never).
func (s *Scheduler) crowdBound() time.Duration {
	return profileCrowdFactor * s.cfg.ProfileWait
}

// refuseCrowded refuses, with ErrProfileCrowdedOut, every profile batch whose worker
// waits for it and that has waited the crowd bound while inference requests are queued
// now. Any scheduling moment with no request queued would have granted it (step 3), so
// inference kept the GPU busy the whole time. Called first in schedule,
// with the GPU free: at a mode where an inference batch is due at every call, step 1
// grants it every time and the profile path is never reached.
func (s *Scheduler) refuseCrowded(now time.Time) {
	b := s.crowdBound()
	if b <= 0 || len(s.profiles) == 0 || s.inferenceIdle() {
		return
	}
	s.profiles = slices.DeleteFunc(s.profiles, func(p *profileReq) bool {
		w := s.workers[p.worker]
		if w == nil || !w.wantTurn || now.Sub(p.queued) < b {
			return false
		}
		s.log.Warn("refusing a profile batch: inference requests stayed queued the whole time it waited", "worker", w.id,
			"batch", p.batch, "waited_ms", ms(now.Sub(p.queued)))
		p.finish(profileResult{err: fmt.Errorf("profile batch %d on worker %s after %s: %w", p.batch, w.id, now.Sub(p.queued), ErrProfileCrowdedOut)})
		return true
	})
}
