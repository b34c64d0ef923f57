package sched

// The admission room learned from the live latency window (issue 28, docs/design.md §9).

import (
	"slices"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	samplestats "github.com/fulcrum-edge/fulcrum/internal/stats"
)

// The room the admission test keeps before a stream's deadlines is Margin plus the
// stream's learned room. The fixed rule (median + DevK spreads of the last turns, plus
// Margin) is tuned on workers whose times are steady; a real framework's turns have
// tails it does not see (allocator, Python threads, the server's own CPU work), and
// then the budget's quantile runs over the budget with nothing to correct it. The
// learned room closes that loop, per inference stream:
//
//   - every RoomInterval at most, from the latencies served since the room last
//     changed (at least roomGrowSamples), it counts those in the guard band
//     [L·(1−RoomGuard), ∞) — near the budget or over it. More than the 1 % the budget
//     allows (and at least two): the room grows by half the overshoot of the p99 past
//     the middle of the hold zone below, at least RoomGuard × L;
//   - none at all among at least roomShrinkSamples, the p99 below the hold zone
//     [L·(1−2·RoomGuard), L·(1−RoomGuard)), this stream's deadlines having kept
//     training out since the last evaluation (otherwise the room costs nothing), and
//     two intervals since the last change: it shrinks by half the distance from the
//     p99 to the zone's middle (shrinking can wait; growing cannot);
//   - otherwise nothing changes, so in steady state the room stays put.
//
// It is bounded to [RoomMin, RoomMaxFrac × L]; RoomMaxFrac = 0 (the default) turns
// learning off: the room buys the p99 with training time (docs/runtime.md "The learned
// admission room"), and a violation the room cannot fix (the slow first minutes of a
// fresh process) leaves a large room behind for as long as the shrink takes.
const (
	// roomQuantile is the quantile the latency budget promises (p99 ≤ L).
	roomQuantile = 0.99
	// roomGrowSamples and roomShrinkSamples: latencies served since the last change that
	// an evaluation needs to grow or to shrink the room.
	roomGrowSamples   = 50
	roomShrinkSamples = 300
)

// roomState is one inference stream's learned room.
type roomState struct {
	extra   time.Duration // the learned room, on top of Config.Margin
	changed time.Time     // last change (the latencies since are the evidence)
	evalAt  time.Time     // last evaluation
	changes uint64
	// blocked: the stream's deadlines kept a training minibatch out since evalAt.
	blocked bool
	// lastQMS is the quantile (ms) the last evaluation measured.
	lastQMS float64
}

// RoomChange is a change of a stream's learned admission room (Config.OnRoom).
type RoomChange struct {
	Workload string
	// Room is the whole room the stream's deadlines keep now (Margin + Learned); Learned
	// the learned part, Before its value before the change.
	Room, Learned, Before time.Duration
	// P99 is the stream's measured quantile that caused the change, and Budget its L.
	P99, Budget time.Duration
	Samples     int
}

// roomOf is the room the admission test keeps before w's deadlines. Called with s.mu
// held.
func (s *Scheduler) roomOf(w *worker) time.Duration {
	return s.cfg.Margin + w.room.extra
}

// budgetOfWorkload is the latency budget of a workload's requests. Called with s.mu held.
func (s *Scheduler) budgetOfWorkload(wl *workload) time.Duration {
	if l, ok := s.streamBudget[wl.name]; ok {
		return l
	}
	return s.latency
}

// learnRoom re-evaluates wl's learned room at now (after requests were served). Called
// with s.mu held.
func (s *Scheduler) learnRoom(wl *workload, now time.Time) {
	if wl.role != proto.RoleInfer || s.cfg.RoomMaxFrac <= 0 {
		return
	}
	r := &wl.room
	if r.changed.IsZero() {
		r.changed, r.evalAt = now, now
		r.extra = max(r.extra, s.cfg.RoomMin)
		return
	}
	if now.Sub(r.evalAt) < s.cfg.RoomInterval {
		return
	}
	v := wl.st.latency.valuesSince(now, r.changed)
	if len(v) < roomGrowSamples {
		return
	}
	blocked := r.blocked
	r.evalAt, r.blocked = now, false
	slices.Sort(v)
	q := samplestats.Quantile(v, roomQuantile)
	r.lastQMS = q
	budget := s.budgetOfWorkload(wl)
	l := ms(budget)
	g := s.cfg.RoomGuard
	hi, lo, mid := l*(1-g), l*(1-2*g), l*(1-1.5*g)
	// near: latencies in the guard band or over the budget. The budget allows 1 % of
	// requests late: the room grows as soon as more than that (and at least two) fall in
	// the band among the latencies since the last change (the evidence accumulates
	// until a change, so a rate just over 1 % is caught within a few hundred requests);
	// it shrinks only after a long run with none at all (a faster shrink oscillated
	// in the simulated tails, docs/runtime.md).
	near := len(v) - sortSearch(v, hi)
	allowed := (1 - roomQuantile) * float64(len(v))
	maxExtra := max(time.Duration(s.cfg.RoomMaxFrac*float64(budget)), s.cfg.RoomMin)
	next := r.extra
	switch {
	case near >= 2 && float64(near) > allowed:
		next = r.extra + max(durMS((q-mid)/2), durMS(g*l))
	case near == 0 && q < lo && blocked && len(v) >= roomShrinkSamples && now.Sub(r.changed) >= 2*s.cfg.RoomInterval:
		next = r.extra - durMS((mid-q)/2)
	}
	next = min(max(next, s.cfg.RoomMin, 0), maxExtra)
	// Changes below a millisecond are noise, not worth an event.
	if d := next - r.extra; d > -time.Millisecond && d < time.Millisecond {
		return
	}
	before := r.extra
	r.extra, r.changed = next, now
	r.changes++
	s.log.Info("admission room changed", "workload", wl.name, "room_ms", ms(s.cfg.Margin+next), "learned_ms", ms(next),
		"before_ms", ms(before), "p99_ms", q, "budget_ms", l, "samples", len(v))
	if f := s.cfg.OnRoom; f != nil {
		c := RoomChange{Workload: wl.name, Room: s.cfg.Margin + next, Learned: next, Before: before,
			P99: durMS(q), Budget: s.budgetOfWorkload(wl), Samples: len(v)}
		s.out = append(s.out, pendingDelivery{fn: func() { f(c) }})
	}
}

// sortSearch is the index of the first value ≥ x in the sorted v.
func sortSearch(v []float64, x float64) int {
	i, _ := slices.BinarySearch(v, x)
	return i
}

// restartRoomEvidence makes every stream's learned room judge only latencies served from
// now on: those before a budget change were measured against the old budget. Called with
// s.mu held.
func (s *Scheduler) restartRoomEvidence() {
	now := s.clock.Now()
	for _, wl := range s.wlOrder {
		if !wl.room.changed.IsZero() {
			wl.room.changed = now
		}
	}
}
