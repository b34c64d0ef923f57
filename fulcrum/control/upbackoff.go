package control

import "time"

// upBackoff lengthens rule 6's hold after a step up that a latency budget broke soon
// after: on heavy-tailed turns a few seconds below the band say little, and stepping
// back up every hold_ms went down and up again every 10–15 s, each round a window of
// late requests (two streams with micro-batches: docs/controller.md rule 6). The hold
// doubles with each such step up in a row, up to ResearchBackoffMax times hold_ms; a
// break later than four holds after the step up starts it over.
type upBackoff struct {
	at   time.Time     // when the last step up moved the configuration (zero: none since)
	hold time.Duration // the hold that step up waited
	n    int           // step ups in a row a latency break followed soon after
}

// stepUpHold is how long power and every p99 must stay below the hysteresis band before
// rule 6 steps up. Called with c.mu held.
func (c *Controller) stepUpHold() time.Duration { return c.backedOff(c.cfg.Hold, c.upBack.n) }

// noteStepUp records a step up that moved the configuration. Called with c.mu held.
func (c *Controller) noteStepUp(now time.Time) {
	c.upBack.at, c.upBack.hold = now, c.stepUpHold()
}

// noteLatencyBreak counts a latency break against the last step up: soon after it (within
// four of its holds) the next hold doubles, later it starts over. Called with c.mu held.
func (c *Controller) noteLatencyBreak(now time.Time) {
	u := &c.upBack
	if u.at.IsZero() {
		return
	}
	if now.Sub(u.at) < 4*u.hold {
		u.n++
	} else {
		u.n = 0
	}
	u.at = time.Time{}
}
