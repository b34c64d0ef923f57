package sched

// The admission room learned from the live latency window (issue 28, docs/design.md §9).

import (
	"fmt"
	"math"
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
// learned room closes that loop, per inference stream. It counts the latencies served
// since the room last changed and those in the guard band [L·(1−RoomGuard), ∞) — near
// the budget or over it — none within the window's span of a profile batch (a search's
// latencies, at modes not planned for the budget), and every RoomInterval at most:
//
//   - grows when more than the 1 % the budget allows of the window's latencies since the
//     change are near (and at least two, among at least roomGrowSamples): in one step, by the overshoot of the window's p99 past
//     the middle of the hold zone [L·(1−2·RoomGuard), L·(1−RoomGuard)) — the room that
//     would have kept that quantile there, had the late requests' waits been that much
//     shorter — at least RoomGuard × L;
//   - shrinks when at most a quarter of the allowed 1 % are near among at least
//     shrinkNeed latencies counted since the change (not bounded by the window), the window's p99 below the hold zone, and this stream's
//     deadlines kept training out since the last evaluation (otherwise the room costs
//     nothing): by half the distance from the p99 to the zone's middle. shrinkNeed starts
//     at roomShrinkSamples and doubles (up to roomShrinkSamplesMax) each time a grow
//     undoes a shrink, halving again when a shrink holds: a room at its level is not
//     probed again and again;
//   - otherwise nothing changes. Between the grow and the shrink thresholds (a quarter of
//     the allowed rate to all of it) lies a dead band: in steady state the room stays put.
//
// A change in the turn times shows in the latencies only when a tail meets a request:
// after the spread doubled, 10–20 s could pass without one latency in the band while the
// shrink's evidence, counted mostly before the change, still said "quiet" — the room shrank
// and grew back 10–65 s later (docs/runtime.md "Settling"). The turns show it at once:
// when more than roomSpreadRise × (1 − roomSpreadQuantile) of the inference (or training)
// turns of the last roomSpreadRecent lay further from their expected times, |ln(d/median)|,
// than the window's older turns' roomSpreadQuantile (at least roomSpreadTurns on each
// side), the turn times spread out: the shrink's evidence restarts, so a shrink is judged
// only on latencies of the new turn times, and when the next evaluation finds it again the
// room goes to its bound.
//
// It is bounded to [RoomMin, RoomMaxFrac × L]; RoomMaxFrac = 0 turns learning off
// (fulcrumd's default is 0.5 since it costs no training without tails, docs/runtime.md
// "The learned admission room", "Settling" and "Shipping it").
const (
	// roomQuantile is the quantile the latency budget promises (p99 ≤ L).
	roomQuantile = 0.99
	// roomGrowSamples: latencies served since the last change that a grow needs.
	roomGrowSamples = 50
	// roomShrinkSamples and roomShrinkSamplesMax bound the latencies a shrink needs:
	// with none near among 600, fewer than 0.5 % would be near at 95 % confidence.
	roomShrinkSamples    = 600
	roomShrinkSamplesMax = 8 * roomShrinkSamples
	// roomShrinkNear is the fraction of the allowed late rate (1 − roomQuantile) that a
	// shrink tolerates near the budget.
	roomShrinkNear = 0.25
	// The turn times spread out when more than roomSpreadRise × (1 − roomSpreadQuantile)
	// of the turns of the last roomSpreadRecent lay beyond the window's older turns'
	// roomSpreadQuantile of |ln(duration/expected)|, among at least roomSpreadTurns
	// turns on each side. Traced (TestAdmissionRoomLearnedFromHeavyTails, seeds 1, 16, 17,
	// 20): 0.00–0.21 of the inference turns in steady state (above 0.25 at single
	// evaluations in seeds 5, 6 and 14), 0.19–0.35 within 10 s of the spread doubling.
	roomSpreadRecent   = 10 * time.Second
	roomSpreadQuantile = 0.9
	roomSpreadRise     = 2.5
	roomSpreadTurns    = 50
	// roomSpreadMin: turns within 25 % of their expected times (|ln| ≤ ln 1.25) never
	// count as spread out.
	roomSpreadMin = 0.2231435513142097 // ln 1.25
)

// The turn kinds whose spread the rooms watch (Scheduler.turnSpread).
const (
	spreadInfer = iota
	spreadTrain
)

// roomState is one inference stream's learned room.
type roomState struct {
	extra   time.Duration // the learned room, on top of Config.Margin
	changed time.Time     // last change (the latencies since are the evidence)
	evalAt  time.Time     // last evaluation
	changes uint64
	// n and near count the latencies served since changed and those in the guard band
	// (the window holds only its span: the shrink's evidence can be longer).
	n, near int
	// shrinkNeed is the latencies a shrink needs now (0: roomShrinkSamples); shrunk:
	// the last change was a shrink.
	shrinkNeed int
	shrunk     bool
	// blocked: the stream's deadlines kept a training minibatch out since evalAt.
	blocked bool
	// spreadSeen: the last evaluation found the turn times spread out.
	spreadSeen bool
	// why is the rule behind the last change (RoomChange.Why).
	why string
	// lastQMS is the quantile (ms) the last evaluation measured.
	lastQMS float64
	// lat is the window of the latencies counted (countRoom): the stream's latency
	// window less the requests that waited for a training turn admitted on a guess.
	lat *window
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
	// Why is the rule that moved the room, in an operator's words.
	Why string
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

// countRoom counts one latency served to wl at now, of a request that arrived at
// arrived, in its room's evidence — unless the request arrived while a training turn
// ran that was admitted on a guess of its time (its estimate still in warm-up,
// trainSettled: the default, a first slow measurement): the admission test could not
// judge that turn, so its late requests say nothing about the room; counted, a slow
// warm-up's first turns took the room to its bound and kept training out for the
// minute a shrink needs (TestTrainingFollowsSlowFirstMinutes, with the room on by
// default). Called with s.mu held.
func (s *Scheduler) countRoom(wl *workload, arrived time.Time, lat time.Duration, now time.Time) {
	if wl.role != proto.RoleInfer || s.cfg.RoomMaxFrac <= 0 {
		return
	}
	if !s.guessFrom.IsZero() && !arrived.Before(s.guessFrom) && (s.guessUntil.IsZero() || arrived.Before(s.guessUntil)) {
		return
	}
	if wl.room.lat == nil {
		wl.room.lat = newWindow(s.cfg.Window, s.cfg.WindowSamples)
	}
	wl.room.lat.add(now, ms(lat))
	wl.room.n++
	if ms(lat) >= ms(s.budgetOfWorkload(wl))*(1-s.cfg.RoomGuard) {
		wl.room.near++
	}
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
	// A profile batch ran within the window's span: the latencies are a search's (modes
	// and batches not planned for the budget, the gaps of a search before any plan), not
	// what the room can correct. The evidence restarts a span after the last one.
	if !s.profiledAt.IsZero() && now.Sub(s.profiledAt) < s.cfg.Window {
		r.changed, r.evalAt, r.n, r.near, r.blocked = now, now, 0, 0, false
		return
	}
	// A grow is judged on the window's latencies since the change (a change in the turn
	// times shows within its span, undiluted by the minutes before), a shrink on all of
	// them (r.n, r.near).
	if r.lat == nil {
		return
	}
	v := r.lat.valuesSince(now, r.changed)
	if len(v) < roomGrowSamples {
		return
	}
	blocked := r.blocked
	r.evalAt, r.blocked = now, false
	// The turns spread out: the shrink's evidence restarts at once; two evaluations in a
	// row move the room (one alone was a false alarm in 3 of 20 seeds' steady minutes).
	spreadNow := s.turnsSpreadOut(now)
	spread := spreadNow && r.spreadSeen
	if spreadNow {
		r.n, r.near = 0, 0
	}
	r.spreadSeen = spreadNow
	slices.Sort(v)
	q := samplestats.Quantile(v, roomQuantile)
	r.lastQMS = q
	budget := s.budgetOfWorkload(wl)
	l := ms(budget)
	g := s.cfg.RoomGuard
	hi, lo, mid := l*(1-g), l*(1-2*g), l*(1-1.5*g)
	nearW, _ := slices.BinarySearch(v, hi)
	nearW = len(v) - nearW
	need := r.shrinkNeed
	if need == 0 {
		need = roomShrinkSamples
	}
	maxExtra := max(time.Duration(s.cfg.RoomMaxFrac*float64(budget)), s.cfg.RoomMin)
	next, grow, why := r.extra, false, ""
	switch {
	case spread:
		next, grow = maxExtra, true
		why = fmt.Sprintf("turn times spread out: over %.0f%% of the last %s's turns lay further from their expected times than the older turns' %.0fth percentile; to the bound",
			100*roomSpreadRise*(1-roomSpreadQuantile), roomSpreadRecent, 100*roomSpreadQuantile)
	case nearW >= 2 && float64(nearW) > (1-roomQuantile)*float64(len(v)):
		next, grow = r.extra+max(durMS(q-mid), durMS(g*l)), true
		why = fmt.Sprintf("%d of %d latencies since the last change within %.0f%% of the budget", nearW, len(v), 100*g)
	case float64(r.near) <= roomShrinkNear*(1-roomQuantile)*float64(r.n) && r.n >= need && q < lo && blocked &&
		now.Sub(r.changed) >= 2*s.cfg.RoomInterval:
		next = r.extra - durMS((mid-q)/2)
		why = fmt.Sprintf("p99 %.0f ms below the guard band over %d latencies with training kept out", q, r.n)
	}
	next = min(max(next, s.cfg.RoomMin, 0), maxExtra)
	// Changes below a millisecond are noise, not worth an event. A grow the bound stops
	// restarts the evidence: the room is where it can be, and a shrink must be judged on
	// what it does from now on.
	if d := next - r.extra; d > -time.Millisecond && d < time.Millisecond {
		if grow {
			r.changed, r.n, r.near = now, 0, 0
		}
		return
	}
	switch {
	case grow && r.shrunk:
		r.shrinkNeed = min(2*need, roomShrinkSamplesMax) // the last shrink went too far
	case !grow && r.shrunk:
		r.shrinkNeed = max(need/2, roomShrinkSamples) // the last shrink held
	}
	if spread {
		s.log.Info("turn times spread out: the admission room goes to its bound", "workload", wl.name)
	}
	before, samples, near := r.extra, r.n, r.near
	r.extra, r.changed, r.n, r.near, r.shrunk, r.why = next, now, 0, 0, !grow, why
	r.changes++
	s.log.Info("admission room changed", "workload", wl.name, "room_ms", ms(s.cfg.Margin+next), "learned_ms", ms(next),
		"before_ms", ms(before), "p99_ms", q, "budget_ms", l, "samples", samples, "near", near)
	if f := s.cfg.OnRoom; f != nil {
		c := RoomChange{Workload: wl.name, Room: s.cfg.Margin + next, Learned: next, Before: before,
			P99: durMS(q), Budget: s.budgetOfWorkload(wl), Samples: samples, Why: why}
		s.out = append(s.out, pendingDelivery{fn: func() { f(c) }})
	}
}

// restartRoomEvidence makes every stream's learned room judge only latencies served from
// now on: those before a budget change were measured against the old budget. Called with
// s.mu held.
func (s *Scheduler) restartRoomEvidence() {
	now := s.clock.Now()
	for _, wl := range s.wlOrder {
		if !wl.room.changed.IsZero() {
			wl.room.changed, wl.room.n, wl.room.near = now, 0, 0
		}
	}
}

// noteTurn records how far a finished turn of kind (spreadInfer, spreadTrain) lay from
// its estimate e's expected time, before the turn (ms) is folded into e: |ln(ms/median)|,
// slower or faster alike. Nothing is kept while no room learns. Called with s.mu held.
func (s *Scheduler) noteTurn(kind int, e *estimate, ms float64, now time.Time) {
	if s.cfg.RoomMaxFrac <= 0 || e == nil || !e.settled || ms <= 0 {
		return
	}
	v := e.value()
	if v <= 0 {
		return
	}
	if s.turnSpread[kind] == nil {
		s.turnSpread[kind] = newWindow(s.cfg.Window, s.cfg.WindowSamples)
	}
	s.turnSpread[kind].add(now, math.Abs(math.Log(ms/v)))
}

// turnsSpreadOut reports whether the inference or the training turns of the last
// roomSpreadRecent lay further from their expected times than the window's older turns
// of the same kind (room.go's comment at the top). Called with s.mu held.
func (s *Scheduler) turnsSpreadOut(now time.Time) bool {
	for _, w := range s.turnSpread {
		if w == nil {
			continue
		}
		all := w.values(now)
		recent := len(w.valuesSince(now, now.Add(-roomSpreadRecent)))
		older := all[:len(all)-recent]
		if recent < roomSpreadTurns || len(older) < roomSpreadTurns {
			continue
		}
		// A spread within ±roomSpreadMin of the expected times is noise whatever its
		// change: a steady worker's turns do not move its room.
		cut := max(samplestats.Quantile(slices.Sorted(slices.Values(older)), roomSpreadQuantile), roomSpreadMin)
		beyond := 0
		for _, x := range all[len(older):] {
			if x > cut {
				beyond++
			}
		}
		if float64(beyond) > roomSpreadRise*(1-roomSpreadQuantile)*float64(recent) {
			return true
		}
	}
	return false
}
