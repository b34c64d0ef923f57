package control

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/profiler/store/storetest"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// fakeBoard is an in-memory board: the mode written, and a power reading the test sets
// (or a function of the mode), or a read error.
type fakeBoard struct {
	spec *powermode.BoardSpec
	sp   *powermode.Space

	mu      sync.Mutex
	mode    powermode.Mode
	applied []powermode.Mode
	powerMW float64
	powerFn func(powermode.Mode) float64
	err     error
	// applyErr, when set, refuses every mode change (a board whose clock files refuse
	// writes).
	applyErr error
}

func (b *fakeBoard) Info() powermode.BoardInfo { return powermode.BoardInfo{Name: b.spec.Name} }

// Nvpmodel is the running nvpmodel mode, as daemon.Board reports it.
func (b *fakeBoard) Nvpmodel() string        { return "MODE_30W" }
func (b *fakeBoard) Space() *powermode.Space { return b.sp }
func (b *fakeBoard) Current(context.Context) (powermode.Mode, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mode, nil
}
func (b *fakeBoard) Apply(_ context.Context, m powermode.Mode) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.applyErr != nil {
		return b.applyErr
	}
	b.mode = m
	b.applied = append(b.applied, m)
	return nil
}
func (b *fakeBoard) Power(context.Context) (powermode.PowerReading, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return powermode.PowerReading{}, b.err
	}
	if b.powerFn != nil {
		return powermode.PowerReading{TotalMW: b.powerFn(b.mode)}, nil
	}
	return powermode.PowerReading{TotalMW: b.powerMW}, nil
}
func (b *fakeBoard) set(mw float64, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.powerMW, b.err = mw, err
}
func (b *fakeBoard) current() powermode.Mode {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mode
}

const (
	tTrain = "resnet18-train"
	tInfer = "resnet50-infer"
)

type env struct {
	t      *testing.T
	spec   *powermode.BoardSpec
	models map[string]*sim.Workload
	board  *fakeBoard
	clock  *sched.FakeClock
	sched  *sched.Scheduler
	store  *store.Store
	modes  []powermode.Mode
}

func newEnv(t *testing.T, clock sched.Clock) *env {
	t.Helper()
	spec := testboard.Spec(t, testboard.AGXOrin)
	models := testboard.Workloads(t)
	sp := testboard.Space(t, spec)
	st := storetest.Open(t)
	e := &env{t: t, spec: spec, models: models, board: &fakeBoard{spec: spec, sp: sp, mode: sp.Snap(spec.PresetMode(spec.NVP.Presets[0]))}, store: st}
	if fc, ok := clock.(*sched.FakeClock); ok {
		e.clock = fc
	}
	// The scripted workers report modeled times without spending them.
	e.sched = sched.New(sched.Config{TrustReportedDurations: true}, clock, nil)
	e.sched.SetLatencyBudget(400 * time.Millisecond) // the controller sets its own at New
	for _, g := range []int64{408e6, 612e6, 816e6, 918e6, 1020e6, 1224e6} {
		e.modes = append(e.modes, powermode.Mode{Cores: 12, CPUKHz: 2201600, GPUHz: g, EMCHz: 3199000000})
	}
	return e
}

// seed stores noise-free profiles (the simulator's models) of the env's modes.
func (e *env) seed() {
	e.t.Helper()
	now := time.Now().UTC()
	put := func(w *sim.Workload, role truth.Role, m powermode.Mode, b int) {
		ms, mw := w.TimeMS(e.spec, m, b), w.PowerMW(e.spec, m, b)
		if err := e.store.Put(store.Profile{Board: e.spec.Name, Workload: w.Name, Role: role, Mode: m, Batch: b,
			TimeMS: store.TimeStats{Mean: ms, P50: ms, P95: ms}, PowerMW: store.PowerStats{Mean: mw},
			Samples: 1, StartedAt: now, FinishedAt: now, Source: store.SourceSim}); err != nil {
			e.t.Fatal(err)
		}
	}
	for _, m := range e.modes {
		put(e.models[tTrain], truth.Train, m, 32)
		for _, b := range []int{1, 2, 4, 8} {
			put(e.models[tInfer], truth.Infer, m, b)
		}
	}
}

// seedMicro16 stores the trainer's 16-sample micro-batch turns at every env mode, each
// taking frac of its whole minibatch's time (small batches leave the GPU idle: frac > 0.5).
func (e *env) seedMicro16(frac float64) {
	e.t.Helper()
	now := time.Now().UTC()
	w := e.models[tTrain]
	for _, m := range e.modes {
		ms, mw := frac*w.TimeMS(e.spec, m, 32), w.PowerMW(e.spec, m, 16)
		if err := e.store.Put(store.Profile{Board: e.spec.Name, Workload: tTrain, Role: truth.Train, Mode: m, Batch: 32, MicroBatch: 16,
			TimeMS: store.TimeStats{Mean: ms, P50: ms, P95: ms}, PowerMW: store.PowerStats{Mean: mw},
			Samples: 1, StartedAt: now, FinishedAt: now, Source: store.SourceSim}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// register adds a training and an inference worker whose grants go to deliver (nil:
// dropped).
func (e *env) register(deliver sched.Deliver) (trainID, inferID string) {
	e.t.Helper()
	if deliver == nil {
		deliver = func(sched.Grant) {}
	}
	tr, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleTrain, Workload: tTrain, Batch: 32}, deliver)
	if err != nil {
		e.t.Fatal(err)
	}
	in, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleInfer, Workload: tInfer, Batch: 1, BatchSizes: []int{1, 2, 4, 8}}, deliver)
	if err != nil {
		e.t.Fatal(err)
	}
	return tr, in
}

// inferServer serves inference batches by hand on the env's fake clock: the registered
// workers' grants are recorded, and serve hands one full batch to the inference worker
// and releases it after a chosen latency.
type inferServer struct {
	e       *env
	inferID string
	mu      sync.Mutex
	grants  []sched.Grant
	n       int // requests sent
}

// serveInference registers the env's training and inference workers behind an
// inferServer.
func (e *env) serveInference() *inferServer {
	s := &inferServer{e: e}
	_, s.inferID = e.register(func(g sched.Grant) {
		s.mu.Lock()
		s.grants = append(s.grants, g)
		s.mu.Unlock()
	})
	return s
}

// serve sends batch requests, takes the inference grant and releases it lat later,
// advancing the fake clock in one step, or in 20 ms steps calling each (when not nil).
func (s *inferServer) serve(batch int, lat time.Duration, each func()) {
	t := s.e.t
	t.Helper()
	var reqs []proto.Request
	for range batch {
		s.n++
		reqs = append(reqs, proto.Request{ID: fmt.Sprint(s.n)})
	}
	if err := s.e.sched.Arrivals(s.inferID, reqs); err != nil {
		t.Fatal(err)
	}
	if err := s.e.sched.Acquire(s.inferID, uint64(s.n)); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	g := s.grants[len(s.grants)-1]
	s.mu.Unlock()
	if g.Kind != proto.KindInfer {
		t.Fatalf("grant %+v, want an inference batch", g)
	}
	if each == nil {
		s.e.clock.Advance(lat)
	} else {
		for range lat / (20 * time.Millisecond) {
			s.e.clock.Advance(20 * time.Millisecond)
			each()
		}
	}
	if err := s.e.sched.Release(s.inferID, sched.Release{Grant: g.ID}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) controller(cfg Config, b plan.Targets) *Controller {
	e.t.Helper()
	c, err := New(Options{Config: cfg, Sched: e.sched, Board: e.board, Store: e.store, Clock: e.clock, Targets: b})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// tick advances the fake clock by d in 50 ms steps, sampling power and stepping the
// controller at each.
func (e *env) tick(c *Controller, d time.Duration) {
	for end := e.clock.Now().Add(d); e.clock.Now().Before(end); {
		e.clock.Advance(50 * time.Millisecond)
		_ = c.SamplePower(context.Background())
		c.Step(context.Background())
	}
}

func kinds(evs []Event) []Kind {
	var out []Kind
	for _, e := range evs {
		out = append(out, e.Kind)
	}
	return out
}

func countKind(evs []Event, k Kind) int {
	n := 0
	for _, e := range evs {
		if e.Kind == k {
			n++
		}
	}
	return n
}

// At start the controller plans from the stored profiles alone (no profiling), applies
// the mode and sets the inference worker's batch size.
func TestPlanAtStartFromStore(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	c := e.controller(Config{}, plan.Targets{LatencyMS: 400, PowerMW: 35000, RateRPS: 20})
	e.board.set(20000, nil)
	e.tick(c, 200*time.Millisecond)
	if n := len(c.Events().List(0)); n != 0 {
		t.Fatalf("events before any worker registered: %v", kinds(c.Events().List(0)))
	}
	_, inferID := e.register(nil)
	e.tick(c, 100*time.Millisecond)
	evs := c.Events().List(0)
	if len(evs) < 2 || evs[0].Kind != KindPlan || evs[1].Kind != KindApply {
		t.Fatalf("events %v, want plan then apply", kinds(evs))
	}
	st := c.Status()
	if st.Current == nil || !st.Current.Predicted.Feasible || st.Current.Predicted.PowerMW > 35000 {
		t.Fatalf("plan %+v: want a feasible configuration within 35 W", st.Current)
	}
	if e.board.current() != st.Current.Mode {
		t.Fatalf("board at %s, plan %s", e.board.current(), st.Current.Mode)
	}
	for _, w := range e.sched.Snapshot().Workers {
		if w.ID == inferID && w.Batch != st.Current.Batch() {
			t.Fatalf("inference worker batch %d, plan %d", w.Batch, st.Current.Batch())
		}
	}
	if st.Live.Profiled != 0 || st.StoredProfiles != len(e.modes) {
		t.Fatalf("live profiles %d, stored %d: planning from %d stored modes must not profile", st.Live.Profiled, st.StoredProfiles, len(e.modes))
	}
	// Budgets that change re-plan from the store: a tighter power budget picks a
	// lower-power mode.
	if err := c.SetTargets(plan.Targets{LatencyMS: 400, PowerMW: 500}); err == nil || !strings.Contains(err.Error(), "power_mw") {
		t.Fatalf("invalid budgets accepted: %v", err)
	}
	before := st.Current.Predicted.PowerMW
	if err := c.SetTargets(plan.Targets{LatencyMS: 400, PowerMW: 25000, RateRPS: 20}); err != nil {
		t.Fatal(err)
	}
	e.tick(c, 100*time.Millisecond)
	evs = c.Events().List(evs[len(evs)-1].Seq)
	if countKind(evs, KindBudget) != 1 || countKind(evs, KindReplan) != 1 {
		t.Fatalf("after a budget change: %v, want budget and replan", kinds(evs))
	}
	if after := c.Status().Current.Predicted.PowerMW; after >= before || after > 25000 {
		t.Fatalf("predicted power %.0f mW after lowering the budget to 25 W (was %.0f)", after, before)
	}
}

// Power over budget steps down at once; the controller steps back up only after power
// stayed below budget·(1−hysteresis) for the hold time, and not while it hovers in the
// hysteresis band.
func TestPowerStepDownAndHysteresis(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	cfg := Config{Hold: 2 * time.Second, Cooldown: 500 * time.Millisecond}
	c := e.controller(cfg, plan.Targets{LatencyMS: 400, PowerMW: 35000, RateRPS: 20})
	e.register(nil)
	e.board.set(20000, nil)
	e.tick(c, 100*time.Millisecond)
	planned := c.Status().Current
	if planned == nil {
		t.Fatal("no plan")
	}
	// The board draws 60% more than the training profile says: over the budget.
	draw := func(m powermode.Mode) float64 { return e.models[tTrain].PowerMW(e.spec, m, 32) * 1.6 }
	e.board.mu.Lock()
	e.board.powerFn = draw
	e.board.mu.Unlock()
	seq := c.Status().LastEvent
	e.tick(c, 1500*time.Millisecond)
	evs := c.Events().List(seq)
	if countKind(evs, KindStepDown) != 1 {
		t.Fatalf("events %v, want exactly one step_down", kinds(evs))
	}
	down := c.Status().Current
	if !c.Status().Stepped || down.Predicted.PowerMW >= planned.Predicted.PowerMW || draw(down.Mode) > 35000 {
		t.Fatalf("stepped from %+v to %+v drawing %.0f mW: want a lower-power mode within the budget", planned, down, draw(down.Mode))
	}
	// In the hysteresis band (below budget, above budget·0.9): no step up, ever.
	e.board.mu.Lock()
	e.board.powerFn = nil
	e.board.mu.Unlock()
	e.board.set(35000*0.95, nil)
	seq = c.Status().LastEvent
	e.tick(c, 5*time.Second)
	if evs := c.Events().List(seq); len(evs) != 0 {
		t.Fatalf("in the hysteresis band: %v, want no decision", kinds(evs))
	}
	// Well below: step up only after the hold time.
	e.board.set(15000, nil)
	e.tick(c, cfg.Hold-300*time.Millisecond)
	if evs := c.Events().List(seq); len(evs) != 0 {
		t.Fatalf("before the hold time: %v", kinds(evs))
	}
	e.tick(c, time.Second)
	evs = c.Events().List(seq)
	if countKind(evs, KindStepUp) != 1 {
		t.Fatalf("after the hold time: %v, want one step_up", kinds(evs))
	}
	up := c.Status().Current
	if up.Predicted.ThroughputSPS <= down.Predicted.ThroughputSPS {
		t.Fatalf("step up to %+v is not above the step-down configuration %+v", up, down)
	}
	// The mode that broke the budget keeps its learned correction: the step up does
	// not return to it.
	if up.Mode == planned.Mode {
		t.Fatalf("stepped back up to the mode that broke the budget (%s)", up.Mode.Human())
	}
}

// After a power step-down the controller steps back up once power stays below its
// band, whatever the p99 does within its budget: the scheduler fills the latency budget
// with training by design, so a p99 within 10 % of it is a plan that trains, not a
// reason to stay down (the latency band holds a step up only after a latency step-down).
func TestPowerStepUpWithTheP99InItsBand(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	cfg := Config{Hold: 2 * time.Second, Cooldown: 500 * time.Millisecond, MinLatency: 5}
	c := e.controller(cfg, plan.Targets{LatencyMS: 400, PowerMW: 35000, RateRPS: 20})
	srv := e.serveInference()
	e.board.set(20000, nil)
	e.tick(c, 100*time.Millisecond)
	if c.Status().Current == nil {
		t.Fatal("no plan")
	}
	e.board.mu.Lock()
	e.board.powerFn = func(m powermode.Mode) float64 { return e.models[tTrain].PowerMW(e.spec, m, 32) * 1.6 }
	e.board.mu.Unlock()
	e.tick(c, 1500*time.Millisecond)
	if !c.Status().Stepped {
		t.Fatal("no power step-down")
	}
	e.board.mu.Lock()
	e.board.powerFn = nil
	e.board.mu.Unlock()
	e.board.set(15000, nil) // well below 35 W × 0.9
	// Requests served in 380 ms: within the 400 ms budget, in its 10 % band.
	seq := c.Status().LastEvent
	for range 12 {
		srv.serve(c.Status().Current.Batch(), 380*time.Millisecond, func() { _ = c.SamplePower(context.Background()) })
		c.Step(context.Background())
	}
	n := srv.n
	evs := c.Events().List(seq)
	st := c.Status()
	t.Logf("p99 %.1f ms over %d requests, power %.1f W; events %v", st.Measured.LatencyP99MS, n, st.Measured.PowerMW/1000, kinds(evs))
	if st.Measured.LatencyP99MS < 360 || st.Measured.LatencyP99MS > 400 {
		t.Fatalf("measured p99 %.1f ms: the test wants it in the band [360, 400] ms", st.Measured.LatencyP99MS)
	}
	if countKind(evs, KindStepUp) != 1 || countKind(evs, KindStepDown) != 0 {
		t.Fatalf("events %v: want one step_up — power stayed below its band and the p99 within its budget for the hold", kinds(evs))
	}
}

// After a configuration change the latency rule waits for a window of the new
// configuration's requests: the recent window, plus about the longest latency in it at
// the change (requests queued before the change are served after it), at most another
// window. Before, a search's backlog served after the plan was judged as the plan's.
func TestLatencyJudgedAfterTheBacklogDrains(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	c := e.controller(Config{MinLatency: 5}, plan.Targets{LatencyMS: 400, RateRPS: 100})
	srv := e.serveInference()
	e.board.set(20000, nil)
	e.tick(c, 100*time.Millisecond)
	rw := e.sched.Config().RecentWindow
	serve := func(n int, lat time.Duration) {
		for range n {
			srv.serve(c.Status().Current.Batch(), lat, nil)
		}
	}
	c.mu.Lock()
	c.configChanged(e.clock.Now())
	quiet := c.latencySettled(e.clock.Now().Add(rw))
	c.mu.Unlock()
	if !quiet {
		t.Fatalf("no request served before the change: want the latency judged after the recent window (%s) alone", rw)
	}
	serve(3, 1200*time.Millisecond) // a backlog: requests served 1.2 s after they arrived
	at := e.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.configChanged(at)
	for _, x := range []struct {
		after time.Duration
		want  bool
	}{{rw, false}, {rw + time.Second, false}, {rw + 1200*time.Millisecond, true}} {
		if got := c.latencySettled(at.Add(x.after)); got != x.want {
			t.Errorf("%s after the change with 1.2 s latencies in the window: settled %v, want %v", x.after, got, x.want)
		}
	}
}

// TestSameConfigurationAfterTheProfilerMovedTheBoard: a probe or a re-search leaves the
// board where the live profiler last measured and applies the configuration in force
// again (forceApply): the latency window then holds the profile batches' requests, so
// the latency rule waits as after any change. Before, the same configuration did not
// count as a change and the window was judged at once (Orin NX lifetime sweep: a
// step-down 0.2 s after a probe).
func TestSameConfigurationAfterTheProfilerMovedTheBoard(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	c := e.controller(Config{MinLatency: 5}, plan.Targets{LatencyMS: 400, RateRPS: 100})
	e.serveInference()
	e.board.set(20000, nil)
	e.tick(c, 100*time.Millisecond)
	e.clock.Advance(30 * time.Second)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		t.Fatal("no plan")
	}
	c.apply(context.Background(), *c.cur)
	if !c.cfgSince.Before(e.clock.Now()) {
		t.Fatal("setup: re-applying the configuration in force counted as a change")
	}
	c.forceApply = true
	c.apply(context.Background(), *c.cur)
	if !c.cfgSince.Equal(e.clock.Now()) {
		t.Errorf("the configuration applied again after the board moved: latency judged since %s, want now (%s)", c.cfgSince, e.clock.Now())
	}
}

// Unreadable power: degraded, lowest-power known mode; readable again: re-plan.
func TestDegradedWhenPowerUnreadable(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	c := e.controller(Config{PowerFail: time.Second}, plan.Targets{LatencyMS: 400, PowerMW: 35000, RateRPS: 20})
	e.register(nil)
	e.board.set(20000, nil)
	e.tick(c, 100*time.Millisecond)
	seq := c.Status().LastEvent
	e.board.set(0, errors.New("ina3221: read failed"))
	e.tick(c, 500*time.Millisecond)
	if evs := c.Events().List(seq); len(evs) != 0 {
		t.Fatalf("degraded too early: %v", kinds(evs))
	}
	e.tick(c, time.Second)
	evs := c.Events().List(seq)
	if countKind(evs, KindDegraded) != 1 || c.Status().Degraded == "" {
		t.Fatalf("events %v, status degraded %q", kinds(evs), c.Status().Degraded)
	}
	lowest := e.modes[0] // the lowest GPU clock of the seeded modes draws least
	if e.board.current() != lowest {
		t.Fatalf("degraded mode %s, want the lowest-power known mode %s", e.board.current().Human(), lowest.Human())
	}
	seq = c.Status().LastEvent
	e.board.set(15000, nil)
	e.tick(c, 200*time.Millisecond)
	evs = c.Events().List(seq)
	if countKind(evs, KindDegraded) != 1 || countKind(evs, KindReplan) != 1 || c.Status().Degraded != "" {
		t.Fatalf("after recovery: %v (degraded %q), want degraded (recovered) and replan", kinds(evs), c.Status().Degraded)
	}
}

// arrivals returns a function that sends requests to the inference worker at rate
// req/s for d, stepping the controller every 50 ms.
func (e *env) arrivals(c *Controller, inferID string) func(rate float64, d time.Duration) {
	n := 0
	return func(rate float64, d time.Duration) {
		e.t.Helper()
		for end := e.clock.Now().Add(d); e.clock.Now().Before(end); {
			k := int(rate * 0.05)
			var reqs []proto.Request
			for range k {
				n++
				reqs = append(reqs, proto.Request{ID: "r" + string(rune('a'+n%26)) + time.Duration(n).String()})
			}
			if err := e.sched.Arrivals(inferID, reqs); err != nil {
				e.t.Fatal(err)
			}
			e.tick(c, 50*time.Millisecond)
		}
	}
}

// A measured arrival rate that drifts past the threshold for the hold time re-plans
// from stored profiles; a shorter excursion does not. (The meter's time constant is the
// default 2 s: with 0.5 s a Poisson stream at 20 req/s reads ±22 % from noise alone, and
// a doubling is within 3 σ of it, rateDrifted.)
func TestRateDriftReplans(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	cfg := Config{RateTau: 2 * time.Second, RateWarmup: 2 * time.Second, DriftHold: 2 * time.Second}
	c := e.controller(cfg, plan.Targets{LatencyMS: 400, PowerMW: 35000})
	_, inferID := e.register(nil)
	e.board.set(20000, nil)
	arrive := e.arrivals(c, inferID)
	arrive(20, 3*time.Second)
	evs := c.Events().List(0)
	if countKind(evs, KindPlan) != 1 {
		t.Fatalf("no plan at 20/s: %v", kinds(evs))
	}
	seq := evs[len(evs)-1].Seq
	if r := c.Status().PlanRateRPS; r < 15 || r > 25 {
		t.Fatalf("planned for %.1f/s, arrivals at 20/s", r)
	}
	arrive(40, 500*time.Millisecond) // much shorter than the hold
	arrive(20, 2*time.Second)
	if evs := c.Events().List(seq); countKind(evs, KindReplan) != 0 {
		t.Fatalf("a 1 s excursion re-planned: %v", kinds(evs))
	}
	arrive(40, 6*time.Second)
	evs = c.Events().List(seq)
	if countKind(evs, KindReplan) != 1 || !strings.Contains(evs[0].Reason, "arrival rate drifted") {
		t.Fatalf("after 6 s at twice the rate: %v", evs)
	}
	if r := c.Status().PlanRateRPS; r < 30 {
		t.Fatalf("re-planned for %.1f/s, arrivals at 40/s", r)
	}
}

// With rate_level_tau_ms set, a re-plan for another reason (here a budget change) is
// made for the stream's level, not the 2 s EWMA's reading of the moment: after a minute
// at 40/s and a 1.5 s burst at 60/s (the EWMA reads ~49/s, short of the drift rule), it
// plans for ~40/s. Off (the default) it plans for the EWMA's reading, as before.
func TestReplanIsForTheLevelNotTheMoment(t *testing.T) {
	for _, level := range []time.Duration{30 * time.Second, 0} {
		planRate := replanAfterABurst(t, level)
		if level > 0 && (planRate < 39 || planRate > 42) {
			t.Fatalf("level %s: re-planned for %.1f/s; the stream's level is 40/s", level, planRate)
		}
		if level == 0 && planRate < 46 {
			t.Fatalf("level off: re-planned for %.1f/s, not the EWMA's reading", planRate)
		}
	}
}

// replanAfterABurst is TestReplanIsForTheLevelNotTheMoment's run: the rate a budget
// change re-plans for after a minute at 40/s and 1.5 s at 60/s.
func replanAfterABurst(t *testing.T, level time.Duration) float64 {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	cfg := Config{RateTau: 2 * time.Second, RateWarmup: 2 * time.Second, DriftHold: 2 * time.Second, RateLevelTau: level}
	c := e.controller(cfg, plan.Targets{LatencyMS: 400, PowerMW: 35000})
	_, inferID := e.register(nil)
	e.board.set(20000, nil)
	arrive := e.arrivals(c, inferID)
	arrive(40, time.Minute)
	arrive(60, 1500*time.Millisecond)
	if r := c.Status().Measured.RateRPS; r < 46 {
		t.Fatalf("the EWMA reads %.1f/s after the burst: the test's premise does not hold", r)
	}
	seq := c.Events().List(0)[len(c.Events().List(0))-1].Seq
	if err := c.SetTargets(plan.Targets{LatencyMS: 350, PowerMW: 35000}); err != nil {
		t.Fatal(err)
	}
	arrive(40, 500*time.Millisecond)
	if evs := c.Events().List(seq); countKind(evs, KindReplan)+countKind(evs, KindPlan) == 0 {
		t.Fatalf("no re-plan after the budget change: %v", kinds(evs))
	}
	return c.Status().PlanRateRPS
}

// A rate the operator set on the pair's own stream is a budget, not a measurement: the
// drift rule leaves it alone, as it does a shared rate budget and several streams' own
// ones. (The pair's meter had no "fixed" flag: twice the set rate re-planned it, for the
// same set rate, every drift hold.)
func TestPairStreamOwnRateIsNotDrift(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	cfg := Config{RateTau: 2 * time.Second, RateWarmup: 2 * time.Second, DriftHold: 2 * time.Second}
	c := e.controller(cfg, plan.Targets{LatencyMS: 400, PowerMW: 35000, Streams: map[string]plan.StreamTarget{tInfer: {RateRPS: 20}}})
	_, inferID := e.register(nil)
	e.board.set(20000, nil)
	arrive := e.arrivals(c, inferID)
	arrive(20, 3*time.Second)
	evs := c.Events().List(0)
	if countKind(evs, KindPlan) != 1 {
		t.Fatalf("no plan at the set 20/s: %v", kinds(evs))
	}
	seq := evs[len(evs)-1].Seq
	arrive(40, 8*time.Second)
	if evs := c.Events().List(seq); countKind(evs, KindReplan) != 0 {
		t.Fatalf("arrivals at twice the stream's own rate budget re-planned: %v", evs)
	}
	if r := c.Status().PlanRateRPS; r != 20 {
		t.Fatalf("planned for %.1f/s, the stream's own rate budget is 20/s", r)
	}
}

func TestEventLogBoundAndSlowSubscriber(t *testing.T) {
	l := NewEventLog(3, time.Now)
	ch, cancel := l.Subscribe(2)
	for i := range 5 {
		l.Add(Event{Kind: KindPlan, Reason: string(rune('a' + i))})
	}
	evs := l.List(0)
	if len(evs) != 3 || evs[0].Seq != 3 || evs[2].Seq != 5 {
		t.Fatalf("ring kept %+v, want seq 3..5", evs)
	}
	if got := l.List(4); len(got) != 1 || got[0].Seq != 5 {
		t.Fatalf("List(4) = %+v", got)
	}
	if l.Dropped() != 3 {
		t.Fatalf("dropped %d, want 3 (buffer 2 of 5)", l.Dropped())
	}
	if e := <-ch; e.Seq != 1 {
		t.Fatalf("subscriber got %d first", e.Seq)
	}
	cancel()
	cancel() // idempotent
	for range ch {
	}
}

// scriptedWorkers answer grants like synthetic workers: a batch takes the simulator
// model's time at the board's current mode (reported, not slept, except 1 ms so the
// training loop does not spin), and each grant samples power first, as the
// controller's sampler would meanwhile.
type scriptedWorkers struct {
	e      *env
	power  *PowerMonitor
	mu     sync.Mutex
	seq    uint64
	grants map[string]int // kind -> count
}

func (w *scriptedWorkers) deliver(g sched.Grant) {
	w.mu.Lock()
	w.grants[g.Kind]++
	w.seq++
	seq := w.seq
	w.mu.Unlock()
	go func() {
		m := w.e.board.current()
		wl := w.e.models[tInfer]
		if strings.HasPrefix(g.Worker, proto.RoleTrain) {
			wl = w.e.models[tTrain]
		}
		for _, x := range w.e.sched.Snapshot().Workers {
			if x.ID == g.Worker && w.e.models[x.Workload] != nil {
				wl = w.e.models[x.Workload]
			}
		}
		_ = w.power.Sample(context.Background(), w.e.board, time.Now())
		time.Sleep(time.Millisecond)
		d := time.Duration(wl.TimeMS(w.e.spec, m, g.Batch) * float64(time.Millisecond))
		if err := w.e.sched.Release(g.Worker, sched.Release{Grant: g.ID, Duration: d}); err != nil {
			return
		}
		_ = w.e.sched.Acquire(g.Worker, seq)
	}()
}

func (w *scriptedWorkers) count(kind string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.grants[kind]
}

// The live profiler measures a mode through profile grants, stores every point (source
// live), answers a stored mode from the store without a grant, and abandons a mode whose
// power breaks the budget (recorded, persisted, never stored as a profile).
func TestLiveProfiler(t *testing.T) {
	e := newEnv(t, sched.RealClock{})
	defer e.sched.Close()
	pm := NewPowerMonitor(10 * time.Second)
	sw := &scriptedWorkers{e: e, power: pm, grants: map[string]int{}}
	trainID, inferID := e.register(sw.deliver)
	for _, id := range []string{trainID, inferID} {
		if err := e.sched.Acquire(id, 0); err != nil {
			t.Fatal(err)
		}
	}
	e.board.mu.Lock()
	e.board.powerFn = func(m powermode.Mode) float64 { return e.models[tTrain].PowerMW(e.spec, m, 32) }
	e.board.mu.Unlock()
	pair := Pair{Train: tTrain, TrainBatch: 32, Infer: tInfer, Batches: []int{1, 2, 4, 8}}
	newLP := func(budgetMW float64) *LiveProfiler {
		return &LiveProfiler{Sched: e.sched, Board: e.board, Store: e.store, Power: pm, Pair: pair, BudgetMW: budgetMW,
			Options: LiveOptions{Samples: 3, MinTime: time.Millisecond, PowerSettle: time.Millisecond}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lp := newLP(40000)
	m := e.modes[2]
	mp, err := lp.Profile(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if e.board.current() != m || len(mp.Infer) != 4 || mp.Train.Batch != 32 {
		t.Fatalf("profile %+v, board at %s", mp, e.board.current())
	}
	want := e.models[tTrain].TimeMS(e.spec, m, 32)
	if d := mp.Train.TimeMS/want - 1; d > 0.01 || d < -0.01 {
		t.Fatalf("training time %.2f ms, the workers reported %.2f ms", mp.Train.TimeMS, want)
	}
	stored, err := e.store.List(store.Filter{Board: e.spec.Name})
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 5 {
		t.Fatalf("%d profiles stored, want 5 (training + 4 inference sizes)", len(stored))
	}
	for _, p := range stored {
		if p.Source != store.SourceLive || p.Mode != m || p.Samples < 3 || p.PowerMW.Mean <= 0 {
			t.Fatalf("stored %+v", p)
		}
	}
	if c := lp.Counts(); c.Profiled != 1 || c.Points != 5 || c.FromStore != 0 {
		t.Fatalf("counts %+v", c)
	}
	grants := sw.count(proto.KindProfile)
	if grants < 5*(1+3) {
		t.Fatalf("%d profile grants for 5 points of 1 warm-up and 3 samples", grants)
	}
	// Stored: answered without a grant.
	if _, err := lp.Profile(ctx, m); err != nil {
		t.Fatal(err)
	}
	if c := lp.Counts(); c.FromStore != 1 || sw.count(proto.KindProfile) != grants {
		t.Fatalf("a stored mode was profiled again: counts %+v, grants %d → %d", c, grants, sw.count(proto.KindProfile))
	}
	// Repeats: measured again through grants, returned alone, and the store holds the
	// pooled repeats in place of the first measurement.
	first := stored
	for r := 1; r <= 2; r++ {
		before := sw.count(proto.KindProfile)
		again, err := lp.Remeasure(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if sw.count(proto.KindProfile) < before+5*(1+3) {
			t.Fatalf("repeat %d took %d profile grants for 5 points", r, sw.count(proto.KindProfile)-before)
		}
		if d := again.Train.TimeMS/want - 1; d > 0.01 || d < -0.01 || len(again.Infer) != 4 {
			t.Fatalf("repeat %d: %+v", r, again)
		}
		now, err := e.store.List(store.Filter{Board: e.spec.Name})
		if err != nil {
			t.Fatal(err)
		}
		if len(now) != 5 {
			t.Fatalf("%d profiles stored after a repeat, want the same 5", len(now))
		}
		for i, p := range now {
			// The first measurement is gone (the pool starts after it ended); the
			// repeats' batches are all counted.
			if p.Key() != first[i].Key() || !p.StartedAt.After(first[i].FinishedAt) || p.Samples < 3*r ||
				p.Source != store.SourceLive || p.PowerMW.Mean <= 0 {
				t.Fatalf("repeat %d: stored %+v, want the %d repeat(s) pooled without the first measurement %+v", r, p, r, first[i])
			}
		}
	}
	if c := lp.Counts(); c.Remeasured != 2 || c.Profiled != 1 {
		t.Fatalf("counts after two repeats %+v", c)
	}

	// Over the power budget: abandoned.
	lp = newLP(15000)
	hot := e.modes[5]
	mp, err = lp.Profile(ctx, hot)
	if err != nil {
		t.Fatal(err)
	}
	if c := lp.Counts(); c.Abandoned != 1 || c.Profiled != 0 || mp.Train.PowerMW <= 15000 {
		t.Fatalf("counts %+v, answered %+v: want the mode abandoned with its over-budget power", c, mp.Train)
	}
	if ps, _ := e.store.List(store.Filter{Board: e.spec.Name, Role: truth.Train}); len(ps) != 1 {
		t.Fatalf("%d training profiles stored; the abandoned mode must not be stored", len(ps))
	}
	// A fresh profiler (a restarted fulcrumd) knows the record and never profiles it.
	grants = sw.count(proto.KindProfile)
	lp = newLP(15000)
	if _, err := lp.Profile(ctx, hot); err != nil || sw.count(proto.KindProfile) != grants {
		t.Fatalf("abandoned mode profiled again: %v, grants %d → %d", err, grants, sw.count(proto.KindProfile))
	}
	known := lp.Known()
	if len(known) != 2 {
		t.Fatalf("Known has %d modes, want the stored one and the abandoned one", len(known))
	}
	if len(lp.OverBudgetModes()) != 1 {
		t.Fatalf("over-budget records %+v", lp.OverBudgetModes())
	}
}

// newLiveEnv is an env on the real clock with a controller and scripted training and
// inference workers waiting for turns, the board drawing the training model's power:
// what a live search needs. The caller closes e.sched.
func newLiveEnv(t *testing.T, cfg Config, b plan.Targets) (*env, *Controller) {
	t.Helper()
	e := newEnv(t, sched.RealClock{})
	c, err := New(Options{Config: cfg, Sched: e.sched, Board: e.board, Store: e.store, Targets: b})
	if err != nil {
		t.Fatal(err)
	}
	sw := &scriptedWorkers{e: e, power: c.power, grants: map[string]int{}}
	trainID, inferID := e.register(sw.deliver)
	for _, id := range []string{trainID, inferID} {
		if err := e.sched.Acquire(id, 0); err != nil {
			t.Fatal(err)
		}
	}
	e.board.mu.Lock()
	e.board.powerFn = func(m powermode.Mode) float64 { return e.models[tTrain].PowerMW(e.spec, m, 32) }
	e.board.mu.Unlock()
	return e, c
}

// With too few stored profiles, the first plan runs GMD live through the profile
// grants (within its profile budget), then plans from what it stored.
func TestSearchWhenTooFewProfiles(t *testing.T) {
	e, c := newLiveEnv(t, Config{MaxProfiles: 4, Live: LiveOptions{Samples: 2, MinTime: time.Millisecond}},
		plan.Targets{LatencyMS: 400, PowerMW: 30000, RateRPS: 20})
	defer e.sched.Close()
	c.Step(context.Background())
	if !c.Status().Searching {
		t.Fatalf("no search started with an empty store: %v", kinds(c.Events().List(0)))
	}
	if _, err := c.Optimize(context.Background(), "gmd", 0); !errors.Is(err, ErrBusy) {
		t.Fatalf("optimize during a search: %v, want ErrBusy", err)
	}
	for deadline := time.Now().Add(30 * time.Second); c.Status().Searching; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("search did not finish in 30 s")
		}
	}
	st := c.Status()
	evs := c.Events().List(0)
	if st.Current == nil || st.Live.Profiled+st.Live.Abandoned == 0 || st.Live.Profiled+st.Live.Abandoned > 4 || countKind(evs, KindPlan) != 1 {
		t.Fatalf("after the search: status %+v, events %v", st, kinds(evs))
	}
	if st.StoredProfiles != st.Live.Profiled {
		t.Fatalf("%d complete profiles stored, %d modes profiled", st.StoredProfiles, st.Live.Profiled)
	}
	if e.board.current() != st.Current.Mode || st.Current.Predicted.PowerMW > 30000 {
		t.Fatalf("board at %s, plan %+v", e.board.current(), st.Current)
	}
}

// Latency over budget steps down to a smaller batch or a shorter training minibatch,
// and the configuration that broke the budget is not planned again.
func TestLatencyStepDown(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	c := e.controller(Config{MinLatency: 10}, plan.Targets{LatencyMS: 400, RateRPS: 100})
	srv := e.serveInference()
	e.board.set(20000, nil)
	e.tick(c, 100*time.Millisecond)
	planned := c.Status().Current
	if planned == nil || planned.Batch() < 2 {
		t.Fatalf("plan %+v: want a batch above 1 at 100 requests/s", planned)
	}
	seq := c.Status().LastEvent
	// Serve 15 full batches, each taking 600 ms: every request misses the budget.
	for range 15 {
		srv.serve(planned.Batch(), 600*time.Millisecond, nil)
	}
	c.Step(context.Background())
	evs := c.Events().List(seq)
	if countKind(evs, KindStepDown) != 1 || !strings.Contains(evs[0].Reason, "p99 latency") {
		t.Fatalf("events %v", evs)
	}
	down := c.Status().Current
	if down.Mode == planned.Mode && down.Batch() >= planned.Batch() {
		t.Fatalf("stepped from %+v to %+v: want a smaller batch or another mode", planned, down)
	}
	// A budget change forgets the broken configurations and re-plans.
	if err := c.SetTargets(plan.Targets{LatencyMS: 400, RateRPS: 100}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(50 * time.Millisecond)
	c.Step(context.Background())
	if got := c.Status().Current; got.Mode != planned.Mode || got.Batch() != planned.Batch() {
		t.Fatalf("re-plan after a budget change chose %+v, want the original %+v", got, planned)
	}
}

// An operator's mode is applied with the best stored batch there and held: a rate
// drift does not re-plan it away; the API adapter maps errors to API codes.
func TestApplyModeHeldAndAPIErrors(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	c := e.controller(Config{}, plan.Targets{LatencyMS: 400, PowerMW: 35000, RateRPS: 20})
	e.register(nil)
	e.board.set(20000, nil)
	e.tick(c, 100*time.Millisecond)
	a := NewAPI(c, e.clock.Now())
	ctx := context.Background()
	if _, err := a.ApplyMode(ctx, powermode.Mode{Cores: 3, CPUKHz: 1, GPUHz: 1, EMCHz: 1}, api.Caller{}); err == nil || api.AsError(err).Code != api.CodeBadMode {
		t.Fatalf("bad mode: %v", err)
	}
	// One bad clock: the answer names the knob and its nearest levels, as board apply does.
	bad := e.modes[0]
	bad.GPUHz = 600000000
	if _, err := a.ApplyMode(ctx, bad, api.Caller{}); err == nil || !strings.Contains(err.Error(), "gpu_hz 600000000 is not a level of this board (nearest: 510000000 or 612000000)") {
		t.Fatalf("bad gpu clock: %v", err)
	}
	m := e.modes[1]
	mi, err := a.ApplyMode(ctx, m, api.Caller{UID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if mi.Current != m || !mi.Held || e.board.current() != m || mi.Nvpmodel != "MODE_30W" {
		t.Fatalf("mode info %+v, board %s", mi, e.board.current())
	}
	e.tick(c, 10*time.Second)
	if e.board.current() != m || !c.Held() {
		t.Fatalf("held mode replaced by %s", e.board.current())
	}
	if _, err := a.Optimize(ctx, api.OptimizeRequest{Method: "annealing"}, api.Caller{}); api.AsError(err).Code != api.CodeBadMethod {
		t.Fatalf("bad method: %v", err)
	}
	lat := 300.0
	b, err := a.SetBudgets(ctx, api.BudgetsUpdate{LatencyMS: &lat}, api.Caller{UID: 1000})
	if err != nil || b.LatencyMS != 300 || b.PowerMW != 35000 || b.RateAuto {
		t.Fatalf("budgets %+v, %v", b, err)
	}
	if c.Held() {
		t.Fatal("a budget change must release the held mode")
	}
	evs, _ := a.Events(ctx, 0)
	last := evs[len(evs)-1]
	if last.Kind != string(KindBudget) || last.Caller == nil || last.Caller.UID != 1000 {
		t.Fatalf("last event %+v", last)
	}
}

// An inference worker that registers after the plan (a restart) gets the planned batch.
func TestNewWorkerGetsPlannedBatch(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	c := e.controller(Config{}, plan.Targets{LatencyMS: 400, RateRPS: 100})
	e.register(nil)
	e.board.set(20000, nil)
	e.tick(c, 100*time.Millisecond)
	planned := c.Status().Current
	if planned == nil || planned.Batch() < 2 {
		t.Fatalf("plan %+v: want a batch above 1 at 100 requests/s", planned)
	}
	id, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleInfer, Workload: tInfer, Batch: 1, BatchSizes: []int{1, 2, 4, 8}}, func(sched.Grant) {})
	if err != nil {
		t.Fatal(err)
	}
	e.tick(c, 100*time.Millisecond)
	for _, w := range e.sched.Snapshot().Workers {
		if w.ID == id && w.Batch != planned.Batch() {
			t.Fatalf("new worker serves batch %d, plan %d", w.Batch, planned.Batch())
		}
	}
}

// Plans leave the room the scheduler's admission test needs (expected times raised by
// DevK deviations, plus its margin): with a latency budget that model v1 alone would
// just accept for the fastest stored mode, the plan is not claimed feasible there; with
// a little more, it is, and the scheduler then expects the stored times of the applied
// mode rather than what it measured before.
func TestPlanLeavesRoomForAdmission(t *testing.T) {
	for _, tc := range []struct {
		name     string
		extraMS  float64
		feasible bool
	}{{"model v1 alone", 1, false}, {"with the scheduler's room", 25, true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, sched.NewFakeClock())
			e.sched = sched.New(sched.Config{DevK: 2, Margin: 5 * time.Millisecond}, e.clock, nil)
			e.sched.SetLatencyBudget(400 * time.Millisecond) // the controller sets its own at New
			e.seed()
			fast := e.modes[len(e.modes)-1]
			tT := e.models[tTrain].TimeMS(e.spec, fast, 32)
			tI := e.models[tInfer].TimeMS(e.spec, fast, 1)
			// Model v1 at batch 1 and a low rate: latency = tT + tI (no fill), planned
			// against L·(1 − 5%).
			l := (tT+tI)/0.95 + tc.extraMS
			c := e.controller(Config{InferBatches: []int{1}}, plan.Targets{LatencyMS: l, PowerMW: 60000, RateRPS: 1})
			e.board.set(20000, nil)
			trainID, _ := e.register(nil)
			e.tick(c, 100*time.Millisecond)
			st := c.Status()
			if st.Current == nil {
				t.Fatalf("no configuration applied; events %v", kinds(c.Events().List(0)))
			}
			if got := st.Current.Predicted.Feasible; got != tc.feasible || e.sched.Snapshot().TrainingPaused == tc.feasible {
				t.Fatalf("L = %.1f ms (training %.1f + inference %.1f ms): plan %+v (training paused %v), want feasible %v", l, tT, tI, st.Current, e.sched.Snapshot().TrainingPaused, tc.feasible)
			}
			if !tc.feasible {
				return
			}
			if st.Current.Mode != fast {
				t.Errorf("applied %s, want the fastest mode %s", st.Current.Mode, fast)
			}
			wl, _ := e.sched.Snapshot().Workload(proto.RoleTrain, tTrain)
			if want := tT * (1 + 2*sched.ExpectedDevRel); math.Abs(wl.ExpectedTrainMS-want) > 0.01 {
				t.Errorf("scheduler expects %.2f ms per training minibatch (worker %s), want the stored %.2f ms guarded: %.2f", wl.ExpectedTrainMS, trainID, tT, want)
			}
		})
	}
}

// A live GMD search confirms an edge candidate through the live profiler's repeats: the
// repeats go through profile grants, are counted, and leave the store consistent. The
// scripted workers report noise-free times, so a candidate inside the budgets only by a
// fraction of GMD's 6% margin is confirmed by repeats.
func TestLiveSearchRemeasures(t *testing.T) {
	var seen []string
	for _, powerW := range []float64{20, 25, 30, 35, 40, 45} {
		e, c := newLiveEnv(t, Config{MaxProfiles: 15, Live: LiveOptions{Samples: 2, MinTime: time.Millisecond, PowerSettle: time.Millisecond}},
			plan.Targets{LatencyMS: 400, PowerMW: powerW * 1000, RateRPS: 20})
		pair := Pair{Train: tTrain, TrainBatch: 32, Infer: tInfer, Batches: []int{1, 2, 4, 8}}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		res, counts, err := c.search(ctx, "gmd", pair, c.targets, 20, 0, false)
		cancel()
		e.sched.Close()
		if err != nil {
			t.Fatalf("%g W: %v", powerW, err)
		}
		seen = append(seen, fmt.Sprintf("%g W: %d profiled, %d repeats (%s)", powerW, counts.Profiled, counts.Remeasured, res.Stop))
		if len(res.Remeasured) != counts.Remeasured {
			t.Fatalf("%g W: GMD took %d repeats, the live profiler counted %d", powerW, len(res.Remeasured), counts.Remeasured)
		}
		if counts.Remeasured == 0 {
			continue
		}
		if len(res.Profiled)+len(res.Remeasured) > 15 || !res.Feasible {
			t.Fatalf("%g W: %d profiles + %d repeats, feasible %v", powerW, len(res.Profiled), len(res.Remeasured), res.Feasible)
		}
		all, err := e.store.List(store.Filter{Board: e.spec.Name})
		if err != nil {
			t.Fatal(err)
		}
		var ps []store.Profile
		for _, p := range all {
			if p.Mode == res.Remeasured[0] {
				ps = append(ps, p)
			}
		}
		if len(ps) != 5 {
			t.Fatalf("%g W: %d points stored for the remeasured mode, want 5", powerW, len(ps))
		}
		for _, p := range ps {
			if p.Source != store.SourceLive || p.Samples < 2*counts.Remeasured/len(uniqueModes(res.Remeasured)) {
				t.Fatalf("%g W: stored %+v after %d repeats", powerW, p, counts.Remeasured)
			}
		}
		t.Logf("%q", seen)
		return
	}
	t.Fatalf("no live search remeasured a candidate (GMD's confirm step never ran through the live profiler): %q", seen)
}

func uniqueModes(ms []powermode.Mode) map[powermode.Mode]bool {
	out := map[powermode.Mode]bool{}
	for _, m := range ms {
		out[m] = true
	}
	return out
}
