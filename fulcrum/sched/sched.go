// Package sched is fulcrumd's GPU turn scheduler ("managed interleaving"): one minibatch
// runs at a time; inference requests queue per inference worker with a deadline of
// arrival + latency budget and are batched deadline-aware; training minibatches run in
// the gaps only when every waiting request can still meet its deadline after them;
// power-mode changes run between turns. See docs/runtime.md for the rules and why.
//
// The Scheduler is event driven: the daemon calls Register, Arrivals, Acquire, Release
// and Unregister as worker messages come in, and the scheduler hands out grants through
// each worker's Deliver callback. Time comes from an injected Clock.
package sched

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/internal/limits"
)

// WorkerSpec is what a worker registers.
type WorkerSpec struct {
	Role       string // proto.RoleTrain or proto.RoleInfer
	Workload   string
	Batch      int   // train: B_T; infer: the batch size to serve
	BatchSizes []int // infer: sizes the worker can serve
	PID        int   // peer pid from SO_PEERCRED (0 when unknown)
	UID        int
	// NoProfiles: the worker declined profile batches at registration (it has no
	// on_profile handler); Profile refuses it.
	NoProfiles bool
	// MicroBatches (train) are the micro-batch sizes the worker accepts, divisors of
	// Batch (proto.Msg.MicroBatches): a minibatch may run as Batch/m turns of m samples
	// (micro.go). Empty: whole minibatches only.
	MicroBatches []int
}

// Grant is a turn handed to a worker.
type Grant struct {
	Worker string
	ID     uint64
	Kind   string // proto.KindTrain, KindInfer or KindProfile
	Batch  int
	// MicroBatch (train) is the samples to run in this turn when below Batch (the
	// minibatch): one of k turns of one minibatch; 0: the whole minibatch.
	MicroBatch int
	RequestIDs []string
	// Deadline is how long the worker has: the overrun limit, and for inference no later
	// than the tightest request's deadline.
	Deadline time.Duration
	// Seq echoes the acquire's sequence number.
	Seq uint64
}

// Deliver hands a grant to a worker. It must not block (the daemon queues it for the
// worker's connection) and is called without the scheduler's lock held.
type Deliver func(Grant)

// Release is what a worker reports when it ends its turn.
type Release struct {
	Grant    uint64
	Duration time.Duration // worker-measured; 0 means use the turn's held time
	Samples  int           // train: samples processed (0: the registered batch)
	Results  []proto.Result
}

// Scheduler decides who holds the GPU turn. It is safe for concurrent use.
type Scheduler struct {
	cfg   Config
	clock Clock
	log   *slog.Logger

	mu        sync.Mutex
	workers   map[string]*worker
	order     []*worker // registration order, for round-robin
	workloads map[string]*workload
	wlOrder   []*workload
	rrLast    int // registration number of the training worker granted last
	nextReg   int
	nextGrant uint64
	turn      *turn
	actions   []*action
	profiles  []*profileReq
	wake      Timer
	wakeAt    time.Time
	// guessFrom and guessUntil span the last training turn admitted on a warm-up's guess
	// of its time (guessUntil zero while it runs): the requests that arrived during it
	// waited for a turn the admission test could not judge, so the learned rooms do not
	// count them (room.go, countRoom).
	guessFrom, guessUntil time.Time
	// profiledAt is when the last profile batch was granted: the learned rooms judge
	// no latencies from a search (room.go).
	profiledAt time.Time
	// turnSpread holds, while rooms learn, how far each recent inference and training
	// turn lay from its expected time (room.go): a change in the turn times shows there
	// at once, in a stream's latencies only when a tail happens to meet its requests.
	turnSpread [2]*window
	wakeGen    uint64
	out        []pendingDelivery // grants to deliver once the lock is released
	closed     bool
	// trainPaused: training minibatches get no turns (the controller found no
	// configuration that meets the budgets with training running).
	trainPaused bool
	// latency is L, the deadline of requests of a workload without a budget of its own
	// (SetLatencyBudget: the controller's, from the operator's targets).
	latency time.Duration
	// streamBudget holds per-workload latency budgets (inference workload name → L_i)
	// that replace the latency budget for that workload's requests; at most
	// MaxStreamBudgets entries.
	streamBudget map[string]time.Duration
	// trainWeight holds the training workloads' time-share weights (name → w_j, default
	// 1); at most MaxStreamBudgets entries.
	trainWeight map[string]float64
	// trainHold is the training worker that just released a minibatch while its
	// workload was the least served: another training workload's minibatch waits for
	// its next acquire until trainHoldUntil, or a worker that releases and re-acquires
	// at once would always find the other one granted first (shares would be turns).
	trainHold      *worker
	trainHoldUntil time.Time
	// probation holds the peer pids that let a turn expire, until when (overrun.go).
	probation map[int]time.Time

	turns    uint64
	overruns uint64
	// clamped counts releases whose reported duration exceeded the held time (and was
	// replaced by it); expired counts turns taken back by the hold limit.
	clamped uint64
	expired uint64
	// underReported counts releases reporting less than the held time.
	underReported uint64
	clampLog      rateLimit
	// refuseLog limits the warnings for requests refused by per-stream admission.
	refuseLog rateLimit
	// microLog limits the lines logged for micro-batch changes.
	microLog rateLimit
	started  time.Time
}

type worker struct {
	*workload // measurements and expected times, shared by the workload's workers
	id        string
	token     string
	reg       int
	spec      WorkerSpec
	deliver   Deliver

	wantTurn   bool
	acquiredAt time.Time
	acquireSeq uint64
	// expired: the hold limit took a turn back from this worker; it gets no more turns
	// (the daemon drops its connection).
	expired bool

	// Training micro-batches (micro.go): micro is the micro-batch size of the minibatch
	// in progress (chosen when it starts; Batch: whole minibatches), mbDone the samples
	// of it run so far (0: at a minibatch boundary), microSet a size set through
	// SetMicroBatch, the largest it runs (0: the scheduler chooses).
	micro    int
	mbDone   int
	microSet int
	// microChanges counts changes of micro.
	microChanges uint64

	queue []*request          // inference: waiting, by deadline
	ids   map[string]*request // queued and in flight
	// bucket is the GPU time (s) the stream may still ask for, as of bucketAt
	// (per-stream admission, arrivals.go); a zero bucketAt: full.
	bucket   float64
	bucketAt time.Time
	// offered is the rate (req/s) the stream reports requests at, admitted or not,
	// as of offeredAt.
	offered   float64
	offeredAt time.Time
	// heldUntil: the stream is held to its share until then (arrivals.go).
	heldUntil time.Time
}

// workload is what the scheduler knows about one workload (role and name): expected
// times and measurements. It outlives its workers, so a worker that restarts keeps what
// was learned, and several workers of one workload are measured together.
type workload struct {
	role, name string
	since      time.Time // first registration
	live       int       // registered workers
	idleSince  time.Time // when live last fell to 0
	train      estimate  // expected training minibatch (ms)
	// trainMicro is the expected training turn (ms) by micro-batch size below the
	// minibatch (micro.go).
	trainMicro map[int]*estimate
	infer      map[int]*estimate   // expected inference batch time by size (ms)
	prof       map[int]*estimate   // expected profile batch time by size (ms)
	real       map[int][]realBatch // latest real (train/infer) batch times by size: RealBatchMS
	st         *stats
	// room is an inference stream's learned admission room (room.go).
	room roomState
	// trainUsed is the GPU time the workload's training minibatches held: training
	// turns go to the waiting workload with the least trainUsed/weight (time shares).
	trainUsed time.Duration
}

// MaxIdleWorkloads bounds the workloads remembered without a live worker; beyond it the
// one idle longest is forgotten. Workloads with live workers are bounded by the worker
// connection limit, so memory and metric series stay bounded whatever names workers
// register (issue 17).
const MaxIdleWorkloads = 32

type request struct {
	id       string
	arrived  time.Time
	deadline time.Time
}

type turn struct {
	w        *worker // nil for an action
	grant    Grant
	start    time.Time
	expected time.Duration
	limit    time.Duration
	hold     time.Duration // the hold limit: the turn is taken back after it
	reqs     []*request
	overrun  bool
	timer    Timer
	holdT    Timer
	profile  *profileReq
	action   *action
	guessed  bool // a training turn admitted on a warm-up's guess of its time
}

type action struct {
	ctx  context.Context
	fn   func(context.Context) error
	done Event // fired once err is set
	err  error
}

// finish sets the action's result and wakes its caller; called once.
func (a *action) finish(err error) {
	a.err = err
	a.done.Fire()
}

type profileReq struct {
	worker string
	batch  int
	queued time.Time
	done   Event // fired once res is set
	res    profileResult
}

// finish sets the profile batch's result and wakes its caller; called once.
func (p *profileReq) finish(r profileResult) {
	p.res = r
	p.done.Fire()
}

type profileResult struct {
	d   time.Duration
	err error
}

type pendingDelivery struct {
	f  Deliver
	g  Grant
	fn func() // instead of f(g), when set
}

// New returns a scheduler; log may be nil.
func New(cfg Config, clock Clock, log *slog.Logger) *Scheduler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if clock == nil {
		clock = RealClock{}
	}
	return &Scheduler{
		cfg:       cfg.withDefaults(),
		latency:   DefaultLatencyBudget,
		clock:     clock,
		log:       log,
		workers:   map[string]*worker{},
		workloads: map[string]*workload{},
		started:   clock.Now(),
	}
}

// Config returns the effective configuration.
func (s *Scheduler) Config() Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

// SetLatencyBudget changes L for requests arriving from now on. The controller calls it
// with the operator's latency budget (its Targets); until then the scheduler holds
// DefaultLatencyBudget.
func (s *Scheduler) SetLatencyBudget(l time.Duration) {
	if l <= 0 {
		return
	}
	s.mu.Lock()
	s.latency = l
	s.restartRoomEvidence()
	s.schedule()
	s.unlockAndDeliver()
}

// LatencyBudget is L, the latency budget of the requests of a workload without one of
// its own: the last SetLatencyBudget's, else DefaultLatencyBudget.
func (s *Scheduler) LatencyBudget() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latency
}

// DefaultLatencyBudget is the latency budget a scheduler holds until its controller
// gives it the operator's (fulcrumd's default one: limits.DefaultLatencyMS).
const DefaultLatencyBudget = time.Duration(limits.DefaultLatencyMS * float64(time.Millisecond))

// TrainRejoinGrace is how long a training worker that released the least-served
// workload's minibatch keeps its claim on the next training turn while its acquire is on
// its way (a local worker's release and acquire are two messages, microseconds apart).
const TrainRejoinGrace = 5 * time.Millisecond

// MaxStreamBudgets bounds the per-workload latency budgets held: they are set by the
// operator through the controller, one per inference stream planned for.
const MaxStreamBudgets = limits.MaxStreams

// SetStreamLatencyBudgets replaces the per-workload latency budgets (inference workload
// name → L_i) for requests arriving from now on; a workload not named uses the latency
// budget (SetLatencyBudget). Entries ≤ 0 are dropped; more than MaxStreamBudgets is an
// error and changes nothing.
func (s *Scheduler) SetStreamLatencyBudgets(budgets map[string]time.Duration) error {
	if len(budgets) > MaxStreamBudgets {
		return fmt.Errorf("%d per-stream latency budgets: at most %d are held", len(budgets), MaxStreamBudgets)
	}
	m := make(map[string]time.Duration, len(budgets))
	for k, v := range budgets {
		if v > 0 {
			m[k] = v
		}
	}
	s.mu.Lock()
	s.streamBudget = m
	s.restartRoomEvidence()
	s.schedule()
	s.unlockAndDeliver()
	return nil
}

// SetTrainWeights replaces the training workloads' weights (name → w_j > 0): training
// turns give workload j the share w_j/Σw of the GPU time training gets. A workload not
// named has weight 1. The shares count from the change. More than MaxStreamBudgets entries, or a weight that is not a
// positive number, is an error and changes nothing.
func (s *Scheduler) SetTrainWeights(weights map[string]float64) error {
	if len(weights) > MaxStreamBudgets {
		return fmt.Errorf("%d training weights: at most %d are held", len(weights), MaxStreamBudgets)
	}
	m := make(map[string]float64, len(weights))
	for k, v := range weights {
		if !(v > 0) || math.IsInf(v, 0) {
			return fmt.Errorf("training weight of %s = %v: want a positive number", k, v)
		}
		m[k] = v
	}
	s.mu.Lock()
	s.trainWeight = m
	// Shares count from the change: history at the old weights would otherwise buy one
	// workload a run of catch-up turns.
	for _, wl := range s.wlOrder {
		wl.trainUsed = 0
	}
	s.schedule()
	s.unlockAndDeliver()
	return nil
}

// weightOf is a training workload's weight. Called with s.mu held.
func (s *Scheduler) weightOf(wl *workload) float64 {
	if v, ok := s.trainWeight[wl.name]; ok {
		return v
	}
	return 1
}

// vtime is a training workload's GPU time used per unit of weight. Called with s.mu held.
func (s *Scheduler) vtime(wl *workload) float64 {
	return float64(wl.trainUsed) / s.weightOf(wl)
}

// budgetOf is the latency budget of w's requests. Called with s.mu held.
func (s *Scheduler) budgetOf(w *worker) time.Duration {
	if l, ok := s.streamBudget[w.spec.Workload]; ok {
		return l
	}
	return s.latency
}

// unlockAndDeliver releases the lock, then hands out the grants decided under it, so a
// Deliver that takes its own locks cannot deadlock with the scheduler.
func (s *Scheduler) unlockAndDeliver() {
	out := s.out
	s.out = nil
	s.mu.Unlock()
	for _, d := range out {
		if d.fn != nil {
			d.fn()
			continue
		}
		d.f(d.g)
	}
}

// TurnHolder is the id of the worker holding the turn ("" when none does).
func (s *Scheduler) TurnHolder() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.turn == nil || s.turn.w == nil {
		return ""
	}
	return s.turn.w.id
}

// Close stops scheduling: no new turns are granted, pending actions and profiles fail.
func (s *Scheduler) Close() {
	s.mu.Lock()
	defer s.unlockAndDeliver()
	s.closed = true
	for _, a := range s.actions {
		a.finish(errors.New("scheduler closed before the action ran"))
	}
	s.actions = nil
	for _, p := range s.profiles {
		p.finish(profileResult{err: errors.New("scheduler closed before the profile batch ran")})
	}
	s.profiles = nil
	if s.wake != nil {
		s.wake.Stop()
	}
}
