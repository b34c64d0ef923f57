package sched

import (
	"errors"
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

// crowdedOut reports that p has waited past the crowd bound; called only while the
// admission test keeps p out, so no moment with the inference queue empty came (one
// would have granted p as overdue once it had waited ProfileWait).
func (s *Scheduler) crowdedOut(p *profileReq, now time.Time) bool {
	b := s.crowdBound()
	return b > 0 && now.Sub(p.queued) >= b
}
