package sched

// Training micro-batches (issue 32, docs/runtime.md "Micro-batched training turns"): a
// training worker that declared micro-batch sizes runs a minibatch of B samples as
// k = B/m turns of m samples, accumulating gradients and stepping its optimizer after
// the k-th. A turn is then k times shorter, so an inference request waits at most one
// micro-batch: training keeps running beside a latency budget shorter than a whole
// minibatch, where it would otherwise get no turn at all.
//
// The k turns of one minibatch are kept together: the worker with a minibatch in
// progress gets the next training turn before any other training workload, so the time
// shares between training workloads are decided at minibatch boundaries, and the
// minibatch counts once in the throughput. Each turn is admitted, held to a hold limit
// and starved on its own (micro-batch) expected time. The micro-batch size is chosen
// when a minibatch starts: the largest declared size whose expected turn fits every
// inference stream's room, up to the one set through SetMicroBatch (chooseMicro); within
// a minibatch it only goes down, to a size dividing the samples left (startMinibatch).

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// checkMicroBatches validates a training worker's declared micro-batch sizes and returns
// them sorted, the minibatch itself included (it is always accepted).
func checkMicroBatches(spec WorkerSpec) ([]int, *proto.Error) {
	if len(spec.MicroBatches) == 0 {
		return nil, nil
	}
	if spec.Role != proto.RoleTrain {
		return nil, proto.Errorf(proto.CodeInvalid, proto.TypeRegister, "micro_batches is for training workers; drop it from an inference registration")
	}
	if len(spec.MicroBatches) > proto.MaxMicroBatches {
		return nil, proto.Errorf(proto.CodeInvalid, proto.TypeRegister, "at most %d micro_batches, got %d", proto.MaxMicroBatches, len(spec.MicroBatches))
	}
	out := make([]int, 0, len(spec.MicroBatches)+1)
	for _, m := range spec.MicroBatches {
		if m < 1 || m > spec.Batch || spec.Batch%m != 0 {
			return nil, proto.Errorf(proto.CodeInvalid, proto.TypeRegister, "micro_batches: %d does not divide the minibatch %d; list divisors of batch", m, spec.Batch)
		}
		if slices.Contains(out, m) {
			return nil, proto.Errorf(proto.CodeInvalid, proto.TypeRegister, "micro_batches lists %d twice; list each size once", m)
		}
		out = append(out, m)
	}
	if !slices.Contains(out, spec.Batch) {
		out = append(out, spec.Batch)
	}
	slices.Sort(out)
	return out, nil
}

// microSize is the size of the turns of the minibatch in progress (or of the next one):
// the whole minibatch unless a micro-batch was chosen.
func (w *worker) microSize() int {
	if w.micro > 0 && w.micro < w.spec.Batch {
		return w.micro
	}
	return w.spec.Batch
}

// trainEst is the estimate of a training turn of m samples, created when missing.
func (w *worker) trainEst(m int) *estimate {
	if m >= w.spec.Batch {
		return &w.train
	}
	if w.trainMicro == nil {
		w.trainMicro = map[int]*estimate{}
	}
	e := w.trainMicro[m]
	if e == nil {
		e = &estimate{}
		w.trainMicro[m] = e
	}
	return e
}

// trainSettled reports whether the expected time of a training turn of m samples is
// past its warm-up: before, admission ran on a guess (the default, a first slow
// measurement), and what the turn does to the streams is not the learned rooms' to
// correct (countRoom).
func (w *worker) trainSettled(m int) bool {
	if m < w.spec.Batch {
		e := w.trainMicro[m]
		return e != nil && e.settled
	}
	return w.train.settled
}

// starveAfterAt is the starvation wait of a training turn of m samples (see
// estimate.starveAfter).
func (w *worker) starveAfterAt(m int, base time.Duration) time.Duration {
	if m >= w.spec.Batch {
		return w.train.starveAfter(base)
	}
	if e := w.trainMicro[m]; e != nil {
		return e.starveAfter(base)
	}
	return base / 4 // not measured yet: doubtful, as in warm-up
}

// expTrainAt is the expected time of a training turn of m samples on w. A size not yet
// measured is estimated from the measured ones: interpolated between the nearest
// below and above, proportionally from the nearest above (small batches use the GPU
// less well, so this is low: the first turn measures it), or proportionally from the
// largest below (an upper bound).
func (s *Scheduler) expTrainAt(w *worker, m int) time.Duration {
	if m >= w.spec.Batch {
		return s.expTrain(w)
	}
	if e := w.trainMicro[m]; e != nil && e.n > 0 {
		return durMS(e.guarded(s.cfg.DevK))
	}
	loN, hiN := 0, 0
	var lo, hi float64
	consider := func(size int, e *estimate) {
		if e == nil || e.n == 0 {
			return
		}
		v := e.guarded(s.cfg.DevK)
		if size < m && size > loN {
			loN, lo = size, v
		}
		if size > m && (hiN == 0 || size < hiN) {
			hiN, hi = size, v
		}
	}
	for size, e := range w.trainMicro {
		consider(size, e)
	}
	consider(w.spec.Batch, &w.train)
	switch {
	case loN > 0 && hiN > 0:
		return durMS(lo + (hi-lo)*float64(m-loN)/float64(hiN-loN))
	case hiN > 0:
		return durMS(hi * float64(m) / float64(hiN))
	case loN > 0:
		return durMS(lo * float64(m) / float64(loN))
	}
	return time.Duration(float64(s.cfg.DefaultTrain) * float64(m) / float64(w.spec.Batch))
}

// roomFits reports whether a training turn of expected length exp fits every inference
// stream's room: a request arriving as the turn starts is still served within its
// budget after it, keeping the stream's room — the test admit applies to a stream with
// nothing queued, without the exemption for an arrival being unlikely (a stream that is
// quiet now need not stay quiet over the minibatch). Called with s.mu held.
func (s *Scheduler) roomFits(now time.Time, exp time.Duration) bool {
	for _, w := range s.order {
		if w.spec.Role != proto.RoleInfer {
			continue
		}
		// A stream with no traffic yet counts too: a request may come during the
		// minibatch, and the first minibatch beside a camera stream is the one most
		// likely to overlap its first frames.
		rate := w.st.rate(now, w.since)
		n := min(w.spec.Batch, max(1, int(math.Ceil(rate*exp.Seconds()))))
		if s.budgetOf(w) < exp+s.roomOf(w)+s.expInfer(w, n) {
			return false
		}
	}
	return true
}

// chooseMicro is the micro-batch size for w's next minibatch: the largest declared size,
// up to the one set through SetMicroBatch (the controller's plan), whose expected turn
// fits every inference stream's room (the whole minibatch when it fits and none is set),
// else the smallest. The set size is a ceiling, not a floor: while a stream's learned
// room has grown past what the set size's turn leaves (a run of late requests), admit
// would refuse that turn whenever a request may arrive during it and the GPU would idle
// between inference batches until the starvation rule let one through — measured on
// the lifetime bench, 5–15 s spells of an idle GPU, ~10 % of an hour. A shorter turn
// keeps training there at less power and a shorter wait. Called with s.mu held.
func (s *Scheduler) chooseMicro(w *worker, now time.Time) int {
	sizes := w.spec.MicroBatches
	if len(sizes) == 0 {
		return w.spec.Batch
	}
	for i := len(sizes) - 1; i >= 0; i-- {
		if w.microSet > 0 && sizes[i] > w.microSet {
			continue
		}
		if s.roomFits(now, s.expTrainAt(w, sizes[i])) {
			return sizes[i]
		}
	}
	return sizes[0]
}

// startMinibatch chooses the micro-batch size of w's next minibatch at a minibatch
// boundary. Within a minibatch the size only goes down, to a size that divides the
// samples left: a step to a slower mode (or a tighter budget) sets a shorter turn, and
// the old size's turn may no longer fit the room — training would stall until the
// starvation rule ran one longer than the budget. Each turn's loss is scaled by its own
// micro_batch/batch, so the accumulated gradient is still the minibatch's (workers
// count samples: docs/protocol.md). Called with s.mu held.
func (s *Scheduler) startMinibatch(w *worker, now time.Time) {
	if w.mbDone != 0 {
		if m := s.chooseMicro(w, now); m < w.microSize() && (w.spec.Batch-w.mbDone)%m == 0 {
			s.setMicro(w, m, now)
		}
		return
	}
	m := s.chooseMicro(w, now)
	if m == w.microSize() {
		w.micro = m
		return
	}
	s.setMicro(w, m, now)
}

// setMicro changes the size of w's turns to m. Called with s.mu held.
func (s *Scheduler) setMicro(w *worker, m int, now time.Time) {
	from := w.microSize()
	w.micro = m
	w.microChanges++
	if ok, dropped := s.microLog.allow(now, time.Second); ok {
		s.log.Info("training micro-batch changed", "worker", w.id, "workload", w.name, "from", from, "to", m,
			"turns_per_minibatch", w.spec.Batch/m, "expected_turn_ms", ms(s.expTrainAt(w, m)), "not_logged_since_last", dropped)
	}
}

// SetMicroBatch sets the largest micro-batch size training worker id runs its
// minibatches at (a smaller declared one while this one's turn does not fit the room:
// chooseMicro), from its next minibatch on (a smaller size from its next turn, when it
// divides the samples left of the minibatch in progress): one of the sizes it declared
// (or its minibatch); 0 gives the choice back to the scheduler (the largest size that
// fits the room).
func (s *Scheduler) SetMicroBatch(id string, m int) error {
	s.mu.Lock()
	defer s.unlockAndDeliver()
	w, ok := s.workers[id]
	if !ok {
		return fmt.Errorf("set micro-batch: worker %q is not registered (see the daemon's worker list)", id)
	}
	if w.spec.Role != proto.RoleTrain {
		return fmt.Errorf("set micro-batch: worker %s is an inference worker; micro-batches are for training", id)
	}
	if m != 0 && m != w.spec.Batch && !slices.Contains(w.spec.MicroBatches, m) {
		return fmt.Errorf("set micro-batch: worker %s accepts micro-batches %v (minibatch %d), not %d", id, w.spec.MicroBatches, w.spec.Batch, m)
	}
	w.microSet = m
	s.schedule()
	return nil
}
