package sched

// The turn: expected times, the admission test and who gets the next grant.

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// expInfer is the expected service time of an inference batch of n requests on w.
func (s *Scheduler) expInfer(w *worker, n int) time.Duration {
	return s.expInferK(w, n, s.cfg.DevK)
}

// expInferK is expInfer with k deviations of guard (0: the median alone).
func (s *Scheduler) expInferK(w *worker, n int, k float64) time.Duration {
	return s.expInferBy(w, n, func(e *estimate) float64 { return e.guarded(k) })
}

// expInferBy is the expected time of an inference batch of n, each measured size's
// estimate read by val.
func (s *Scheduler) expInferBy(w *worker, n int, val func(*estimate) float64) time.Duration {
	if n < 1 {
		n = 1
	}
	if e := w.infer[n]; e != nil && e.n > 0 {
		return durMS(val(e))
	}
	// Interpolate between the nearest measured sizes below and above; above the largest
	// measured size scale proportionally (an upper bound: fixed per-batch costs do not
	// grow); below the smallest take its time (also an upper bound).
	loN, hiN := 0, 0
	var lo, hi float64
	for size, e := range w.infer {
		if e.n == 0 {
			continue
		}
		v := val(e)
		if size < n && size > loN {
			loN, lo = size, v
		}
		if size > n && (hiN == 0 || size < hiN) {
			hiN, hi = size, v
		}
	}
	switch {
	case loN > 0 && hiN > 0:
		return durMS(max(lo, lo+(hi-lo)*float64(n-loN)/float64(hiN-loN)))
	case loN > 0:
		return durMS(lo * float64(n) / float64(loN))
	case hiN > 0:
		return durMS(hi)
	}
	return s.cfg.DefaultInfer
}

// expTrain is the expected time of w's whole minibatch. Not measured (a mode whose
// profile measured only micro-batches: the minibatch did not fit the room), it is the
// largest measured micro-batch's scaled to the minibatch — an upper bound, small
// batches using the GPU less well — rather than the default, which can be half of it.
func (s *Scheduler) expTrain(w *worker) time.Duration {
	if w.train.n > 0 {
		return durMS(w.train.guarded(s.cfg.DevK))
	}
	m := 0
	for size, e := range w.trainMicro {
		if e.n > 0 && size > m && size < w.spec.Batch {
			m = size
		}
	}
	if m > 0 {
		return durMS(w.trainMicro[m].guarded(s.cfg.DevK) * float64(w.spec.Batch) / float64(m))
	}
	return s.cfg.DefaultTrain
}

func (s *Scheduler) expProfile(w *worker, b int) time.Duration {
	if e := w.prof[b]; e != nil && e.n > 0 {
		return durMS(e.guarded(s.cfg.DevK))
	}
	if w.spec.Role == proto.RoleTrain {
		return s.expTrain(w)
	}
	return s.expInfer(w, b)
}

func durMS(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// schedule decides the next turn if the GPU is free. Called with s.mu held after every
// event. Order: an inference batch that is due (full, or its oldest request's slack is
// gone); a pending between-turns action; a profile batch; a training minibatch if every
// waiting request can still meet its deadline after it (otherwise the blocking inference
// batch is served early, so the GPU never idles while work waits). The wake timer is set
// for the next instant a partial batch falls due. Each step returns true when it started a
// turn (or ran an action), which ends this pass; the next event calls schedule again.
func (s *Scheduler) schedule() {
	if s.closed || s.turn != nil {
		s.setWake(time.Time{})
		return
	}
	now := s.clock.Now()
	s.refuseCrowded(now)
	if s.grantDueInference(now) || // 1. due inference batches
		s.runNextAction(now) || // 2. between-turns actions
		s.grantProfile(now) || // 3. profile batches
		s.grantTraining(now) { // 4. training minibatches
		return
	}
	s.setWake(s.nextWake(now))
}

// grantDueInference grants the due inference batch with the earliest deadline, if any.
// It comes first because a due batch's deadline cannot wait for anything else.
func (s *Scheduler) grantDueInference(now time.Time) bool {
	var due *worker
	for _, w := range s.order {
		if w.spec.Role != proto.RoleInfer || !w.wantTurn || len(w.queue) == 0 {
			continue
		}
		n := min(len(w.queue), w.spec.Batch)
		slack := w.queue[0].deadline.Sub(now) - s.roomOf(w) - s.expInfer(w, n)
		if n < w.spec.Batch && slack > 0 {
			continue
		}
		if due == nil || w.queue[0].deadline.Before(due.queue[0].deadline) {
			due = w
		}
	}
	if due == nil {
		return false
	}
	s.grantInfer(due, now)
	return true
}

// runNextAction runs the oldest pending between-turns action (a power-mode change, ...):
// actions need the GPU free, and this is the moment no deadline is due.
func (s *Scheduler) runNextAction(now time.Time) bool {
	if len(s.actions) == 0 {
		return false
	}
	a := s.actions[0]
	s.actions = s.actions[1:]
	s.runAction(a, now)
	return true
}

// grantProfile grants the oldest admissible profile batch. Profile batches go before
// training because a search waits on them, but only if inference deadlines survive them:
// otherwise the blocking inference batch is served early, or (the queue empty, the batch
// overdue) the profile batch runs anyway. It returns true when it started a turn; false
// lets training be considered.
func (s *Scheduler) grantProfile(now time.Time) bool {
	for i, p := range s.profiles {
		w := s.workers[p.worker]
		if w == nil || !w.wantTurn {
			continue
		}
		exp := s.expProfile(w, p.batch)
		if blocker := s.admit(now, exp); blocker != nil {
			if s.serveBlocker(blocker, now) {
				return true
			}
			// With no request queued or in flight the admission test is the same at every
			// moment (the turn against each stream's budget, room and rate): waiting cannot
			// open a gap, it only leaves the GPU idle while a search waits (it used to wait
			// profile_wait_ms for one: about 1 s per profile batch over the room, 6–10 s a
			// mode beside a 50 ms budget). So it runs at once then; requests that arrive
			// during it may miss their deadlines and are counted. While requests are
			// queued, the waiting ones are served first (serveBlocker), and past the crowd
			// bound (profilecrowd.go) the batch is refused.
			if s.cfg.ProfileWait <= 0 || !s.inferenceIdle() {
				break // the wake in nextWake covers the crowd bound
			}
			s.log.Debug("granting a profile batch over the admission room with no request queued", "worker", w.id,
				"batch", p.batch, "waited_ms", ms(now.Sub(p.queued)), "expected_ms", ms(exp))
		}
		s.profiles = slices.Delete(s.profiles, i, i+1)
		s.profiledAt = now // the learned rooms do not learn from it (room.go)
		s.grant(w, proto.KindProfile, p.batch, nil, exp, now, p)
		return true
	}
	return false
}

// trainCandidate is the training worker to consider now: the least-served one
// (nextTrainer), unless a held worker is re-acquiring and should get the turn instead, in
// which case it is nil so the GPU waits for it. An expired or satisfied hold is dropped.
func (s *Scheduler) trainCandidate(now time.Time) *worker {
	w := s.nextTrainer()
	if h := s.trainHold; h != nil && w != nil {
		switch {
		case h.wantTurn || !now.Before(s.trainHoldUntil) || s.workers[h.id] != h:
			s.trainHold = nil
		case h.mbDone > 0 || s.vtime(w.workload) > s.vtime(h.workload):
			// The least-served workload's worker, or one in the middle of a minibatch
			// (its next micro-batch), is re-acquiring: wait for it.
			w = nil
		}
	}
	return w
}

// grantTraining grants a training (micro-)batch if inference deadlines survive it, or if
// it has starved while no request is queued; otherwise it serves the blocking inference
// batch early so the GPU does not idle. It returns true when it started a turn.
func (s *Scheduler) grantTraining(now time.Time) bool {
	w := s.trainCandidate(now)
	if w == nil || s.trainPaused {
		return false
	}
	// A minibatch's turns are all of the micro-batch size chosen when it starts
	// (micro.go); each is admitted, held and starved on its own expected time.
	s.startMinibatch(w, now)
	mb := w.microSize()
	exp := s.expTrainAt(w, mb)
	blocker := s.admit(now, exp)
	starved := s.cfg.Starve > 0 && now.Sub(w.acquiredAt) >= w.starveAfterAt(mb, s.cfg.Starve) && s.inferenceIdle()
	if blocker == nil || starved {
		if blocker != nil {
			// Its expected time may be stale (an outlier, a warm-up): the only way to
			// learn otherwise is to run it, at a moment nothing is queued.
			s.log.Info("admitting a starved training minibatch to re-measure it", "worker", w.id,
				"waited_ms", ms(now.Sub(w.acquiredAt)), "expected_ms", ms(exp))
			w.st.starved++
		}
		s.rrLast = w.reg
		s.grant(w, proto.KindTrain, w.spec.Batch, nil, exp, now, nil)
		if !w.trainSettled(mb) {
			s.turn.guessed, s.guessFrom, s.guessUntil = true, now, time.Time{}
		}
		if mb < w.spec.Batch {
			s.turn.grant.MicroBatch = mb
			s.out[len(s.out)-1].g.MicroBatch = mb
		}
		return true
	}
	blocker.room.blocked = true // the stream's room is costing training (room.go)
	return s.serveBlocker(blocker, now)
}

// nextWake is the next instant schedule must run again with nothing to run now: the
// earliest of a partial batch falling due, a training hold expiring, a profile batch
// falling crowded out, and a training worker starving. Zero means no wake. (A profile
// batch over the room runs at the next moment no request is queued: an inference turn's
// end, which schedules anyway.)
func (s *Scheduler) nextWake(now time.Time) time.Time {
	var next time.Time
	for _, w := range s.order {
		if w.spec.Role != proto.RoleInfer || !w.wantTurn || len(w.queue) == 0 {
			continue
		}
		n := min(len(w.queue), w.spec.Batch)
		next = earlier(next, w.queue[0].deadline.Add(-s.roomOf(w)-s.expInfer(w, n)))
	}
	if s.trainHold != nil && s.trainHoldUntil.After(now) {
		next = earlier(next, s.trainHoldUntil)
	}
	if s.cfg.ProfileWait > 0 {
		for _, p := range s.profiles {
			if at := p.queued.Add(s.crowdBound()); at.After(now) {
				next = earlier(next, at)
			}
		}
	}
	if s.cfg.Starve > 0 {
		for _, w := range s.order {
			if w.spec.Role != proto.RoleTrain || !w.wantTurn {
				continue
			}
			if at := w.acquiredAt.Add(w.starveAfterAt(w.microSize(), s.cfg.Starve)); at.After(now) {
				next = earlier(next, at)
			}
		}
	}
	return next
}

// earlier is the earlier of next and at, where a zero next means none yet (at wins; a tie
// keeps next).
func earlier(next, at time.Time) time.Time {
	if next.IsZero() || at.Before(next) {
		return at
	}
	return next
}

// inferenceIdle reports that no inference request is queued or being served.
func (s *Scheduler) inferenceIdle() bool {
	for _, w := range s.order {
		if w.spec.Role == proto.RoleInfer && len(w.ids) > 0 {
			return false
		}
	}
	return true
}

// serveBlocker dispatches the inference batch that keeps a training or profile batch
// from starting, if its worker is ready for a grant.
func (s *Scheduler) serveBlocker(w *worker, now time.Time) bool {
	if !w.wantTurn || len(w.queue) == 0 {
		return false
	}
	s.grantInfer(w, now)
	return true
}

// nextTrainer is the waiting training worker whose workload has used the least GPU time
// per unit of weight (time shares, docs/design.md §2 "Model v1 for several workloads");
// ties go round-robin in registration order after the one granted last.
// A worker with a minibatch in progress comes first.
func (s *Scheduler) nextTrainer() *worker {
	// A minibatch in progress (micro-batch turns) goes on before any other: its k turns
	// count as one minibatch, and the shares are decided between minibatches.
	for _, w := range s.order {
		if w.spec.Role == proto.RoleTrain && w.wantTurn && w.mbDone > 0 {
			return w
		}
	}
	var best *worker
	var bestVT float64
	consider := func(w *worker) {
		if w.spec.Role != proto.RoleTrain || !w.wantTurn {
			return
		}
		if vt := s.vtime(w.workload); best == nil || vt < bestVT {
			best, bestVT = w, vt
		}
	}
	for _, w := range s.order {
		if w.reg > s.rrLast {
			consider(w)
		}
	}
	for _, w := range s.order {
		if w.reg <= s.rrLast {
			consider(w)
		}
	}
	return best
}

// admit checks that a turn of expected length exp starting now leaves every inference
// worker able to meet its deadlines, serving queues in deadline order after it. It
// returns the first inference worker whose requests would miss, or nil.
func (s *Scheduler) admit(now time.Time, exp time.Duration) *worker {
	type q struct {
		w        *worker
		deadline time.Time
		service  time.Duration
	}
	var queued []q
	for _, w := range s.order {
		if w.spec.Role != proto.RoleInfer {
			continue
		}
		// The batch served after the turn holds what is queued plus what is expected to
		// arrive during the turn, up to the batch size.
		rate := w.st.rate(now, w.since)
		arrivals := int(math.Ceil(rate * exp.Seconds()))
		n := min(w.spec.Batch, len(w.queue)+arrivals)
		if len(w.queue) > 0 {
			// A queue longer than the batch is served in batches, oldest first: each
			// batch's oldest request waits for the turn and every batch ahead of it (the
			// last batch also takes what arrives during the turn).
			b := max(w.spec.Batch, 1)
			for i := 0; i < len(w.queue); i += b {
				size := min(b, len(w.queue)-i)
				if i+b >= len(w.queue) {
					size = min(b, size+arrivals)
				}
				queued = append(queued, q{w: w, deadline: w.queue[i].deadline, service: s.expInfer(w, size)})
			}
			continue
		}
		// Empty queue: a request arriving right after the turn starts must still be
		// served in time after it; if it could not, run anyway only when an arrival
		// during the turn is unlikely.
		if s.budgetOf(w) >= exp+s.roomOf(w)+s.expInfer(w, max(n, 1)) {
			continue
		}
		if rate*exp.Seconds() < s.cfg.IdleAdmitArrivals {
			continue
		}
		return w
	}
	sort.Slice(queued, func(i, j int) bool { return queued[i].deadline.Before(queued[j].deadline) })
	// Each stream's deadlines keep its own room (Margin plus what it learned, room.go).
	end := now.Add(exp)
	for _, x := range queued {
		end = end.Add(x.service)
		if end.Add(s.roomOf(x.w)).After(x.deadline) {
			return x.w
		}
	}
	return nil
}

func (s *Scheduler) grantInfer(w *worker, now time.Time) {
	n := min(len(w.queue), s.catchUpBatch(w, now))
	reqs := slices.Clone(w.queue[:n])
	w.queue = slices.Delete(w.queue, 0, n)
	exp := s.expInfer(w, n)
	s.grant(w, proto.KindInfer, n, reqs, exp, now, nil)
	// The worker should finish no later than its tightest deadline.
	if left := reqs[0].deadline.Sub(now); left < s.turn.grant.Deadline {
		s.turn.grant.Deadline = max(left, 0)
		s.out[len(s.out)-1].g.Deadline = s.turn.grant.Deadline
	}
}

// catchUpBatch is the batch size w's queue is served at now: its batch, unless the
// queue is longer and served in batches of it some requests would miss their deadlines
// (less the room) — a burst of arrivals during a training turn beside a stream planned
// at batch 1 — and a larger size the worker registered (batch_sizes) leaves fewer late:
// then the size that leaves the fewest (the smallest of those). The first batch takes
// that many requests, the rest go on at the batch; a bigger first batch also ends its
// oldest request later, so a request late either way is not made later for nothing.
// Called with s.mu held.
func (s *Scheduler) catchUpBatch(w *worker, now time.Time) int {
	b := max(w.spec.Batch, 1)
	if len(w.queue) <= b || len(w.spec.BatchSizes) == 0 || slices.Max(w.spec.BatchSizes) <= b {
		return b
	}
	room := s.roomOf(w)
	late := func(first int) int {
		n, end := 0, now
		for i, size := 0, first; i < len(w.queue); i, size = i+size, b {
			size = min(size, len(w.queue)-i)
			end = end.Add(s.expInfer(w, size))
			for _, q := range w.queue[i : i+size] {
				if end.Add(room).After(q.deadline) {
					n++
				}
			}
		}
		return n
	}
	best, fewest := b, late(b)
	for _, c := range slices.Sorted(slices.Values(w.spec.BatchSizes)) {
		if fewest == 0 {
			break
		}
		if c <= b {
			continue
		}
		if n := late(c); n < fewest {
			best, fewest = c, n
		}
	}
	return best
}

func (s *Scheduler) grant(w *worker, kind string, batch int, reqs []*request, exp time.Duration, now time.Time, p *profileReq) {
	s.nextGrant++
	ids := make([]string, len(reqs))
	for i, q := range reqs {
		ids[i] = q.id
	}
	lim := s.limit(exp)
	hold := s.holdLimit(exp, lim)
	if s.onProbation(w.spec.PID, now) {
		hold = min(hold, max(ProbationHold, lim))
	}
	g := Grant{Worker: w.id, ID: s.nextGrant, Kind: kind, Batch: batch, RequestIDs: ids, Deadline: lim, Seq: w.acquireSeq}
	t := &turn{w: w, grant: g, start: now, expected: exp, limit: lim, hold: hold, reqs: reqs, profile: p}
	s.turn = t
	s.turns++
	w.st.waited(now, now.Sub(w.acquiredAt))
	w.wantTurn = false
	t.timer = s.clock.AfterFunc(lim, func() { s.checkOverrun(t) })
	t.holdT = s.clock.AfterFunc(hold, func() { s.expireHold(t) })
	s.setWake(time.Time{})
	s.out = append(s.out, pendingDelivery{f: w.deliver, g: g})
}

func (s *Scheduler) runAction(a *action, now time.Time) {
	t := &turn{grant: Grant{Kind: "action"}, start: now, limit: s.cfg.OverrunMin, action: a}
	s.turn = t
	s.setWake(time.Time{})
	// A goroutine of its own (a participant of a virtual clock): fn waits between turns.
	Go(s.clock, func() {
		var err error
		if cerr := a.ctx.Err(); cerr != nil {
			err = cerr
		} else {
			err = a.fn(a.ctx)
		}
		s.mu.Lock()
		if s.turn == t {
			s.endTurn(s.clock.Now())
		}
		s.schedule()
		s.unlockAndDeliver()
		// After the grants the action's end made are delivered: a caller of BetweenTurns
		// that returns sees the scheduler already moved on.
		a.finish(err)
	})
}

// setWake arms the wake-up timer for at (zero: none).
func (s *Scheduler) setWake(at time.Time) {
	if at.Equal(s.wakeAt) && (s.wake != nil || at.IsZero()) {
		return
	}
	if s.wake != nil {
		s.wake.Stop()
		s.wake = nil
	}
	s.wakeAt = at
	s.wakeGen++
	if at.IsZero() {
		return
	}
	d := at.Sub(s.clock.Now())
	if d < 0 {
		d = 0
	}
	gen := s.wakeGen
	s.wake = s.clock.AfterFunc(d, func() {
		s.mu.Lock()
		if s.wakeGen != gen {
			// Replaced after this call had already started; the newer timer decides.
			s.mu.Unlock()
			return
		}
		s.wake = nil
		s.wakeAt = time.Time{}
		s.schedule()
		s.unlockAndDeliver()
	})
}
