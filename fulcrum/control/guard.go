package control

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// checkDegraded falls back to the lowest-power known mode when power has not been
// readable for PowerFail (with a power budget), and leaves degraded mode when it is
// readable again. It reports whether the step should end here.
func (c *Controller) checkDegraded(ctx context.Context, now time.Time) bool {
	lastOK, fails, lastErr := c.power.Health()
	down := fails > 0 && (lastOK.IsZero() || now.Sub(lastOK) >= c.cfg.PowerFail)
	switch {
	case down && c.degraded == "":
		c.degraded = fmt.Sprintf("board power unreadable for %s (%d reads failed; last error: %v)", now.Sub(lastOK).Round(time.Millisecond), fails, lastErr)
		if lastOK.IsZero() {
			c.degraded = fmt.Sprintf("board power has never been readable (%d reads failed; last error: %v)", fails, lastErr)
		}
		ev := Event{Kind: KindDegraded, Reason: c.degraded + "; falling back to the lowest-power known mode (check fulcrumctl board power)"}
		if c.targets.PowerMW == 0 {
			ev.Reason = c.degraded + "; no power budget is set, so the mode is kept"
			c.events.Add(ev)
			return false
		}
		pick, space, ok := c.lowestPower()
		if !ok {
			ev.Reason = c.degraded + "; no stored profile to pick the lowest-power mode from: keeping the present mode"
			c.events.Add(ev)
			return true
		}
		held := c.held // the degraded step leaves an operator's hold as it is
		c.noteStep(stepCause{power: true, latency: true})
		c.held = held
		c.applyStep(ctx, KindDegraded, ev.Reason, pick, space)
		return true
	case down:
		return true
	case !down && c.degraded != "":
		c.events.Add(Event{Kind: KindDegraded, Reason: "board power is readable again; leaving degraded mode and re-planning"})
		c.degraded = ""
		c.needPlan = "power readable again"
		return false
	}
	return false
}

// latencySettled reports whether the scheduler's recent latency window (its
// RecentWindow) holds only requests served since the mode and batches in force were
// applied: a p99 over requests served at the previous configuration says nothing of this
// one, and judging it there left out a configuration that had not been tried (issue 34).
func (c *Controller) latencySettled(now time.Time) bool {
	w := c.sched.Config().RecentWindow
	return now.Sub(c.cfgSince) >= w+min(c.cfgDrain, w)
}

// configChanged starts the latency rule's wait for a window of the new configuration's
// requests: the recent window, plus the time the requests queued before the change take
// to be served after it — about the longest latency in the window at the change, at
// most another window. Measured: a search's last profile batches left requests queued
// 1.3 s (AGX lifetime bench, 30 req/s, 50 ms, 30 W, seed 1); 5 s after the plan the window
// still held them (p99 732 ms), the latency rule paused training at the plan's own
// configuration and marked it broken, and live refinement never confirmed it for the
// next 14 minutes. Called with c.mu held.
func (c *Controller) configChanged(now time.Time) {
	c.cfgSince, c.cfgDrain = now, 0
	for _, wl := range c.sched.Snapshot().Workloads {
		if wl.Role == proto.RoleInfer {
			c.cfgDrain = max(c.cfgDrain, time.Duration(wl.LatencyRecent.MaxMS*float64(time.Millisecond)))
		}
	}
}

// sameBatches reports whether a and b plan the same batch for every stream.
func sameBatches(a, b []StreamChoice) bool {
	return slices.EqualFunc(a, b, func(x, y StreamChoice) bool { return x.Workload == y.Workload && x.Batch == y.Batch })
}
