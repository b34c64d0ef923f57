package sched

// The end of a turn: release accounting (measured durations, served requests).

import (
	"sort"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// Release ends the worker's turn with what it measured.
func (s *Scheduler) Release(id string, r Release) error {
	s.mu.Lock()
	defer s.unlockAndDeliver()
	w, perr := s.get(id, proto.TypeRelease)
	if perr != nil {
		return perr
	}
	t := s.turn
	if w.expired && (t == nil || t.w != w) {
		return expiredErr(proto.TypeRelease)
	}
	if t == nil || t.w != w {
		return proto.Errorf(proto.CodeOutOfOrder, proto.TypeRelease, "no grant is held by this worker; acquire and wait for a grant first")
	}
	if t.grant.ID != r.Grant {
		return proto.Errorf(proto.CodeOutOfOrder, proto.TypeRelease, "grant %d is held, not %d; release the grant you were given", t.grant.ID, r.Grant)
	}
	now := s.clock.Now()
	held := now.Sub(t.start)
	d, used := s.measured(w, t, r.Duration, held, now)
	ms := float64(d) / float64(time.Millisecond)
	var unknown []string
	switch t.grant.Kind {
	case proto.KindTrain:
		// Warm-up (allocator, cuDNN autotuning, lazy init) is the estimate's: it follows
		// the latest minibatch until the times settle.
		// A micro-batch turn is measured at its own size (micro.go); the minibatch
		// counts once, when its last turn ends.
		mb := t.grant.Batch
		if t.grant.MicroBatch > 0 {
			mb = t.grant.MicroBatch
		}
		s.noteTurn(spreadTrain, w.trainEst(mb), ms, now)
		w.trainEst(mb).add(ms)
		w.addReal(mb, ms, now)
		w.trainUsed += used
		s.trainHold, s.trainHoldUntil = w, now.Add(TrainRejoinGrace)
		w.mbDone += mb
		whole := w.mbDone >= w.spec.Batch
		if whole {
			w.mbDone = 0
		}
		n := r.Samples
		if n <= 0 {
			n = mb
		}
		w.st.trained(now, n, whole)
	case proto.KindInfer:
		e := w.infer[t.grant.Batch]
		s.noteTurn(spreadInfer, e, ms, now)
		if e == nil {
			e = &estimate{}
			w.infer[t.grant.Batch] = e
		}
		// Time per batch is measured on full and partial batches alike; keyed by the
		// number of requests actually served.
		e.add(ms)
		w.addReal(t.grant.Batch, ms, now)
		res := map[string]proto.Result{}
		for _, x := range r.Results {
			res[x.ID] = x
		}
		for _, q := range t.reqs {
			ok := true
			if len(r.Results) > 0 {
				x, found := res[q.id]
				ok = found && x.OK
				delete(res, q.id)
			}
			s.finish(w, q, now, ok)
		}
		for id := range res {
			unknown = append(unknown, id)
		}
		s.learnRoom(w.workload, now)
	case proto.KindProfile:
		e := w.prof[t.grant.Batch]
		if e == nil {
			e = &estimate{}
			w.prof[t.grant.Batch] = e
		}
		e.add(ms)
		// The profile's result is the worker's own measurement when it lies within the
		// held turn (it leaves out the socket's round trip and the wait for the grant on
		// a busy host); the scheduler's estimate above uses the held time.
		pd := d
		if r.Duration > 0 && r.Duration <= held+ReportSlack(held) {
			pd = r.Duration
		}
		t.profile.finish(profileResult{d: pd})
	}
	s.endTurn(now)
	s.schedule()
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return proto.Errorf(proto.CodeInvalid, proto.TypeRelease, "results for requests not in the grant were ignored: %v", clipList(unknown))
	}
	return nil
}

// measured is what a release counts: d, the turn's duration for the expected times and
// a profile result, and used, the GPU time charged to the workload's training share.
// Both are the time fulcrumd saw the turn held (grant sent → release received, on its
// own clock), not the worker's report: a worker reporting 0.001 ms for a 50 ms minibatch
// would otherwise take the training share (issue 26 item 5) and one reporting an hour
// would inflate the expected time and with it the hold limit (issue 17, 26 item 3). A
// reported duration within ReportSlack of the held time is taken as the turn's duration
// (it leaves out the socket round trip); the share always counts the held time. Only
// TrustReportedDurations (in-process drivers whose durations are modeled) takes reports
// as they are. Called with s.mu held.
func (s *Scheduler) measured(w *worker, t *turn, reported, held time.Duration, now time.Time) (d, used time.Duration) {
	if s.cfg.TrustReportedDurations && reported > 0 {
		return reported, reported
	}
	slack := ReportSlack(held)
	switch {
	case reported <= 0:
		return held, held
	case reported > held+slack:
		// The worker's own time lies inside the held turn, so more than that is a bug
		// or an attempt to inflate the shared expected time (issue 17).
		s.clamped++
		w.st.clamped++
		if ok, dropped := s.clampLog.allow(now, time.Second); ok {
			s.log.Warn("release reported a duration longer than the turn was held; using the held time",
				"worker", w.id, "workload", w.name, "grant", t.grant.ID, "reported_ms", ms(reported), "held_ms", ms(held),
				"clamped_total", s.clamped, "not_logged_since_last", dropped)
		}
		return held, held
	case reported < held-slack:
		// Less than the turn took: the GPU was the worker's for the whole turn.
		s.underReported++
		w.st.underReported++
		return held, held
	}
	return reported, held
}

// ReportSlack is how far a reported duration may exceed the time the turn was held
// before it is replaced by the held time: 2 ms plus 2% (timer granularity, clock rate
// differences between processes).
func ReportSlack(held time.Duration) time.Duration {
	return 2*time.Millisecond + held/50
}

// finish accounts one request as served (ok) or failed at now.
func (s *Scheduler) finish(w *worker, q *request, now time.Time, ok bool) {
	delete(w.ids, q.id)
	lat := now.Sub(q.arrived)
	w.st.done(now, lat, ok, now.After(q.deadline))
	if ok {
		s.countRoom(w.workload, q.arrived, lat, now)
	}
	if ok && s.cfg.OnServed != nil {
		s.cfg.OnServed(w.name, lat)
	}
}

// endTurn accounts the held turn's time and frees the turn.
func (s *Scheduler) endTurn(now time.Time) {
	t := s.turn
	if t.timer != nil {
		t.timer.Stop()
	}
	if t.holdT != nil {
		t.holdT.Stop()
	}
	held := now.Sub(t.start)
	if !t.overrun && held > t.limit {
		s.markOverrun(t, held)
	}
	if t.guessed {
		s.guessUntil = now
	}
	s.turn = nil
}
