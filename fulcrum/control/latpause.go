package control

import (
	"fmt"
	"time"
)

// latencyPause is the latency rule's last resort (docs/controller.md rule 4): a stream's
// p99 broke its budget and no stored configuration has a shorter training turn or a
// smaller batch of that stream, so the step rule has nowhere to go. A stream waits
// behind a training turn; with nothing shorter, only fewer turns keep the p99 — so
// training pauses at the configuration in force for a while, then tries again. A p99
// that breaks again soon after training resumed doubles the pause (heavy-tailed turns
// break it every time; a one-off does not), up to ResearchBackoffMax times LatencyPause.
type latencyPause struct {
	active  bool
	until   time.Time     // when training resumes
	resumed time.Time     // when the last pause ended (zero: none yet)
	last    time.Duration // how long the last pause was
	n       int           // pauses in a row (the doubling)
}

// pauseForLatency pauses training as the latency rule's last resort, or reports why not
// (off, or training paused already). what says which stream broke its budget where, why
// why the step has nowhere to go.
// Called with c.mu held.
func (c *Controller) pauseForLatency(now time.Time, what, why string) bool {
	if c.cfg.LatencyPauseOff || c.sched.Snapshot().TrainingPaused {
		return false
	}
	p := &c.latPause
	// In a row: it broke again before training had run twice as long as the last pause.
	if !p.resumed.IsZero() && now.Sub(p.resumed) < 2*p.last {
		p.n++
	} else {
		p.n = 0
	}
	d := c.backedOff(c.cfg.LatencyPause, p.n)
	p.active, p.until, p.last = true, now.Add(d), d
	c.sched.SetTrainingPaused(true)
	c.lastStep, c.lastLatStep = now, now
	reason := fmt.Sprintf("%s, but %s: training paused for %s at the configuration in force (the last resort; pause %d in a row, doubling while the p99 breaks again soon after training resumes; a trainer that declares micro-batches gives the rule shorter turns to step to)",
		what, why, d, p.n+1)
	c.events.Add(Event{Kind: KindStepDown, Reason: reason})
	c.log.Info(reason)
	return true
}

// endLatencyPause resumes training once the last resort's pause is over (and the plan in
// force runs training: an infeasible plan keeps its own pause). Called with c.mu held.
func (c *Controller) endLatencyPause(now time.Time) {
	p := &c.latPause
	if !p.active || now.Before(p.until) {
		return
	}
	p.active, p.resumed = false, now
	c.lastLatStep = now // judge the p99 on a window with training running again
	if c.cur != nil && c.cur.Predicted.Feasible && !c.microKeep {
		c.sched.SetTrainingPaused(false)
		reason := fmt.Sprintf("training resumed at the configuration in force after the latency rule's %s pause", p.last)
		c.events.Add(Event{Kind: KindStepUp, Reason: reason})
		c.log.Info(reason)
	}
}

// dropLatencyPause ends the last resort without resuming anything itself: a decision
// (a plan, a step, the operator's mode) sets the pause it needs. The doubling is kept:
// a p99 that breaks again soon after still counts in a row. Called with c.mu held.
func (c *Controller) dropLatencyPause(now time.Time) {
	if c.latPause.active {
		c.latPause.active, c.latPause.resumed = false, now
	}
}
