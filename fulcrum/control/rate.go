package control

import (
	"math"
	"time"
)

// rateMeter measures one inference stream's arrival rate from its request counter: the
// mean since the stream appeared during the warm-up (an EWMA started at 0 would
// under-estimate the rate the first plan is made for), then an EWMA of the counter's
// slope with time constant tau.
type rateMeter struct {
	rate   float64
	init   bool
	since  time.Time // when the stream appeared (the warm-up's start)
	start  uint64    // the counter then
	last   uint64
	lastAt time.Time
	// planned is the rate the plan in force was made for (several streams; the pair
	// keeps its own).
	planned float64
}

// observe takes the stream's request counter at now.
func (r *rateMeter) observe(reqs uint64, now time.Time, warmup, tau time.Duration) {
	switch {
	case !r.init:
		r.init, r.start, r.rate = true, reqs, 0
	case now.Sub(r.since) <= warmup && now.After(r.since):
		r.rate = float64(reqs-r.start) / now.Sub(r.since).Seconds()
	case now.After(r.lastAt):
		dt := now.Sub(r.lastAt).Seconds()
		inst := float64(reqs-r.last) / dt
		a := 1 - math.Exp(-dt/tau.Seconds())
		r.rate += a * (inst - r.rate)
	}
	r.last, r.lastAt = reqs, now
}

// ready reports that the rate has been measured for warmup.
func (r *rateMeter) ready(now time.Time, warmup time.Duration) bool {
	return r.init && now.Sub(r.since) >= warmup
}
