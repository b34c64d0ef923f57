package sched

// Workers and workloads: registration, tokens, per-worker settings, forgetting idle
// workloads, unregistering.

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// SetInferBatch changes the batch size inference worker id is served at (the most
// requests one grant carries) from its next grant on. The batch must be one of the sizes
// the worker registered (when it listed any).
func (s *Scheduler) SetInferBatch(id string, batch int) error {
	if batch < 1 || batch > proto.MaxBatch {
		return fmt.Errorf("inference batch %d out of range 1..%d", batch, proto.MaxBatch)
	}
	s.mu.Lock()
	defer s.unlockAndDeliver()
	w, ok := s.workers[id]
	if !ok {
		return fmt.Errorf("set batch: worker %q is not registered (see the daemon's worker list)", id)
	}
	if w.spec.Role != proto.RoleInfer {
		return fmt.Errorf("set batch: worker %s is a %s worker; only inference batches are chosen by fulcrumd", id, w.spec.Role)
	}
	if len(w.spec.BatchSizes) > 0 && !slices.Contains(w.spec.BatchSizes, batch) {
		return fmt.Errorf("set batch: worker %s serves batch sizes %v, not %d", id, w.spec.BatchSizes, batch)
	}
	if w.spec.Batch != batch {
		s.log.Info("inference batch size changed", "worker", id, "from", w.spec.Batch, "to", batch)
		w.spec.Batch = batch
		s.schedule()
	}
	return nil
}

// ExpectedDevRel is the deviation of turn times, relative to their mean, assumed before
// any is measured at a mode (the mean absolute deviation of a minibatch's time: about 2%
// for the simulator's 2.5% log-normal noise, 1–3% on GPUs). The controller plans with it
// so that its plans leave the room the admission test (DevK deviations) needs.
const ExpectedDevRel = 0.03

// ExpectTimes replaces what the scheduler expects a worker's turns to take. After a
// power-mode change the running averages describe the old mode; a stale, longer
// expectation keeps training and profile batches from being admitted (they starve until
// re-measured), a stale, shorter one lets them overrun inference deadlines. times maps a
// batch size to its duration at the new mode (from a stored profile); its deviation is
// taken as ExpectedDevRel of it until turns are measured. A size not in times (all of them for a nil
// map) is forgotten and measured afresh, its first turn expected to take the configured
// default. A training worker's minibatches use the entry for its registered batch, its
// micro-batch turns the entries for its declared micro-batch sizes.
func (s *Scheduler) ExpectTimes(id string, times map[int]time.Duration) error {
	s.mu.Lock()
	defer s.unlockAndDeliver()
	w, ok := s.workers[id]
	if !ok {
		return fmt.Errorf("expect times: worker %q is not registered (see the daemon's worker list)", id)
	}
	seed := func(d time.Duration) *estimate {
		ms := float64(d) / float64(time.Millisecond)
		return seededEstimate(ms, ExpectedDevRel*ms)
	}
	w.prof, w.infer = map[int]*estimate{}, map[int]*estimate{}
	w.train = estimate{}
	w.trainMicro = nil
	for b, d := range times {
		if d <= 0 {
			continue
		}
		w.prof[b] = seed(d)
		switch {
		case w.spec.Role == proto.RoleInfer:
			w.infer[b] = seed(d)
		case b == w.spec.Batch:
			w.train = *seed(d)
		case slices.Contains(w.spec.MicroBatches, b):
			*w.trainEst(b) = *seed(d)
		}
	}
	s.schedule()
	return nil
}

// SetTrainingPaused stops (or resumes) granting training minibatches. Inference and
// profile batches are unaffected. The controller pauses training when no known
// configuration meets the budgets with it running (docs/design.md §2: inference and power first).
func (s *Scheduler) SetTrainingPaused(paused bool) {
	s.mu.Lock()
	defer s.unlockAndDeliver()
	if s.trainPaused == paused {
		return
	}
	s.trainPaused = paused
	s.log.Info("training", "paused", paused)
	s.schedule()
}

// Register adds a worker and returns its id and token.
func (s *Scheduler) Register(spec WorkerSpec, deliver Deliver) (id, token string, err error) {
	if spec.Role != proto.RoleTrain && spec.Role != proto.RoleInfer {
		return "", "", proto.Errorf(proto.CodeInvalid, proto.TypeRegister, "role must be train or infer")
	}
	if spec.Batch <= 0 {
		switch {
		case spec.Role == proto.RoleInfer && len(spec.BatchSizes) > 0:
			spec.Batch = slices.Max(spec.BatchSizes)
		default:
			spec.Batch = 1
		}
	}
	if spec.Role == proto.RoleInfer && len(spec.BatchSizes) > 0 && !slices.Contains(spec.BatchSizes, spec.Batch) {
		return "", "", proto.Errorf(proto.CodeInvalid, proto.TypeRegister, "batch %d is not one of batch_sizes %v", spec.Batch, spec.BatchSizes)
	}
	mbs, perr := checkMicroBatches(spec)
	if perr != nil {
		return "", "", perr
	}
	spec.MicroBatches = mbs
	s.mu.Lock()
	defer s.unlockAndDeliver()
	if s.closed {
		return "", "", proto.Errorf(proto.CodeShutdown, proto.TypeRegister, "fulcrumd is shutting down; reconnect after it restarts")
	}
	s.nextReg++
	now := s.clock.Now()
	w := &worker{
		workload: s.workloadFor(spec.Role, spec.Workload, now),
		id:       fmt.Sprintf("%s-%d", spec.Role, s.nextReg),
		token:    newToken(),
		reg:      s.nextReg,
		spec:     spec,
		deliver:  deliver,
		ids:      map[string]*request{},
	}
	if w.live == 0 && spec.Role == proto.RoleTrain {
		// A training workload (re)joining does not catch up on the time it was away:
		// it starts level with the least-served one running.
		lift := -1.0
		for _, o := range s.wlOrder {
			if o != w.workload && o.role == proto.RoleTrain && o.live > 0 && (lift < 0 || s.vtime(o) < lift) {
				lift = s.vtime(o)
			}
		}
		if used := time.Duration(lift * s.weightOf(w.workload)); lift >= 0 && used > w.trainUsed {
			w.trainUsed = used
		}
	}
	w.live++
	s.workers[w.id] = w
	s.order = append(s.order, w)
	s.log.Info("worker registered", "worker", w.id, "role", spec.Role, "workload", spec.Workload, "batch", spec.Batch, "pid", spec.PID)
	return w.id, w.token, nil
}

func (s *Scheduler) workloadFor(role, name string, now time.Time) *workload {
	key := role + "/" + name
	if wl, ok := s.workloads[key]; ok {
		return wl
	}
	wl := &workload{role: role, name: name, since: now, infer: map[int]*estimate{}, prof: map[int]*estimate{}, st: newStats(s.cfg)}
	s.workloads[key] = wl
	s.wlOrder = append(s.wlOrder, wl)
	return wl
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux ≥ 3.17
	return hex.EncodeToString(b[:])
}

// Token returns a worker's token (for checking messages that carry one).
func (s *Scheduler) Token(id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.workers[id]
	if !ok {
		return "", false
	}
	return w.token, true
}

func (s *Scheduler) get(id, ref string) (*worker, *proto.Error) {
	w, ok := s.workers[id]
	if !ok {
		return nil, proto.Errorf(proto.CodeNotRegistered, ref, "worker %q is not registered; send register first", id)
	}
	return w, nil
}

// forgetIdle forgets the workloads idle longest until at most MaxIdleWorkloads are idle.
func (s *Scheduler) forgetIdle() {
	var idle []*workload
	for _, wl := range s.wlOrder {
		if wl.live == 0 {
			idle = append(idle, wl)
		}
	}
	if len(idle) <= MaxIdleWorkloads {
		return
	}
	slices.SortStableFunc(idle, func(a, b *workload) int { return a.idleSince.Compare(b.idleSince) })
	drop := map[*workload]bool{}
	for _, wl := range idle[:len(idle)-MaxIdleWorkloads] {
		drop[wl] = true
		delete(s.workloads, wl.role+"/"+wl.name)
		if s.cfg.OnForget != nil {
			s.cfg.OnForget(wl.role, wl.name)
		}
	}
	s.wlOrder = slices.DeleteFunc(s.wlOrder, func(wl *workload) bool { return drop[wl] })
}

// Unregister removes a worker (its connection closed). A turn it holds is released at
// once; its queued and in-flight requests are accounted as failed; profile requests for
// it fail.
func (s *Scheduler) Unregister(id string) {
	s.mu.Lock()
	defer s.unlockAndDeliver()
	w, ok := s.workers[id]
	if !ok {
		return
	}
	now := s.clock.Now()
	if s.turn != nil && s.turn.w == w {
		t := s.turn
		for _, q := range t.reqs {
			s.finish(w, q, now, false)
		}
		if t.profile != nil {
			t.profile.finish(profileResult{err: fmt.Errorf("profile batch on %s: worker disconnected during the batch", id)})
		}
		s.log.Warn("worker disconnected while holding the turn; turn released", "worker", id, "grant", t.grant.ID, "held_ms", ms(now.Sub(t.start)))
		s.endTurn(now)
	}
	for _, q := range w.queue {
		s.finish(w, q, now, false)
	}
	if len(w.queue) > 0 {
		s.log.Warn("worker disconnected with queued requests; counted as failed", "worker", id, "requests", len(w.queue))
	}
	w.queue = nil
	kept := s.profiles[:0]
	for _, p := range s.profiles {
		if p.worker == id {
			p.finish(profileResult{err: fmt.Errorf("profile on %s: worker disconnected", id)})
			continue
		}
		kept = append(kept, p)
	}
	s.profiles = kept
	w.live--
	if w.live == 0 {
		w.idleSince = now
		w.st.compact(now)
		s.forgetIdle()
	}
	delete(s.workers, id)
	s.order = slices.DeleteFunc(s.order, func(x *worker) bool { return x == w })
	s.log.Info("worker unregistered", "worker", id)
	s.schedule()
}
