package control

import (
	"fmt"
	"sync/atomic"
	"time"
)

// loopBeat is the control loop's heartbeat: when Run's loop last went round.
type loopBeat struct {
	running atomic.Bool
	lastNS  atomic.Int64 // unix nanoseconds of the clock, 0 before the first round
	startNS atomic.Int64
}

func (l *loopBeat) start(now time.Time) {
	l.startNS.Store(now.UnixNano())
	l.lastNS.Store(0)
	l.running.Store(true)
}
func (l *loopBeat) beat(now time.Time) { l.lastNS.Store(now.UnixNano()) }
func (l *loopBeat) stop()              { l.running.Store(false) }

// loopStale is how long the control loop may go without a round before it counts as
// stuck: a step can wait for the running minibatch (BetweenTurns) and a worker may hold
// its turn for seconds (worker.hold_min_ms), so this is generous — as long as
// systemd's WatchdogSec.
func (c *Controller) loopStale() time.Duration { return max(20*c.cfg.Period, 30*time.Second) }

// LoopAlive reports whether Run's control loop goes round, and says how it stands.
func (c *Controller) LoopAlive() (bool, string) {
	if !c.loop.running.Load() {
		return false, "the control loop is not running (fulcrumd is starting or stopping)"
	}
	now := c.clock.Now()
	last := c.loop.lastNS.Load()
	if last == 0 {
		since := now.Sub(time.Unix(0, c.loop.startNS.Load()))
		if since > c.loopStale() {
			return false, fmt.Sprintf("the control loop has not completed a round in the %s since it started (stuck: the events and the log say where)", since.Round(time.Millisecond))
		}
		return false, "the control loop has started and not completed its first round yet"
	}
	ago := now.Sub(time.Unix(0, last))
	if ago > c.loopStale() {
		return false, fmt.Sprintf("the control loop's last round was %s ago (over %s: stuck; the events and the log say where)", ago.Round(time.Millisecond), c.loopStale())
	}
	return true, fmt.Sprintf("last round %s ago (period %s)", ago.Round(time.Millisecond), c.cfg.Period)
}
