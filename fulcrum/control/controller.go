package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/fulcrum/search"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
)

// Config holds the controller's rules and thresholds; zero fields take the defaults of
// DefaultConfig. configs/fulcrum.yaml documents each as a controller.* key.
type Config struct {
	Period      time.Duration // control loop period
	PowerSample time.Duration // board power reading period
	PowerWindow time.Duration // moving average the power budget applies to
	// PowerSettle: readings this soon after a mode change are not judged (the INA3221
	// reports ~430 ms averages, so they still hold the previous mode).
	PowerSettle time.Duration
	RateTau     time.Duration // time constant of the arrival-rate EWMA
	RateWarmup  time.Duration // measure arrivals this long before the first plan (rate auto)
	DriftRel    float64       // re-plan when the rate differs from the planned one by more than this…
	DriftHold   time.Duration // …for this long
	PlanMargin  float64       // plan against budgets shrunk by this (profiles are a few % noisy)
	StepMargin  float64       // a power step targets predicted power ≤ budget·(1−StepMargin)
	Hysteresis  float64       // step back up only while values stay below budget·(1−Hysteresis)…
	Hold        time.Duration // …for this long
	Cooldown    time.Duration // least time between two steps
	// LatencyCooldown is the least time between latency steps: the latency window must
	// have forgotten what the previous configuration did (sched's recent window).
	LatencyCooldown time.Duration
	PowerFail       time.Duration // no power reading this long: degraded
	MinLatency      int           // served requests in the window before latency is judged
	MinProfiles     int           // fewer stored profiles than this: run the searcher
	Searcher        string        // "gmd" or "als"
	MaxProfiles     int           // searcher's profile budget (0: its default)
	NoiseRel        float64       // relative profiling noise the searcher sizes margins from
	Events          int           // event ring size
	InferBatches    []int         // batch sizes planned over (∩ what the worker serves)
	Live            LiveOptions
}

// DefaultConfig is what fulcrumd uses when the configuration says nothing.
func DefaultConfig() Config {
	return Config{
		Period: 250 * time.Millisecond, PowerSample: 100 * time.Millisecond, PowerWindow: time.Second, PowerSettle: 500 * time.Millisecond,
		RateTau: 2 * time.Second, RateWarmup: 2 * time.Second,
		DriftRel: 0.25, DriftHold: 3 * time.Second,
		PlanMargin: 0.05, StepMargin: 0.10, Hysteresis: 0.10, Hold: 5 * time.Second,
		Cooldown: time.Second, LatencyCooldown: 5 * time.Second, PowerFail: time.Second,
		MinLatency: 20, MinProfiles: 3, Searcher: "gmd", NoiseRel: 0.03, Events: 1000,
		InferBatches: plan.DefaultInferBatches(),
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	durs := []struct{ v, d *time.Duration }{
		{&c.Period, &d.Period}, {&c.PowerSample, &d.PowerSample}, {&c.PowerWindow, &d.PowerWindow}, {&c.PowerSettle, &d.PowerSettle},
		{&c.RateTau, &d.RateTau}, {&c.RateWarmup, &d.RateWarmup}, {&c.DriftHold, &d.DriftHold},
		{&c.Hold, &d.Hold}, {&c.Cooldown, &d.Cooldown}, {&c.LatencyCooldown, &d.LatencyCooldown},
		{&c.PowerFail, &d.PowerFail},
	}
	for _, x := range durs {
		if *x.v <= 0 {
			*x.v = *x.d
		}
	}
	flts := []struct{ v, d *float64 }{
		{&c.DriftRel, &d.DriftRel}, {&c.PlanMargin, &d.PlanMargin}, {&c.StepMargin, &d.StepMargin},
		{&c.Hysteresis, &d.Hysteresis}, {&c.NoiseRel, &d.NoiseRel},
	}
	for _, x := range flts {
		if *x.v <= 0 {
			*x.v = *x.d
		}
	}
	if c.MinLatency <= 0 {
		c.MinLatency = d.MinLatency
	}
	if c.MinProfiles <= 0 {
		c.MinProfiles = d.MinProfiles
	}
	if c.Searcher == "" {
		c.Searcher = d.Searcher
	}
	if c.Events <= 0 {
		c.Events = d.Events
	}
	if len(c.InferBatches) == 0 {
		c.InferBatches = d.InferBatches
	}
	return c
}

// reasonBudgets is the re-plan reason after a budget change.
const reasonBudgets = "budgets changed"

// noPowerMW stands for "no power budget" in model v1 (its largest valid budget).
const noPowerMW = 1e6

// modelBudgets returns model v1's budgets for the operator's targets b (where power 0
// is "none" and rate 0 "measured") at the given rate.
func modelBudgets(b plan.Budgets, rateRPS float64) plan.Budgets {
	p := b.PowerMW
	if p <= 0 {
		p = noPowerMW
	}
	return plan.Budgets{RateRPS: max(rateRPS, 1e-3), LatencyMS: b.LatencyMS, PowerMW: p, Quantile: b.WithDefaults().Quantile, RhoMax: b.WithDefaults().RhoMax}.WithDefaults()
}

// Choice is a configuration the controller applied or planned, with model v1's
// numbers for it.
type Choice struct {
	Mode      powermode.Mode `json:"mode"`
	Batch     int            `json:"batch"`
	Predicted Prediction     `json:"predicted"`
}

// Options wire a controller.
type Options struct {
	Config Config
	Sched  Scheduler
	Board  Board // nil: no board (batch sizes only, no mode changes, no power)
	Store  *store.Store
	Clock  sched.Clock // sched.RealClock when nil
	Log    *slog.Logger
	// Presets are the board's nvpmodel presets (GMD's start) and their names.
	Presets     []powermode.Mode
	PresetNames []string
	Budgets     plan.Budgets
}

// Controller plans and watches. Its methods are safe for concurrent use.
type Controller struct {
	cfg     Config
	sched   Scheduler
	board   Board
	store   *store.Store
	clock   sched.Clock
	log     *slog.Logger
	presets []powermode.Mode
	pnames  []string
	events  *EventLog
	power   *PowerMonitor

	mu       sync.Mutex
	budgets  plan.Budgets
	pair     *Pair
	pairAt   time.Time
	cur      *Choice // applied
	planRate float64
	stepped  bool
	degraded string // reason, "" when not degraded
	applyErr error  // the last failed board Apply (nil after a success), for ApplyMode's answer
	// While the board refuses mode changes: the configuration decided but not in force,
	// how many writes in a row failed since when, and when the next retry is due
	// (backed off: retrying a refused write every step only floods the log).
	want           *Choice
	applyFails     int
	applyFailSince time.Time
	retryAt        time.Time

	rate      float64
	rateInit  bool
	lastReqs  uint64
	startReqs uint64
	lastAt    time.Time

	needPlan    string // reason a plan is due ("" none)
	forceSearch string // searcher to run for the next plan ("" none)
	job         bool   // a search is running
	jobMethod   string
	jobDone     chan struct{}
	base        context.Context // ends when Run ends
	forceApply  bool            // the board's mode is not cur's (a search moved it)
	held        bool            // an operator-applied mode is held
	driftSince  time.Time
	belowSince  time.Time
	lastStep    time.Time
	lastLatStep time.Time
	lastApply   time.Time
	corrP       map[powermode.Mode]float64 // measured/predicted power where a budget broke
	badLat      map[cfgKey]bool            // configurations that broke the latency budget
	measured    Measured
	latCount    int
	live        LiveCounts
	lastSearch  *search.Result
	violations  map[string]uint64 // budget violations acted on, by budget
}

type cfgKey struct {
	m powermode.Mode
	b int
}

// New returns a controller; Run starts it.
func New(o Options) (*Controller, error) {
	if o.Sched == nil || o.Store == nil {
		return nil, errors.New("control: a scheduler and a profile store are required")
	}
	if o.Clock == nil {
		o.Clock = sched.RealClock{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	b := o.Budgets.WithDefaults()
	if err := b.ValidateTargets(); err != nil {
		return nil, fmt.Errorf("control: budgets: %w", err)
	}
	cfg := o.Config.withDefaults()
	if search.CheckLive(cfg.Searcher) != nil {
		return nil, fmt.Errorf("control: searcher %q: want gmd or als", cfg.Searcher)
	}
	c := &Controller{cfg: cfg, sched: o.Sched, board: o.Board, store: o.Store, clock: o.Clock, log: o.Log,
		presets: o.Presets, pnames: o.PresetNames, budgets: b,
		base: context.Background(), violations: map[string]uint64{},
		power: NewPowerMonitor(10 * cfg.PowerWindow), corrP: map[powermode.Mode]float64{}, badLat: map[cfgKey]bool{}}
	c.events = NewEventLog(cfg.Events, o.Clock.Now)
	o.Sched.SetLatencyBudget(msDur(b.LatencyMS))
	return c, nil
}

func msDur(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// Events is the controller's event log.
func (c *Controller) Events() *EventLog { return c.events }

// Config returns the effective configuration.
func (c *Controller) Config() Config { return c.cfg }

// Budgets returns the budgets in force.
func (c *Controller) Budgets() plan.Budgets {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.budgets
}

// SetBudgets validates and installs new budgets; the next step re-plans from stored
// profiles. Invalid budgets change nothing.
func (c *Controller) SetBudgets(b plan.Budgets) error { return c.SetBudgetsBy(b, nil) }

// SetBudgetsBy is SetBudgets on behalf of an API caller (recorded in the event).
func (c *Controller) SetBudgetsBy(b plan.Budgets, by *api.Caller) error {
	b = b.WithDefaults()
	if err := b.ValidateTargets(); err != nil {
		return fmt.Errorf("budgets not changed: %w", err)
	}
	c.mu.Lock()
	old := c.budgets
	c.budgets = b
	c.badLat = map[cfgKey]bool{}
	c.held = false
	if c.cur != nil || c.pair != nil {
		c.needPlan = reasonBudgets
	}
	c.mu.Unlock()
	c.sched.SetLatencyBudget(msDur(b.LatencyMS))
	c.events.Add(Event{Kind: KindBudget, Reason: fmt.Sprintf("budgets changed from %s to %s", budgetsString(old), budgetsString(b)), Caller: by})
	return nil
}

// budgetsString is the operator's targets in an event's words.
func budgetsString(b plan.Budgets) string {
	p, r := "none", "auto"
	if b.PowerMW > 0 {
		p = fmt.Sprintf("%.1f W", b.PowerMW/1000)
	}
	if b.RateRPS > 0 {
		r = fmt.Sprintf("%.1f/s", b.RateRPS)
	}
	return fmt.Sprintf("{latency p%g %.0f ms, power %s, rate %s}", b.WithDefaults().Quantile*100, b.LatencyMS, p, r)
}

// ErrBusy is returned by Optimize while a search runs.
var ErrBusy = errors.New("a search is already running; wait for it (fulcrumctl events) before starting another")

// ErrNoPair is returned by Optimize before a training and an inference worker are
// registered.
var ErrNoPair = errors.New("needs a training and an inference worker registered; start them first")

// ErrNoBoard is returned when fulcrumd drives no board.
var ErrNoBoard = errors.New("fulcrumd has no board (board: none); configure one to change power modes")

// Optimize runs a searcher ("gmd", "als", or "" for the configured one) through the
// live profiler, then plans from the store and applies the plan. It blocks until done;
// when ctx ends first the search is aborted and the previous configuration restored.
// maxProfiles caps the modes profiled (0: the configured or the searcher's default).
func (c *Controller) Optimize(ctx context.Context, method string, maxProfiles int) (*Outcome, error) {
	if method == "" {
		method = c.cfg.Searcher
	}
	if search.CheckLive(method) != nil {
		return nil, fmt.Errorf("optimize: method %q: want gmd or als", method)
	}
	if c.board == nil {
		return nil, fmt.Errorf("optimize: %w", ErrNoBoard)
	}
	c.mu.Lock()
	if c.pair == nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("optimize: %w", ErrNoPair)
	}
	if c.job {
		c.mu.Unlock()
		return nil, fmt.Errorf("optimize: %w", ErrBusy)
	}
	done, out := c.startSearch(ctx, method, "optimize requested", maxProfiles)
	c.mu.Unlock()
	<-done // ctx ending cancels the search, which then returns promptly
	if out.Err != nil {
		return out, fmt.Errorf("optimize %s: %w", method, out.Err)
	}
	return out, nil
}

// Searching returns the method of the search running, or "".
func (c *Controller) Searching() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.jobMethod
}

// ApplyMode applies an operator's mode between turns, with the best stored batch size
// there (or the present one), and holds it until budgets change or an optimize runs.
// A power or latency violation may still step away from it.
func (c *Controller) ApplyMode(ctx context.Context, m powermode.Mode) (Choice, error) {
	if c.board == nil {
		return Choice{}, ErrNoBoard
	}
	if sp := c.board.Space(); sp != nil {
		if err := sp.Check(m); err != nil {
			return Choice{}, fmt.Errorf("%w (fulcrumctl mode lists the board's levels)", err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := Choice{Mode: m}
	if c.cur != nil {
		ch.Batch = c.cur.Batch
	}
	if c.pair != nil {
		rate := c.planRateOr()
		if ps, err := c.profiles(); err == nil {
			if mod, err := plan.NewModel(modelBudgets(c.budgets, rate), c.cfg.InferBatches); err == nil {
				for _, p := range ps {
					if p.Mode == m {
						if e, ok := mod.BestAtMode(p); ok {
							ch.Batch, ch.Predicted = e.Batch, predictionOf(e, rate)
						}
					}
				}
			}
		}
	}
	mode := m
	c.events.Add(Event{Kind: KindApply, Reason: "mode set by the operator; held until budgets change or an optimize runs", Mode: &mode, Batch: ch.Batch})
	c.forceApply = true
	// A refused operator change is answered to the operator, not retried: the
	// controller's own retry state (a plan the board refused earlier) stays as it was.
	want, fails, since, retryAt := c.want, c.applyFails, c.applyFailSince, c.retryAt
	c.apply(ctx, ch)
	c.setTrainingPaused(false, "mode set by the operator")
	if c.cur == nil || c.cur.Mode != m {
		c.want, c.applyFails, c.applyFailSince, c.retryAt = want, fails, since, retryAt
		if c.applyErr != nil {
			return Choice{}, fmt.Errorf("apply mode %s failed; the board keeps its previous mode: %w", m.Human(), c.applyErr)
		}
		return Choice{}, fmt.Errorf("apply mode %s failed (see the events)", m.Human())
	}
	c.held = true
	c.stepped = false
	return *c.cur, nil
}

// Counters are the budget violations acted on (by budget: power, latency) and the
// decisions taken (events by kind) since start, for the Prometheus metrics.
func (c *Controller) Counters() (violations, decisions map[string]uint64) {
	c.mu.Lock()
	violations = make(map[string]uint64, len(c.violations))
	for k, v := range c.violations {
		violations[k] = v
	}
	c.mu.Unlock()
	return violations, c.events.Counts()
}

// Held reports whether an operator-applied mode is held.
func (c *Controller) Held() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held
}

// Run runs the power sampler and the control loop until ctx ends, then waits for a
// running search to stop.
func (c *Controller) Run(ctx context.Context) error {
	c.mu.Lock()
	c.base = ctx
	c.mu.Unlock()
	var wg sync.WaitGroup
	if c.board != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.sleep(ctx, c.cfg.PowerSample) {
				_ = c.power.Sample(ctx, c.board, c.clock.Now())
			}
		}()
	}
	for c.sleep(ctx, c.cfg.Period) {
		c.Step(ctx)
	}
	wg.Wait()
	c.mu.Lock()
	done := c.jobDone
	c.mu.Unlock()
	if done != nil {
		<-done
	}
	return nil
}

// SamplePower reads board power once into the moving average (Run does it every
// PowerSample; tests call it).
func (c *Controller) SamplePower(ctx context.Context) error {
	if c.board == nil {
		return errors.New("no board")
	}
	return c.power.Sample(ctx, c.board, c.clock.Now())
}

func (c *Controller) sleep(ctx context.Context, d time.Duration) bool {
	ch := make(chan struct{})
	t := c.clock.AfterFunc(d, func() { close(ch) })
	select {
	case <-ctx.Done():
		t.Stop()
		return false
	case <-ch:
		return true
	}
}

// pairOf finds the workloads to plan for: the first live training and inference
// workers.
func (c *Controller) pairOf(snap sched.Snapshot) (*Pair, string) {
	var tr, inf *sched.WorkerInfo
	for i := range snap.Workers {
		w := &snap.Workers[i]
		if w.Role == proto.RoleTrain && tr == nil {
			tr = w
		}
		if w.Role == proto.RoleInfer && inf == nil {
			inf = w
		}
	}
	if tr == nil || inf == nil {
		return nil, ""
	}
	batches := slices.Clone(c.cfg.InferBatches)
	if len(inf.BatchSizes) > 0 {
		batches = slices.DeleteFunc(batches, func(b int) bool { return !slices.Contains(inf.BatchSizes, b) })
		if len(batches) == 0 {
			batches = slices.Clone(inf.BatchSizes)
		}
	}
	slices.Sort(batches)
	return &Pair{Train: tr.Workload, TrainBatch: tr.Batch, Infer: inf.Workload, Batches: batches}, inf.ID
}

func samePair(a, b *Pair) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Train == b.Train && a.TrainBatch == b.TrainBatch && a.Infer == b.Infer && slices.Equal(a.Batches, b.Batches)
}

// Step runs one control decision: update the measurements, then plan, step or
// re-plan as the rules say (docs/controller.md). Run calls it every Period.
func (c *Controller) Step(ctx context.Context) {
	snap := c.sched.Snapshot()
	now := c.clock.Now()
	pair, _ := c.pairOf(snap)

	c.mu.Lock()
	defer c.mu.Unlock()
	if !samePair(pair, c.pair) {
		if pair != nil {
			c.needPlan = fmt.Sprintf("workers registered: training %s (batch %d), inference %s", pair.Train, pair.TrainBatch, pair.Infer)
			c.pairAt = now
			c.rateInit = false
		}
		c.pair = pair
	}
	var pn int
	if c.board != nil {
		c.measured.PowerMW, pn = c.power.Average(now, c.cfg.PowerWindow)
	}
	if c.pair == nil {
		return
	}
	// Arrival rate: EWMA of the request counter's slope.
	if wl, ok := snap.Workload(proto.RoleInfer, c.pair.Infer); ok {
		switch {
		case !c.rateInit:
			c.rateInit, c.startReqs = true, wl.Requests
			c.rate = 0
		case now.Sub(c.pairAt) <= c.cfg.RateWarmup && now.After(c.pairAt):
			// Warm-up: the mean since the workers registered (an EWMA started at 0
			// would under-estimate the rate the first plan is made for).
			c.rate = float64(wl.Requests-c.startReqs) / now.Sub(c.pairAt).Seconds()
		case now.After(c.lastAt):
			dt := now.Sub(c.lastAt).Seconds()
			inst := float64(wl.Requests-c.lastReqs) / dt
			a := 1 - math.Exp(-dt/c.cfg.RateTau.Seconds())
			c.rate += a * (inst - c.rate)
		}
		c.lastReqs, c.lastAt = wl.Requests, now
		c.measured.LatencyP99MS = wl.LatencyRecent.P99MS
		c.latCount = wl.LatencyRecent.Count
	}
	c.measured.RateRPS = c.rate
	if c.job {
		return
	}
	if c.board != nil && c.checkDegraded(ctx, now) {
		return
	}
	if c.want != nil && (c.needPlan == "" || now.Before(c.retryAt)) {
		// The board refused the last mode change: nothing else is decided until it
		// takes one (every decision would be another refused write), and the retry
		// waits out the back-off. A budget change re-plans at the next retry instead.
		if now.Before(c.retryAt) {
			return
		}
		c.apply(ctx, *c.want)
		if c.want == nil {
			c.needPlan = "the board accepts mode changes again"
		}
		return
	}
	rate, ready := c.planningRate(now)
	b := c.budgets
	// Power broken (judged on readings taken since the last change only): step down now,
	// before anything else — also when a lowered budget is what broke it.
	settled := c.lastApply.Add(c.cfg.PowerSettle)
	if c.cur != nil && b.PowerMW > 0 && c.board != nil && now.Sub(settled) >= c.cfg.PowerWindow/2 &&
		now.Sub(c.lastStep) >= c.cfg.Cooldown {
		from := now.Add(-c.cfg.PowerWindow)
		if from.Before(settled) {
			from = settled
		}
		if avg, n := c.power.Mean(from, now); n > 0 && avg > b.PowerMW {
			c.measured.PowerMW = avg
			c.violations["power"]++
			if strings.HasPrefix(c.needPlan, reasonBudgets) {
				c.needPlan = "" // the step is chosen against the new budgets; step_up re-plans later
			}
			c.stepDownPower(ctx, rate)
			return
		}
	}
	if c.needPlan != "" && ready {
		reason := c.needPlan
		c.needPlan = ""
		c.plan(ctx, reason, rate)
		return
	}
	if c.cur == nil {
		return
	}
	// A worker that (re)registered since the last decision serves the planned batch.
	for _, w := range snap.Workers {
		if w.Role == proto.RoleInfer && w.Workload == c.pair.Infer && w.Batch != c.cur.Batch &&
			(len(w.BatchSizes) == 0 || slices.Contains(w.BatchSizes, c.cur.Batch)) {
			if err := c.sched.SetInferBatch(w.ID, c.cur.Batch); err != nil {
				c.log.Warn("set the planned inference batch on a new worker", "worker", w.ID, "err", err)
			}
		}
	}
	// Latency broken: step down now.
	if c.latCount >= c.cfg.MinLatency && c.measured.LatencyP99MS > b.LatencyMS &&
		now.Sub(c.lastStep) >= c.cfg.Cooldown && now.Sub(c.lastLatStep) >= c.cfg.LatencyCooldown {
		c.violations["latency"]++
		c.stepDownLatency(ctx, rate)
		return
	}
	// Rate drift: re-plan from stored profiles.
	if b.RateRPS == 0 && c.planRate > 0 && !c.held {
		if math.Abs(c.rate-c.planRate)/c.planRate > c.cfg.DriftRel {
			if c.driftSince.IsZero() {
				c.driftSince = now
			} else if now.Sub(c.driftSince) >= c.cfg.DriftHold {
				c.driftSince = time.Time{}
				c.plan(ctx, fmt.Sprintf("arrival rate drifted from %.1f/s to %.1f/s (over %.0f%% for %s)", c.planRate, c.rate, c.cfg.DriftRel*100, c.cfg.DriftHold), c.rate)
				return
			}
		} else {
			c.driftSince = time.Time{}
		}
	}
	// Back up after a step, with hysteresis.
	if c.stepped {
		h := 1 - c.cfg.Hysteresis
		below := (b.PowerMW == 0 || c.board == nil || (pn > 0 && c.measured.PowerMW < b.PowerMW*h)) &&
			(c.latCount == 0 || c.measured.LatencyP99MS < b.LatencyMS*h)
		switch {
		case !below:
			c.belowSince = time.Time{}
		case c.belowSince.IsZero():
			c.belowSince = now
		case now.Sub(c.belowSince) >= c.cfg.Hold && now.Sub(c.lastStep) >= c.cfg.Cooldown:
			c.belowSince = time.Time{}
			c.stepUp(ctx, rate)
		}
	}
}

// planningRate is the fixed rate, or the measured one once it has been measured for
// RateWarmup.
func (c *Controller) planningRate(now time.Time) (float64, bool) {
	if c.budgets.RateRPS > 0 {
		return c.budgets.RateRPS, true
	}
	return c.rate, c.rateInit && now.Sub(c.pairAt) >= c.cfg.RateWarmup
}

// profiles returns the stored complete profiles of the pair with the learned power
// corrections applied and latency-broken configurations left out.
func (c *Controller) profiles() ([]plan.ModeProfile, error) {
	if c.board == nil {
		return nil, nil
	}
	ps, err := StoredProfiles(c.store, c.board.Info().Name, *c.pair)
	if err != nil {
		return nil, err
	}
	if sp := c.board.Space(); sp != nil {
		ps = slices.DeleteFunc(ps, func(p plan.ModeProfile) bool { return !sp.Contains(p.Mode) })
	}
	for i := range ps {
		if k := c.corrP[ps[i].Mode]; k > 1 {
			ps[i].Train.PowerMW *= k
			for j := range ps[i].Infer {
				ps[i].Infer[j].PowerMW *= k
			}
		}
		ps[i].Infer = slices.DeleteFunc(ps[i].Infer, func(ip plan.InferPoint) bool { return c.badLat[cfgKey{ps[i].Mode, ip.Batch}] })
	}
	return slices.DeleteFunc(ps, func(p plan.ModeProfile) bool { return len(p.Infer) == 0 }), nil
}

func predictionOf(e plan.Eval, rate float64) Prediction {
	return Prediction{ThroughputSPS: e.ThroughputSPS, LatencyMS: e.LatencyMS, PowerMW: e.PowerMW, Rho: e.Rho, RateRPS: rate, Feasible: e.Feasible, Binding: string(e.Binding)}
}

// plan chooses from stored profiles (model v1, budgets shrunk by PlanMargin), or starts
// a search when too few are stored or one was asked for. Called with c.mu held.
func (c *Controller) plan(ctx context.Context, reason string, rate float64) {
	kind := KindReplan
	if c.cur == nil {
		kind = KindPlan
	}
	ps, err := c.profiles()
	if err != nil {
		c.events.Add(Event{Kind: kind, Reason: reason + ": reading stored profiles failed", Err: err.Error()})
		return
	}
	if c.board != nil && (len(ps) < c.cfg.MinProfiles || c.forceSearch != "") {
		method := c.forceSearch
		if method == "" {
			method = c.cfg.Searcher
		}
		c.forceSearch = ""
		c.startSearch(c.base, method, fmt.Sprintf("%s; %d stored profiles (need %d)", reason, len(ps), c.cfg.MinProfiles), 0)
		return
	}
	if c.board == nil {
		return
	}
	pl, err := c.choose(ps, modelBudgets(c.budgets, rate), c.cfg.PlanMargin)
	if err != nil {
		c.events.Add(Event{Kind: kind, Reason: reason, Err: err.Error()})
		return
	}
	c.planRate = rate
	c.stepped = false
	why := reason + ": " + pl.Explain(modelBudgets(c.budgets, rate))
	c.decide(ctx, kind, why, pl.Best, rate)
}

// choose is model v1's choice over ps against budgets b shrunk by margin; the
// prediction is re-scored against the exact budgets.
func (c *Controller) choose(ps []plan.ModeProfile, b plan.Budgets, margin float64) (plan.Plan, error) {
	m, err := plan.NewModel(search.Derate(c.admissionBudgets(b), margin), c.cfg.InferBatches)
	if err != nil {
		return plan.Plan{}, err
	}
	pl, err := m.Choose(ps)
	if err != nil {
		return pl, fmt.Errorf("no stored profile of this workload pair: run fulcrumctl optimize, or fulcrumctl profile: %w", err)
	}
	return pl, nil
}

// admissionBudgets returns the budgets as the scheduler's admission test sees them: it
// starts a training minibatch only if every request still meets its deadline with each
// expected time raised by DevK deviations (ExpectedDevRel until measured) and its margin
// added. Model v1's latency (fill + training + inference time) has neither, so a plan
// feasible by the model alone can leave training no room to run: in the demo a plan at
// 136 ms of a 142.5 ms planning budget starved training, as the scheduler needed 155 of
// 150 ms. With times raised by g = 1 + DevK·ExpectedDevRel, the latency test
// g·(T_train + T_infer) + fill ≤ L − margin is, to within fill's share, model v1's test
// against (L − margin)/g, which is what is returned. Searches and plans both use it;
// predictions and reports use the exact budgets.
func (c *Controller) admissionBudgets(b plan.Budgets) plan.Budgets {
	sc := c.sched.Config()
	g := 1 + sc.DevK*sched.ExpectedDevRel
	if lm := float64(sc.Margin) / float64(time.Millisecond); b.LatencyMS > 2*lm {
		b.LatencyMS -= lm
	}
	b.LatencyMS /= g
	return b
}

// decide applies e and records the decision (kind) and the application.
func (c *Controller) decide(ctx context.Context, kind Kind, reason string, e plan.Eval, rate float64) {
	exact, err := plan.NewModel(modelBudgets(c.budgets, rate), c.cfg.InferBatches)
	pred := predictionOf(e, rate)
	if err == nil {
		if ps, perr := c.profiles(); perr == nil {
			for _, p := range ps {
				if p.Mode == e.Mode {
					for _, ip := range p.Infer {
						if ip.Batch == e.Batch {
							pred = predictionOf(exact.Evaluate(p.Mode, p.Train, ip), rate)
						}
					}
				}
			}
		}
	}
	// A plan judged with the scheduler's admission room (choose) that does not fit in it
	// is not feasible, whatever the exact model says: training would starve.
	pred.Feasible = pred.Feasible && e.Feasible
	if !e.Feasible {
		pred.Binding = string(e.Binding) // what the decision's reason names
	}
	m := e.Mode
	meas := c.measured
	c.events.Add(Event{Kind: kind, Reason: reason, Mode: &m, Batch: e.Batch, Predicted: &pred, Measured: &meas})
	c.apply(ctx, Choice{Mode: e.Mode, Batch: e.Batch, Predicted: pred})
	// DESIGN §2: when no known configuration meets the budgets with training running,
	// inference and power come first: training waits until a plan is feasible again.
	c.setTrainingPaused(!pred.Feasible, reason)
}

// setTrainingPaused pauses or resumes training turns and records the change.
func (c *Controller) setTrainingPaused(paused bool, why string) {
	if paused == c.sched.Snapshot().TrainingPaused {
		return
	}
	c.sched.SetTrainingPaused(paused)
	msg := "training resumed: the configuration in force meets the budgets"
	if paused {
		msg = "training paused: no known configuration meets the budgets with training running, so inference and power come first (" + why + ")"
	}
	c.events.Add(Event{Kind: KindApply, Reason: msg})
	c.log.Info(msg)
}

// apply sets the mode between turns and the inference workers' batch size. Called with
// c.mu held; BetweenTurns waits at most for the running minibatch.
func (c *Controller) apply(ctx context.Context, ch Choice) {
	start := c.clock.Now()
	m := ch.Mode
	if c.cur == nil || c.cur.Mode != ch.Mode || c.forceApply {
		err := c.sched.BetweenTurns(ctx, func(ctx context.Context) error { return c.board.Apply(ctx, ch.Mode) })
		if err != nil {
			now := c.clock.Now()
			if c.applyFails == 0 {
				c.applyFailSince = now
			}
			c.applyFails++
			c.applyErr = err
			c.want = &ch
			wait := applyRetry(c.applyFails)
			c.retryAt = now.Add(wait)
			reason := fmt.Sprintf("applying the mode failed (%d in a row); the board keeps its previous mode and fulcrumd runs DEGRADED; retrying in %s", c.applyFails, wait)
			c.events.Add(Event{Kind: KindApply, Reason: reason, Mode: &m, Batch: ch.Batch, Err: err.Error()})
			c.log.Error("apply power mode", "mode", ch.Mode.Human(), "failures", c.applyFails, "retry_in", wait, "err", err)
			return
		}
		if c.applyFails > 0 {
			msg := fmt.Sprintf("the board accepts mode changes again after %d refused writes since %s", c.applyFails, c.applyFailSince.Format(time.RFC3339))
			c.events.Add(Event{Kind: KindDegraded, Reason: msg})
			c.log.Info(msg)
		}
		c.applyErr = nil
		c.expectAt(ch.Mode)
	}
	// ch is in force now (written, or the board already ran its mode): nothing waits
	// for a retry.
	c.applyFails, c.want = 0, nil
	var errs []error
	for _, w := range c.sched.Snapshot().Workers {
		if w.Role == proto.RoleInfer && c.pair != nil && w.Workload == c.pair.Infer && w.Batch != ch.Batch {
			if err := c.sched.SetInferBatch(w.ID, ch.Batch); err != nil {
				errs = append(errs, err)
			}
		}
	}
	c.cur = &ch
	c.forceApply = false
	c.lastApply = c.clock.Now()
	ev := Event{Kind: KindApply, Reason: fmt.Sprintf("mode %s and inference batch %d applied in %s", ch.Mode.Human(), ch.Batch, c.lastApply.Sub(start).Round(time.Microsecond)), Mode: &m, Batch: ch.Batch}
	if err := errors.Join(errs...); err != nil {
		ev.Err = err.Error()
	}
	c.events.Add(ev)
	c.log.Info("applied", "mode", ch.Mode.Human(), "batch", ch.Batch)
}

// Retries of a refused mode change wait applyRetryFirst, doubling per failure up to
// applyRetryMax: a board whose clock files are immutable refuses for minutes or hours.
const (
	applyRetryFirst = time.Second
	applyRetryMax   = 30 * time.Second
)

// applyRetry is the wait after the n-th refused write in a row.
func applyRetry(n int) time.Duration {
	d := applyRetryFirst
	for i := 1; i < n && d < applyRetryMax; i++ {
		d *= 2
	}
	return min(d, applyRetryMax)
}

// boardRefusal says why fulcrumd is degraded while the board refuses mode changes
// ("" when it does not). Called with c.mu held.
func (c *Controller) boardRefusal(now time.Time) string {
	if c.want == nil {
		return ""
	}
	next := c.retryAt.Sub(now).Round(time.Millisecond)
	if next < 0 {
		next = 0
	}
	return fmt.Sprintf("the board refuses mode changes (%d writes in a row failed since %s; last error: %v): the plan %s is not in force; retrying in %s (check that the board's clock files are writable, e.g. not immutable: lsattr)",
		c.applyFails, c.applyFailSince.Format(time.RFC3339), c.applyErr, c.want.Mode.Human(), next)
}

// expectAt tells the scheduler how long the workers' turns take at mode m — the pair's
// stored profile there, nothing (measure afresh) for other workloads or an unprofiled
// mode — so that it does not judge admission on the previous mode's times: a slower
// mode's stale times starved training after a plan (found in the demo: 1–6 samples/s
// against 270 planned). Called with c.mu held, after a mode change.
func (c *Controller) expectAt(m powermode.Mode) {
	var mp *plan.ModeProfile
	if c.pair != nil {
		if ps, err := c.profiles(); err == nil {
			for i := range ps {
				if ps[i].Mode == m {
					mp = &ps[i]
					break
				}
			}
		}
	}
	for _, w := range c.sched.Snapshot().Workers {
		var times map[int]time.Duration
		switch {
		case mp != nil && w.Role == proto.RoleTrain && w.Workload == c.pair.Train:
			times = map[int]time.Duration{mp.Train.Batch: msDur(mp.Train.TimeMS)}
		case mp != nil && w.Role == proto.RoleInfer && w.Workload == c.pair.Infer:
			times = map[int]time.Duration{}
			for _, ip := range mp.Infer {
				times[ip.Batch] = msDur(ip.TimeMS)
			}
		}
		if err := c.sched.ExpectTimes(w.ID, times); err != nil {
			c.log.Debug("expected turn times not set", "worker", w.ID, "err", err) // it just left
		}
	}
}

// evalAll scores every stored configuration at rate with model v1 (exact budgets).
func (c *Controller) evalAll(ps []plan.ModeProfile, rate float64) ([]plan.Eval, []plan.ModeProfile) {
	m, err := plan.NewModel(modelBudgets(c.budgets, rate), c.cfg.InferBatches)
	if err != nil {
		return nil, nil
	}
	var es []plan.Eval
	var owners []plan.ModeProfile
	for _, p := range ps {
		for _, ip := range p.Infer {
			es = append(es, m.Evaluate(p.Mode, p.Train, ip))
			owners = append(owners, p)
		}
	}
	return es, owners
}

// stepDownPower moves to the highest-throughput stored configuration whose predicted
// power, scaled by how much the present one is under-predicted, is within
// budget·(1−StepMargin); failing that, to the lowest-power known configuration.
func (c *Controller) stepDownPower(ctx context.Context, rate float64) {
	now := c.clock.Now()
	c.lastStep = now
	ps, err := c.profiles()
	if err != nil || len(ps) == 0 {
		c.events.Add(Event{Kind: KindStepDown, Reason: "power over budget but no stored profile to step to", Err: fmt.Sprint(err)})
		return
	}
	avg := c.measured.PowerMW
	budget := c.budgets.PowerMW
	k := 1.0
	if c.cur.Predicted.PowerMW > 0 {
		k = max(1, avg/c.cur.Predicted.PowerMW)
		c.corrP[c.cur.Mode] = max(c.corrP[c.cur.Mode], k*max(c.corrP[c.cur.Mode], 1))
	}
	target := budget * (1 - c.cfg.StepMargin)
	es, _ := c.evalAll(ps, rate)
	var best, lowest *plan.Eval
	for i := range es {
		e := &es[i]
		if e.Rho > modelBudgets(c.budgets, rate).RhoMax {
			continue
		}
		if lowest == nil || e.PowerMW < lowest.PowerMW || (e.PowerMW == lowest.PowerMW && e.ThroughputSPS > lowest.ThroughputSPS) {
			lowest = e
		}
		if e.PowerMW*k > target || e.PowerMW*k >= avg || e.LatencyMS > c.budgets.LatencyMS*(1-c.cfg.PlanMargin) {
			continue
		}
		if best == nil || e.ThroughputSPS > best.ThroughputSPS || (e.ThroughputSPS == best.ThroughputSPS && e.PowerMW < best.PowerMW) {
			best = e
		}
	}
	pick, how := best, "the highest-throughput stored configuration predicted within it"
	if pick == nil {
		pick, how = lowest, "no stored configuration is predicted within it: the lowest-power known configuration"
	}
	if pick == nil {
		c.events.Add(Event{Kind: KindStepDown, Reason: "power over budget and no stored configuration keeps inference within its GPU share"})
		return
	}
	c.stepped, c.held = true, false
	c.belowSince = time.Time{}
	reason := fmt.Sprintf("power %.1f W (1 s average) over the %.1f W budget at mode %s; the board draws %.2f× the predicted power; stepping to %s (target ≤ %.1f W)",
		avg/1000, budget/1000, c.cur.Mode.Human(), k, how, target/1000)
	c.decide(ctx, KindStepDown, reason, *pick, rate)
}

// stepDownLatency moves to a configuration with a shorter training minibatch or a
// smaller batch at this mode, within the power budget: the best predicted to meet the
// latency budget scaled by how much the present one is under-predicted, else the one
// with the lowest predicted latency.
func (c *Controller) stepDownLatency(ctx context.Context, rate float64) {
	now := c.clock.Now()
	c.lastStep, c.lastLatStep = now, now
	cur := *c.cur
	c.badLat[cfgKey{cur.Mode, cur.Batch}] = true
	ps, err := c.profiles()
	if err != nil || len(ps) == 0 {
		c.events.Add(Event{Kind: KindStepDown, Reason: "latency over budget but no stored profile to step to", Err: fmt.Sprint(err)})
		return
	}
	var curTrain float64
	for _, p := range ps {
		if p.Mode == cur.Mode {
			curTrain = p.Train.TimeMS
		}
	}
	p99 := c.measured.LatencyP99MS
	kL := 1.0
	if cur.Predicted.LatencyMS > 0 {
		kL = max(1, p99/cur.Predicted.LatencyMS)
	}
	es, owners := c.evalAll(ps, rate)
	power := c.budgets.PowerMW
	var best, fastest *plan.Eval
	for i := range es {
		e := &es[i]
		shorter := curTrain == 0 || owners[i].Train.TimeMS < curTrain || (e.Mode == cur.Mode && e.Batch < cur.Batch)
		if !shorter || e.Rho > modelBudgets(c.budgets, rate).RhoMax || (power > 0 && e.PowerMW*max(c.corrP[e.Mode], 1) > power*(1-c.cfg.StepMargin)) {
			continue
		}
		if fastest == nil || e.LatencyMS < fastest.LatencyMS {
			fastest = e
		}
		if e.LatencyMS*kL > c.budgets.LatencyMS*(1-c.cfg.PlanMargin) {
			continue
		}
		if best == nil || e.ThroughputSPS > best.ThroughputSPS {
			best = e
		}
	}
	pick, how := best, "the highest-throughput one predicted within the budget"
	if pick == nil {
		pick, how = fastest, "none is predicted within the budget: the one with the lowest predicted latency"
	}
	if pick == nil {
		c.events.Add(Event{Kind: KindStepDown, Reason: fmt.Sprintf("p99 latency %.1f ms over the %.0f ms budget, but no stored configuration has a shorter training minibatch or smaller batch within the power budget", p99, c.budgets.LatencyMS)})
		return
	}
	c.stepped, c.held = true, false
	c.belowSince = time.Time{}
	reason := fmt.Sprintf("p99 latency %.1f ms over the %.0f ms budget at mode %s batch %d (%.2f× the predicted); stepping to a shorter training minibatch or smaller batch: %s",
		p99, c.budgets.LatencyMS, cur.Mode.Human(), cur.Batch, kL, how)
	c.decide(ctx, KindStepDown, reason, *pick, rate)
}

// stepUp re-plans from stored profiles, with what the steps learned (power corrections,
// latency-broken configurations left out), once the values stayed below
// budget·(1−Hysteresis) for Hold.
func (c *Controller) stepUp(ctx context.Context, rate float64) {
	ps, err := c.profiles()
	if err != nil || len(ps) == 0 {
		return
	}
	pl, err := c.choose(ps, modelBudgets(c.budgets, rate), c.cfg.PlanMargin)
	if err != nil || !pl.Feasible {
		return
	}
	if pl.Best.Mode == c.cur.Mode && pl.Best.Batch == c.cur.Batch {
		c.stepped = false
		return
	}
	if pl.Best.ThroughputSPS <= c.cur.Predicted.ThroughputSPS {
		c.stepped = false
		return
	}
	c.lastStep = c.clock.Now()
	c.stepped = false
	c.planRate = rate
	reason := fmt.Sprintf("power %.1f W and p99 %.1f ms stayed below %.0f%% of their budgets for %s; stepping back up: %s",
		c.measured.PowerMW/1000, c.measured.LatencyP99MS, (1-c.cfg.Hysteresis)*100, c.cfg.Hold, pl.Explain(modelBudgets(c.budgets, rate)))
	c.decide(ctx, KindStepUp, reason, pl.Best, rate)
}

// checkDegraded falls back to the lowest-power known mode when power has not been
// readable for PowerFail (with a power budget), and leaves degraded mode when it is
// readable again. It reports whether the step should end here.
func (c *Controller) checkDegraded(ctx context.Context, now time.Time) bool {
	lastOK, fails, lastErr := c.power.Health()
	down := fails > 0 && (lastOK.IsZero() || now.Sub(lastOK) >= c.cfg.PowerFail)
	switch {
	case down && c.degraded == "":
		c.degraded = fmt.Sprintf("board power unreadable for %s (%d reads failed; last error: %v)", now.Sub(lastOK).Round(time.Millisecond), fails, lastErr)
		if lastOK.IsZero() {
			c.degraded = fmt.Sprintf("board power has never been readable (%d reads failed; last error: %v)", fails, lastErr)
		}
		ev := Event{Kind: KindDegraded, Reason: c.degraded + "; falling back to the lowest-power known mode (check fulcrumctl board power)"}
		if c.budgets.PowerMW == 0 {
			ev.Reason = c.degraded + "; no power budget is set, so the mode is kept"
			c.events.Add(ev)
			return false
		}
		pick, ok := c.lowestPower()
		if !ok {
			ev.Reason = c.degraded + "; no stored profile to pick the lowest-power mode from: keeping the present mode"
			c.events.Add(ev)
			return true
		}
		c.stepped = true
		c.decide(ctx, KindDegraded, ev.Reason, pick, c.planRateOr())
		return true
	case down:
		return true
	case !down && c.degraded != "":
		c.events.Add(Event{Kind: KindDegraded, Reason: "board power is readable again; leaving degraded mode and re-planning"})
		c.degraded = ""
		c.needPlan = "power readable again"
		return false
	}
	return false
}

func (c *Controller) planRateOr() float64 {
	if c.budgets.RateRPS > 0 {
		return c.budgets.RateRPS
	}
	if c.rate > 0 {
		return c.rate
	}
	return 1
}

// lowestPower is the stored configuration with the lowest predicted power (inference
// within its GPU share).
func (c *Controller) lowestPower() (plan.Eval, bool) {
	if c.pair == nil {
		return plan.Eval{}, false
	}
	ps, err := c.profiles()
	if err != nil {
		return plan.Eval{}, false
	}
	rate := c.planRateOr()
	es, _ := c.evalAll(ps, rate)
	var best *plan.Eval
	for i := range es {
		e := &es[i]
		if e.Rho > modelBudgets(c.budgets, rate).RhoMax {
			continue
		}
		if best == nil || e.PowerMW < best.PowerMW || (e.PowerMW == best.PowerMW && e.ThroughputSPS > best.ThroughputSPS) {
			best = e
		}
	}
	if best == nil {
		return plan.Eval{}, false
	}
	return *best, true
}
