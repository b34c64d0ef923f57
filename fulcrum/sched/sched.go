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
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// Config holds the scheduler's knobs. Zero fields take the defaults of DefaultConfig.
type Config struct {
	// LatencyBudget is L: each request's deadline is its arrival plus L.
	LatencyBudget time.Duration
	// DefaultTrain and DefaultInfer are the expected minibatch times used before a
	// workload has been measured (DefaultInfer for one inference batch of any size).
	DefaultTrain time.Duration
	DefaultInfer time.Duration
	// EWMAAlpha weighs the newest inter-arrival gap in the arrival rate used before the
	// rate window fills. (Expected turn times are windowed medians: estimate.go.)
	EWMAAlpha float64
	// A turn overruns when it is held longer than max(OverrunFactor × expected, OverrunMin).
	OverrunFactor float64
	OverrunMin    time.Duration
	// A worker holding a turn longer than max(HoldFactor × expected, HoldMin) loses it:
	// the turn is taken back and granted to others, and OnHoldExpired is called so the
	// daemon can tell the worker and drop its connection. A worker that acquires and
	// never releases would otherwise stall every other worker for as long as it lives.
	HoldFactor float64
	HoldMin    time.Duration
	// OnHoldExpired, when set, is called (without the scheduler's lock) for every turn
	// taken back by the hold limit.
	OnHoldExpired func(worker string, grant uint64, held, limit time.Duration)
	// TrustReportedDurations takes released durations as reported even when they exceed
	// the time the turn was held. Only for in-process drivers whose durations are modeled
	// rather than spent (the controller's tests); fulcrumd never sets it, since a worker
	// could otherwise inflate its workload's expected time and starve the others.
	TrustReportedDurations bool
	// OnForget, when set, is called with the scheduler's lock held when an idle workload
	// is forgotten (fulcrumd drops its metric series); it must be quick.
	OnForget func(role, workload string)
	// IdleAdmitArrivals: with an empty inference queue whose next request could not wait
	// out a training minibatch, training still runs when the expected number of arrivals
	// during it (rate × expected time) is below this. 0 means never.
	IdleAdmitArrivals float64
	// DevK: expected times used for deadline decisions are the EWMA mean plus DevK times
	// the EWMA absolute deviation of the measured times, so a workload whose minibatch
	// time spreads is given room. 0 uses the mean alone.
	DevK float64
	// Starve: a training worker kept waiting this long by the admission test is granted
	// a minibatch anyway as soon as no inference request is queued or in flight, so a
	// stale expected time (an outlier measurement) cannot block training forever. 0
	// disables it.
	Starve time.Duration
	// ProfileWait: a profile batch the admission test keeps out this long is granted as
	// soon as no inference request is queued (waiting ones are served first). Without it
	// a mode whose minibatch is longer than the latency budget could never be profiled
	// while requests keep arriving; requests that arrive during such a batch may miss
	// their deadlines and are counted. 0 disables it.
	ProfileWait time.Duration
	// Margin is kept free before every deadline for what the expected times do not
	// cover: waking up, the grant's trip to the worker, the worker starting the batch.
	Margin time.Duration
	// Window and WindowSamples bound the measurement windows (whichever is smaller).
	Window        time.Duration
	WindowSamples int
	// RecentWindow is the shorter latency window the controller watches (reported as
	// WorkloadStats.LatencyRecent), so that a violation stops counting soon after the
	// controller has acted on it.
	RecentWindow time.Duration
	// OnServed, when set, is called for every request served (workload, latency), with
	// the scheduler's lock held: it must be quick and must not call the scheduler
	// (fulcrumd feeds its Prometheus latency histogram from it).
	OnServed func(workload string, latency time.Duration)
}

// DefaultConfig is what fulcrumd uses when configs/fulcrum.yaml says nothing.
func DefaultConfig() Config {
	return Config{
		LatencyBudget:     100 * time.Millisecond,
		DefaultTrain:      100 * time.Millisecond,
		DefaultInfer:      20 * time.Millisecond,
		EWMAAlpha:         0.2,
		OverrunFactor:     3,
		OverrunMin:        50 * time.Millisecond,
		HoldFactor:        10,
		HoldMin:           5 * time.Second,
		IdleAdmitArrivals: 0.1,
		DevK:              2,
		Margin:            5 * time.Millisecond,
		Starve:            5 * time.Second,
		ProfileWait:       time.Second,
		Window:            30 * time.Second,
		WindowSamples:     10000,
		RecentWindow:      5 * time.Second,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.LatencyBudget <= 0 {
		c.LatencyBudget = d.LatencyBudget
	}
	if c.DefaultTrain <= 0 {
		c.DefaultTrain = d.DefaultTrain
	}
	if c.DefaultInfer <= 0 {
		c.DefaultInfer = d.DefaultInfer
	}
	if c.EWMAAlpha <= 0 || c.EWMAAlpha > 1 {
		c.EWMAAlpha = d.EWMAAlpha
	}
	if c.OverrunFactor <= 0 {
		c.OverrunFactor = d.OverrunFactor
	}
	if c.OverrunMin <= 0 {
		c.OverrunMin = d.OverrunMin
	}
	if c.HoldFactor <= 0 {
		c.HoldFactor = d.HoldFactor
	}
	if c.HoldMin <= 0 {
		c.HoldMin = d.HoldMin
	}
	if c.IdleAdmitArrivals < 0 {
		c.IdleAdmitArrivals = 0
	}
	if c.DevK < 0 {
		c.DevK = 0
	}
	if c.Margin < 0 {
		c.Margin = 0
	}
	if c.Window <= 0 {
		c.Window = d.Window
	}
	if c.WindowSamples <= 0 {
		c.WindowSamples = d.WindowSamples
	}
	if c.RecentWindow <= 0 {
		c.RecentWindow = d.RecentWindow
	}
	return c
}

// WorkerSpec is what a worker registers.
type WorkerSpec struct {
	Role       string // proto.RoleTrain or proto.RoleInfer
	Workload   string
	Batch      int   // train: B_T; infer: the batch size to serve
	BatchSizes []int // infer: sizes the worker can serve
	PID        int   // peer pid from SO_PEERCRED (0 when unknown)
	UID        int
}

// Grant is a turn handed to a worker.
type Grant struct {
	Worker     string
	ID         uint64
	Kind       string // proto.KindTrain, KindInfer or KindProfile
	Batch      int
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
	wakeGen   uint64
	out       []pendingDelivery // grants to deliver once the lock is released
	closed    bool
	// trainPaused: training minibatches get no turns (the controller found no
	// configuration that meets the budgets with training running).
	trainPaused bool

	turns    uint64
	overruns uint64
	// clamped counts releases whose reported duration exceeded the held time (and was
	// replaced by it); expired counts turns taken back by the hold limit.
	clamped  uint64
	expired  uint64
	clampLog rateLimit
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

	queue []*request          // inference: waiting, by deadline
	ids   map[string]*request // queued and in flight
}

// workload is what the scheduler knows about one workload (role and name): expected
// times and measurements. It outlives its workers, so a worker that restarts keeps what
// was learned, and several workers of one workload are measured together.
type workload struct {
	role, name string
	since      time.Time         // first registration
	live       int               // registered workers
	idleSince  time.Time         // when live last fell to 0
	train      estimate          // expected training minibatch (ms)
	infer      map[int]*estimate // expected inference batch time by size (ms)
	prof       map[int]*estimate // expected profile batch time by size (ms)
	st         *stats
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
}

type action struct {
	ctx  context.Context
	fn   func(context.Context) error
	done chan error
}

type profileReq struct {
	worker string
	batch  int
	queued time.Time
	done   chan profileResult
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

// SetLatencyBudget changes L for requests arriving from now on.
func (s *Scheduler) SetLatencyBudget(l time.Duration) {
	if l <= 0 {
		return
	}
	s.mu.Lock()
	s.cfg.LatencyBudget = l
	s.schedule()
	s.unlockAndDeliver()
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
// default. A training worker's minibatches use the entry for its registered batch.
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
	for b, d := range times {
		if d <= 0 {
			continue
		}
		w.prof[b] = seed(d)
		if w.spec.Role == proto.RoleInfer {
			w.infer[b] = seed(d)
		} else if b == w.spec.Batch {
			w.train = *seed(d)
		}
	}
	s.schedule()
	return nil
}

// SetTrainingPaused stops (or resumes) granting training minibatches. Inference and
// profile batches are unaffected. The controller pauses training when no known
// configuration meets the budgets with it running (DESIGN §2: inference and power first).
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

// MaxPending bounds one worker's queued plus in-flight requests, so a worker that
// reports arrivals and never serves them cannot grow fulcrumd without bound.
const MaxPending = 65536

// Arrivals queues inference requests for worker id. Each request's arrival is now minus
// its age. Duplicate ids (queued or in flight) are rejected; the others are queued.
func (s *Scheduler) Arrivals(id string, reqs []proto.Request) error {
	s.mu.Lock()
	defer s.unlockAndDeliver()
	w, perr := s.get(id, proto.TypeArrivals)
	if perr != nil {
		return perr
	}
	if w.spec.Role != proto.RoleInfer {
		return proto.Errorf(proto.CodeInvalid, proto.TypeArrivals, "arrivals are for inference workers; %s registered as %s", id, w.spec.Role)
	}
	if len(w.ids)+len(reqs) > MaxPending {
		return proto.Errorf(proto.CodeInvalid, proto.TypeArrivals, "%d requests are already queued or in flight (limit %d); acquire and serve them before reporting more", len(w.ids), MaxPending)
	}
	now := s.clock.Now()
	var dups []string
	for _, r := range reqs {
		if _, dup := w.ids[r.ID]; dup {
			dups = append(dups, r.ID)
			continue
		}
		at := now.Add(-time.Duration(r.AgeMS * float64(time.Millisecond)))
		q := &request{id: r.ID, arrived: at, deadline: at.Add(s.cfg.LatencyBudget)}
		w.ids[r.ID] = q
		i := sort.Search(len(w.queue), func(i int) bool { return w.queue[i].deadline.After(q.deadline) })
		w.queue = slices.Insert(w.queue, i, q)
		w.st.arrive(at)
	}
	s.schedule()
	if len(dups) > 0 {
		return proto.Errorf(proto.CodeInvalid, proto.TypeArrivals, "request ids already queued or in flight were ignored: %v; use unique ids", clipList(dups))
	}
	return nil
}

func clipList(v []string) []string {
	if len(v) > 8 {
		return append(v[:8:8], "…")
	}
	return v
}

// Acquire asks for the next turn. seq is echoed in the grant.
func (s *Scheduler) Acquire(id string, seq uint64) error {
	s.mu.Lock()
	defer s.unlockAndDeliver()
	w, perr := s.get(id, proto.TypeAcquire)
	if perr != nil {
		return perr
	}
	if s.turn != nil && s.turn.w == w {
		return proto.Errorf(proto.CodeOutOfOrder, proto.TypeAcquire, "grant %d is still held; release it before acquiring again", s.turn.grant.ID)
	}
	if w.wantTurn {
		return proto.Errorf(proto.CodeOutOfOrder, proto.TypeAcquire, "an acquire is already pending; wait for its grant")
	}
	if w.expired {
		return expiredErr(proto.TypeAcquire)
	}
	w.wantTurn = true
	w.acquiredAt = s.clock.Now()
	w.acquireSeq = seq
	s.schedule()
	return nil
}

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
	d := r.Duration
	if d <= 0 {
		d = held
	}
	if d > held+ReportSlack(held) && !s.cfg.TrustReportedDurations {
		// The worker's own time lies inside the held turn (grant sent → release
		// received), so more than that is a bug or an attempt to inflate the shared
		// expected time and starve the workload's other workers (issue 17).
		s.clamped++
		w.st.clamped++
		if ok, dropped := s.clampLog.allow(now, time.Second); ok {
			s.log.Warn("release reported a duration longer than the turn was held; using the held time",
				"worker", w.id, "workload", w.name, "grant", t.grant.ID, "reported_ms", ms(d), "held_ms", ms(held),
				"clamped_total", s.clamped, "not_logged_since_last", dropped)
		}
		d = held
	}
	ms := float64(d) / float64(time.Millisecond)
	var unknown []string
	switch t.grant.Kind {
	case proto.KindTrain:
		// Warm-up (allocator, cuDNN autotuning, lazy init) is the estimate's: it follows
		// the latest minibatch until the times settle.
		w.train.add(ms)
		n := r.Samples
		if n <= 0 {
			n = w.spec.Batch
		}
		w.st.trained(now, n)
	case proto.KindInfer:
		e := w.infer[t.grant.Batch]
		if e == nil {
			e = &estimate{}
			w.infer[t.grant.Batch] = e
		}
		// Time per batch is measured on full and partial batches alike; keyed by the
		// number of requests actually served.
		e.add(ms)
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
	case proto.KindProfile:
		e := w.prof[t.grant.Batch]
		if e == nil {
			e = &estimate{}
			w.prof[t.grant.Batch] = e
		}
		e.add(ms)
		t.profile.done <- profileResult{d: d}
	}
	s.endTurn(now)
	s.schedule()
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return proto.Errorf(proto.CodeInvalid, proto.TypeRelease, "results for requests not in the grant were ignored: %v", clipList(unknown))
	}
	return nil
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
	s.turn = nil
}

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
			t.profile.done <- profileResult{err: fmt.Errorf("profile batch on %s: worker disconnected during the batch", id)}
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
			p.done <- profileResult{err: fmt.Errorf("profile on %s: worker disconnected", id)}
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

// BetweenTurns runs fn while no minibatch is on the GPU: it waits for the running turn to
// end, holds the turn itself while fn runs (new grants wait), then lets scheduling
// resume. The power-mode controller applies mode changes through it. It returns fn's
// error, or ctx's if ctx ends before fn starts.
func (s *Scheduler) BetweenTurns(ctx context.Context, fn func(context.Context) error) error {
	a := &action{ctx: ctx, fn: fn, done: make(chan error, 1)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("scheduler is closed")
	}
	s.actions = append(s.actions, a)
	s.schedule()
	s.unlockAndDeliver()
	select {
	case err := <-a.done:
		return err
	case <-ctx.Done():
		s.mu.Lock()
		n := len(s.actions)
		s.actions = slices.DeleteFunc(s.actions, func(x *action) bool { return x == a })
		removed := len(s.actions) < n
		s.mu.Unlock()
		if removed {
			return ctx.Err()
		}
		// Already started: its result is what happened.
		return <-a.done
	}
}

// Profile asks worker id to run a synthetic batch of the given size at its next turn and
// returns the worker-measured time. It blocks until the release (or ctx ends, in which
// case the request is withdrawn if it has not been granted yet).
func (s *Scheduler) Profile(ctx context.Context, id string, batch int) (time.Duration, error) {
	if batch < 1 || batch > proto.MaxBatch {
		return 0, fmt.Errorf("profile batch %d out of range 1..%d", batch, proto.MaxBatch)
	}
	p := &profileReq{worker: id, batch: batch, done: make(chan profileResult, 1)}
	s.mu.Lock()
	p.queued = s.clock.Now()
	if _, ok := s.workers[id]; !ok {
		s.mu.Unlock()
		return 0, fmt.Errorf("profile: worker %q is not registered (see the daemon's worker list)", id)
	}
	s.profiles = append(s.profiles, p)
	s.schedule()
	s.unlockAndDeliver()
	select {
	case r := <-p.done:
		return r.d, r.err
	case <-ctx.Done():
		s.mu.Lock()
		n := len(s.profiles)
		s.profiles = slices.DeleteFunc(s.profiles, func(x *profileReq) bool { return x == p })
		removed := len(s.profiles) < n
		s.mu.Unlock()
		if removed {
			return 0, ctx.Err()
		}
		r := <-p.done
		return r.d, r.err
	}
}

// Close stops scheduling: no new turns are granted, pending actions and profiles fail.
func (s *Scheduler) Close() {
	s.mu.Lock()
	defer s.unlockAndDeliver()
	s.closed = true
	for _, a := range s.actions {
		a.done <- errors.New("scheduler closed before the action ran")
	}
	s.actions = nil
	for _, p := range s.profiles {
		p.done <- profileResult{err: errors.New("scheduler closed before the profile batch ran")}
	}
	s.profiles = nil
	if s.wake != nil {
		s.wake.Stop()
	}
}

// expInfer is the expected service time of an inference batch of n requests on w.
func (s *Scheduler) expInfer(w *worker, n int) time.Duration {
	if n < 1 {
		n = 1
	}
	if e := w.infer[n]; e != nil && e.n > 0 {
		return durMS(e.guarded(s.cfg.DevK))
	}
	// Interpolate between the nearest measured sizes below and above; above the largest
	// measured size scale proportionally (an upper bound: fixed per-batch costs do not
	// grow); below the smallest take its time (also an upper bound).
	loN, hiN := 0, 0
	var lo, hi float64
	for k, e := range w.infer {
		if e.n == 0 {
			continue
		}
		v := e.guarded(s.cfg.DevK)
		if k < n && k > loN {
			loN, lo = k, v
		}
		if k > n && (hiN == 0 || k < hiN) {
			hiN, hi = k, v
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

func (s *Scheduler) expTrain(w *worker) time.Duration {
	if w.train.n > 0 {
		return durMS(w.train.guarded(s.cfg.DevK))
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

func (s *Scheduler) limit(expected time.Duration) time.Duration {
	l := time.Duration(float64(expected) * s.cfg.OverrunFactor)
	if l < s.cfg.OverrunMin {
		l = s.cfg.OverrunMin
	}
	return l
}

// schedule decides the next turn if the GPU is free. Called with s.mu held after every
// event. Order: an inference batch that is due (full, or its oldest request's slack is
// gone); a pending between-turns action; a profile batch; a training minibatch if every
// waiting request can still meet its deadline after it (otherwise the blocking inference
// batch is served early, so the GPU never idles while work waits). The wake timer is set
// for the next instant a partial batch falls due.
func (s *Scheduler) schedule() {
	if s.closed || s.turn != nil {
		s.setWake(time.Time{})
		return
	}
	now := s.clock.Now()

	// 1. Due inference batches, earliest deadline first.
	var due *worker
	for _, w := range s.order {
		if w.spec.Role != proto.RoleInfer || !w.wantTurn || len(w.queue) == 0 {
			continue
		}
		n := min(len(w.queue), w.spec.Batch)
		slack := w.queue[0].deadline.Sub(now) - s.cfg.Margin - s.expInfer(w, n)
		if n < w.spec.Batch && slack > 0 {
			continue
		}
		if due == nil || w.queue[0].deadline.Before(due.queue[0].deadline) {
			due = w
		}
	}
	if due != nil {
		s.grantInfer(due, now)
		return
	}

	// 2. Between-turns actions.
	if len(s.actions) > 0 {
		a := s.actions[0]
		s.actions = s.actions[1:]
		s.runAction(a, now)
		return
	}

	// 3. Profile batches and 4. training minibatches, both admitted only if inference
	// deadlines survive them.
	for i, p := range s.profiles {
		w := s.workers[p.worker]
		if w == nil || !w.wantTurn {
			continue
		}
		exp := s.expProfile(w, p.batch)
		if blocker := s.admit(now, exp); blocker != nil {
			if s.serveBlocker(blocker, now) {
				return
			}
			overdue := s.cfg.ProfileWait > 0 && now.Sub(p.queued) >= s.cfg.ProfileWait
			if !overdue || !s.inferenceIdle() {
				break // the wake below covers the moment it falls overdue
			}
			s.log.Info("granting an overdue profile batch with no request queued", "worker", w.id,
				"batch", p.batch, "waited_ms", ms(now.Sub(p.queued)), "expected_ms", ms(exp))
		}
		s.profiles = slices.Delete(s.profiles, i, i+1)
		s.grant(w, proto.KindProfile, p.batch, nil, exp, now, p)
		return
	}
	if w := s.nextTrainer(); w != nil && !s.trainPaused {
		exp := s.expTrain(w)
		blocker := s.admit(now, exp)
		starved := s.cfg.Starve > 0 && now.Sub(w.acquiredAt) >= w.train.starveAfter(s.cfg.Starve) && s.inferenceIdle()
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
			return
		}
		if s.serveBlocker(blocker, now) {
			return
		}
	}

	// Nothing to run now: wake when the earliest partial batch falls due.
	var next time.Time
	for _, w := range s.order {
		if w.spec.Role != proto.RoleInfer || !w.wantTurn || len(w.queue) == 0 {
			continue
		}
		n := min(len(w.queue), w.spec.Batch)
		at := w.queue[0].deadline.Add(-s.cfg.Margin - s.expInfer(w, n))
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	if s.cfg.ProfileWait > 0 {
		for _, p := range s.profiles {
			at := p.queued.Add(s.cfg.ProfileWait)
			if at.After(now) && (next.IsZero() || at.Before(next)) {
				next = at
			}
		}
	}
	if s.cfg.Starve > 0 {
		for _, w := range s.order {
			if w.spec.Role != proto.RoleTrain || !w.wantTurn {
				continue
			}
			at := w.acquiredAt.Add(w.train.starveAfter(s.cfg.Starve))
			if at.After(now) && (next.IsZero() || at.Before(next)) {
				next = at
			}
		}
	}
	s.setWake(next)
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

// nextTrainer is the training worker waiting for a turn that comes after the one granted
// last, in registration order (round-robin).
func (s *Scheduler) nextTrainer() *worker {
	var first, after *worker
	for _, w := range s.order {
		if w.spec.Role != proto.RoleTrain || !w.wantTurn {
			continue
		}
		if first == nil {
			first = w
		}
		if after == nil && w.reg > s.rrLast {
			after = w
		}
	}
	if after != nil {
		return after
	}
	return first
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
		n := min(w.spec.Batch, len(w.queue)+int(math.Ceil(rate*exp.Seconds())))
		if len(w.queue) > 0 {
			queued = append(queued, q{w: w, deadline: w.queue[0].deadline, service: s.expInfer(w, n)})
			continue
		}
		// Empty queue: a request arriving right after the turn starts must still be
		// served in time after it; if it could not, run anyway only when an arrival
		// during the turn is unlikely.
		if s.cfg.LatencyBudget >= exp+s.cfg.Margin+s.expInfer(w, max(n, 1)) {
			continue
		}
		if rate*exp.Seconds() < s.cfg.IdleAdmitArrivals {
			continue
		}
		return w
	}
	sort.Slice(queued, func(i, j int) bool { return queued[i].deadline.Before(queued[j].deadline) })
	end := now.Add(exp + s.cfg.Margin)
	for _, x := range queued {
		end = end.Add(x.service)
		if end.After(x.deadline) {
			return x.w
		}
	}
	return nil
}

func (s *Scheduler) grantInfer(w *worker, now time.Time) {
	n := min(len(w.queue), w.spec.Batch)
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

func (s *Scheduler) grant(w *worker, kind string, batch int, reqs []*request, exp time.Duration, now time.Time, p *profileReq) {
	s.nextGrant++
	ids := make([]string, len(reqs))
	for i, q := range reqs {
		ids[i] = q.id
	}
	lim := s.limit(exp)
	hold := max(time.Duration(float64(exp)*s.cfg.HoldFactor), s.cfg.HoldMin, lim)
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
	for _, q := range t.reqs {
		s.finish(w, q, now, false)
	}
	if t.profile != nil {
		t.profile.done <- profileResult{err: fmt.Errorf("profile batch on %s: the worker held the turn %v, past the hold limit %v", w.id, held.Round(time.Millisecond), t.hold)}
	}
	s.log.Warn("worker held the turn past the hold limit; turn taken back and the worker dropped", "worker", w.id,
		"workload", w.name, "kind", t.grant.Kind, "grant", t.grant.ID, "held_ms", ms(held), "hold_limit_ms", ms(t.hold),
		"expected_ms", ms(t.expected))
	s.endTurn(now)
	if f := s.cfg.OnHoldExpired; f != nil {
		id, gid, lim := w.id, t.grant.ID, t.hold
		s.out = append(s.out, pendingDelivery{fn: func() { f(id, gid, held, lim) }})
	}
	s.schedule()
}

func (s *Scheduler) runAction(a *action, now time.Time) {
	t := &turn{grant: Grant{Kind: "action"}, start: now, limit: s.cfg.OverrunMin, action: a}
	s.turn = t
	s.setWake(time.Time{})
	go func() {
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
		a.done <- err
		s.schedule()
		s.unlockAndDeliver()
	}()
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
