package sched

// Turn limits: the overrun limit and the hold limit that takes a turn back.

import (
	"fmt"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

func (s *Scheduler) markOverrun(t *turn, held time.Duration) {
	t.overrun = true
	s.overruns++
	who := "action"
	if t.w != nil {
		who = t.w.id
		t.w.st.overruns++
	}
	s.log.Warn("turn overran its expected time", "worker", who, "kind", t.grant.Kind, "grant", t.grant.ID,
		"held_ms", ms(held), "expected_ms", ms(t.expected), "limit_ms", ms(t.limit))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (s *Scheduler) limit(expected time.Duration) time.Duration {
	l := time.Duration(float64(expected) * s.cfg.OverrunFactor)
	if l < s.cfg.OverrunMin {
		l = s.cfg.OverrunMin
	}
	return l
}

// Probation: a process (peer pid) that let a turn expire is taken for stuck or dead —
// a socket closed in one thread while another blocks in recv stays half-open and sends no
// EOF, so its other connections may hold grants nobody will release. For ProbationFor
// after an expiry, the turns of its workers are held to at most
// max(ProbationHold, the overrun limit) instead of the full hold limit, so each of them
// costs the others a second rather than hold_min_ms; a live worker of the process,
// releasing within its expected times, does not notice (issue 26 item 3). The daemon
// also drops the process's connections that stayed silent through the expired turn.
const (
	ProbationHold = time.Second
	ProbationFor  = time.Minute
	// maxProbation bounds the processes remembered on probation (oldest dropped).
	maxProbation = 1024
)

// putOnProbation starts (or extends) pid's probation at now. Called with s.mu held.
func (s *Scheduler) putOnProbation(pid int, now time.Time) {
	if pid <= 0 {
		return
	}
	if s.probation == nil {
		s.probation = map[int]time.Time{}
	}
	for p, until := range s.probation {
		if !now.Before(until) {
			delete(s.probation, p)
		}
	}
	if _, ok := s.probation[pid]; !ok && len(s.probation) >= maxProbation {
		var oldest int
		for p, until := range s.probation {
			if oldest == 0 || until.Before(s.probation[oldest]) {
				oldest = p
			}
		}
		delete(s.probation, oldest)
	}
	s.probation[pid] = now.Add(ProbationFor)
}

// onProbation reports that pid let a turn expire within ProbationFor. Called with s.mu
// held.
func (s *Scheduler) onProbation(pid int, now time.Time) bool {
	until, ok := s.probation[pid]
	return ok && pid > 0 && now.Before(until)
}

// holdLimit is how long a turn of expected time exp (overrun limit lim) may be held
// before it is taken back: HoldFactor × exp, at least HoldMin and lim, and never more
// than HoldMax — no sequence of releases, however it raises the expected time, lets a
// worker keep the others waiting longer than that.
func (s *Scheduler) holdLimit(exp, lim time.Duration) time.Duration {
	h := max(time.Duration(float64(exp)*s.cfg.HoldFactor), s.cfg.HoldMin, lim)
	return min(h, max(s.cfg.HoldMax, s.cfg.HoldMin))
}

func (s *Scheduler) checkOverrun(t *turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.turn != t || t.overrun {
		return
	}
	s.markOverrun(t, s.clock.Now().Sub(t.start))
}

func expiredErr(ref string) *proto.Error {
	return proto.Errorf(proto.CodeTurnExpired, ref, "this worker held its turn past the hold limit and lost it; reconnect and register again (see docs/protocol.md)")
}

// expireHold takes turn t back when it is still held at its hold limit: its requests
// fail, a profile waiting on it fails, the worker gets no more turns, the next turn is
// granted, and OnHoldExpired tells the daemon to drop the worker.
func (s *Scheduler) expireHold(t *turn) {
	s.mu.Lock()
	defer s.unlockAndDeliver()
	if s.turn != t {
		return
	}
	now := s.clock.Now()
	w := t.w
	held := now.Sub(t.start)
	s.expired++
	w.st.expired++
	w.expired = true
	s.putOnProbation(w.spec.PID, now)
	for _, q := range t.reqs {
		s.finish(w, q, now, false)
	}
	if t.profile != nil {
		t.profile.finish(profileResult{err: fmt.Errorf("profile batch on %s: the worker held the turn %v, past the hold limit %v", w.id, held.Round(time.Millisecond), t.hold)})
	}
	s.log.Warn("worker held the turn past the hold limit; turn taken back and the worker dropped", "worker", w.id,
		"workload", w.name, "kind", t.grant.Kind, "grant", t.grant.ID, "held_ms", ms(held), "hold_limit_ms", ms(t.hold),
		"expected_ms", ms(t.expected))
	s.endTurn(now)
	if f := s.cfg.OnHoldExpired; f != nil {
		id, gid, began, lim := w.id, t.grant.ID, t.start, t.hold
		s.out = append(s.out, pendingDelivery{fn: func() { f(id, gid, began, held, lim) }})
	}
	s.schedule()
}
