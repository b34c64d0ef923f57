package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/fulcrum/search"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
)

// Config holds the controller's rules and thresholds; zero fields take the defaults of
// DefaultConfig. configs/fulcrum.yaml documents each as a controller.* key (the
// field's mapstructure tag).
type Config struct {
	Period      time.Duration `mapstructure:"period_ms"`       // control loop period
	PowerSample time.Duration `mapstructure:"power_sample_ms"` // board power reading period
	PowerWindow time.Duration `mapstructure:"power_window_ms"` // moving average the power budget applies to
	// PowerSettle: readings this soon after a mode change are not judged (the INA3221
	// reports ~430 ms averages, so they still hold the previous mode).
	PowerSettle time.Duration `mapstructure:"power_settle_ms"`
	RateTau     time.Duration `mapstructure:"rate_tau_ms"`    // time constant of the arrival-rate EWMA
	RateWarmup  time.Duration `mapstructure:"rate_warmup_ms"` // measure arrivals this long before the first plan (rate auto)
	// RateLevelTau > 0: plans are made for the stream's level, the mean rate since it
	// began (or since the last drift), an EWMA with this time constant once it is
	// longer; 0 (the default): for the RateTau EWMA's reading, as before 2026-11-28.
	RateLevelTau time.Duration `mapstructure:"rate_level_tau_ms"`
	DriftRel     float64       `mapstructure:"drift_rel"`     // re-plan when the rate differs from the planned one by more than this…
	DriftHold    time.Duration `mapstructure:"drift_hold_ms"` // …for this long
	// PlanMargin: the step rules keep a stepped-to configuration's predicted latency
	// under budget·(1−PlanMargin). Plans themselves are decided by Confidence.
	PlanMargin float64 `mapstructure:"plan_margin"`
	// Confidence: a plan claims a configuration only when the probability that it meets
	// every budget, with the profiles' noise (NoiseRel, shrinking with repeats) and the
	// scheduler's admission room, is at least this (plan.Decider).
	Confidence float64 `mapstructure:"plan_confidence"`
	StepMargin float64 `mapstructure:"step_margin"` // a power step targets predicted power ≤ budget·(1−StepMargin)
	// StepMarginMin: failing any configuration there, the power step takes the best one
	// predicted ≤ budget·(1−StepMarginMin) before the lowest-power one (which pauses
	// training where nothing with training is that low). Equal to StepMargin: no second
	// tier.
	StepMarginMin float64       `mapstructure:"step_margin_min"`
	Hysteresis    float64       `mapstructure:"hysteresis"`  // step back up only while values stay below budget·(1−Hysteresis)…
	Hold          time.Duration `mapstructure:"hold_ms"`     // …for this long
	Cooldown      time.Duration `mapstructure:"cooldown_ms"` // least time between two steps
	// LatencyCooldown is the least time between latency steps: the latency window must
	// have forgotten what the previous configuration did (sched's recent window).
	LatencyCooldown time.Duration `mapstructure:"latency_cooldown_ms"`
	// LatencyPause is the latency rule's last resort (rule 4): a stream's p99 over its
	// budget with no stored configuration that has a shorter training turn or a smaller
	// batch pauses training for this long at the configuration in force, doubling when
	// the p99 breaks again soon after training resumed, up to ResearchBackoffMax times
	// it. LatencyPauseOff leaves training running there (the p99 stays broken).
	LatencyPause    time.Duration `mapstructure:"latency_pause_ms"`
	LatencyPauseOff bool          `mapstructure:"latency_pause_off"`
	// ServeAloneOff: a plan that pauses training because nothing meets the budgets with
	// it runs the decision's least-violating configuration as it is; by default, where
	// that one breaks a budget even alone, the controller runs the stored configuration
	// that serves the streams best alone within every budget instead (alone.go).
	ServeAloneOff bool          `mapstructure:"serve_alone_off"`
	PowerFail     time.Duration `mapstructure:"power_fail_ms"`       // no power reading this long: degraded
	MinLatency    int           `mapstructure:"min_latency_samples"` // served requests in the window before latency is judged
	MinProfiles   int           `mapstructure:"min_profiles"`        // fewer stored profiles than this: run the searcher
	Searcher      string        `mapstructure:"searcher"`            // "gmd" or "als"
	MaxProfiles   int           `mapstructure:"max_profiles"`        // searcher's profile budget (0: its default)
	// SearchTime bounds a live GMD search's time on the controller's clock: no profile
	// starts that would, at the mean profile time so far, end past it, and the plan is
	// made from what was measured, refinement's probes walking on from it (search.go,
	// searchTimeLeft: the pair's search with Refine's probes on only). SearchTimeOff: the
	// profiles alone bound it. ALS ignores it.
	SearchTime    time.Duration `mapstructure:"search_time_ms"`
	SearchTimeOff bool          `mapstructure:"search_time_off"`
	NoiseRel      float64       `mapstructure:"noise_rel"`     // relative profiling noise the searcher sizes margins from
	Events        int           `mapstructure:"events"`        // event ring size
	InferBatches  []int         `mapstructure:"infer_batches"` // batch sizes planned over (∩ what the worker serves)
	Live          LiveOptions   `mapstructure:"live"`
	// Refine: the live window pooled into the decision, trials of better-ranked
	// neighbours (refine.go).
	Refine RefineOptions `mapstructure:"refine"`
	// ExternalChange is what a mode change made outside fulcrumd leads to:
	// ExternalStandDown (default), ExternalReapply or ExternalAdopt (external.go).
	ExternalChange string `mapstructure:"external_change"`
	// ResearchHold: while training is paused because no known configuration meets the
	// budgets, or after a search failed, the controller searches again after this hold,
	// doubling with each re-search up to ResearchBackoffMax times it (research.go);
	// ResearchOff switches that off (the pause then lasts until a budget or rate changes).
	// A pause a budget or rate change brought is searched at once (research.go). While
	// training is paused the re-search is GMD's whichever the searcher; ResearchPausedALS
	// runs ALS's campaign instead (a failed search is retried with the configured
	// searcher): the campaign samples the whole space again, modes where inference
	// saturates included, and on the lifetime board that cost more latency than the
	// training it won (docs/benchmarks.md).
	ResearchHold       time.Duration `mapstructure:"research_hold_ms"`
	ResearchBackoffMax int           `mapstructure:"research_backoff_max"`
	ResearchOff        bool          `mapstructure:"research_off"`
	ResearchPausedALS  bool          `mapstructure:"research_paused_als"`
}

// DefaultConfig is what fulcrumd uses when the configuration says nothing.
func DefaultConfig() Config {
	return Config{
		Period: 250 * time.Millisecond, PowerSample: 100 * time.Millisecond, PowerWindow: time.Second, PowerSettle: 500 * time.Millisecond,
		RateTau: 2 * time.Second, RateWarmup: 2 * time.Second,
		DriftRel: 0.25, DriftHold: 3 * time.Second,
		PlanMargin: 0.05, StepMargin: 0.10, StepMarginMin: 0.05, Hysteresis: 0.10, Hold: 5 * time.Second,
		Cooldown: time.Second, LatencyCooldown: 5 * time.Second, LatencyPause: 20 * time.Second, PowerFail: time.Second,
		MinLatency: 20, MinProfiles: 3, Searcher: "gmd", NoiseRel: 0.03, Confidence: plan.DefaultConfidence, Events: 1000,
		InferBatches: plan.DefaultInferBatches(), ExternalChange: ExternalStandDown,
		ResearchHold: 50 * time.Second, ResearchBackoffMax: 16, SearchTime: 80 * time.Second,
		Refine: DefaultRefineOptions(),
	}
}
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	durs := []struct{ v, d *time.Duration }{
		{&c.Period, &d.Period}, {&c.PowerSample, &d.PowerSample}, {&c.PowerWindow, &d.PowerWindow}, {&c.PowerSettle, &d.PowerSettle},
		{&c.RateTau, &d.RateTau}, {&c.RateWarmup, &d.RateWarmup}, {&c.DriftHold, &d.DriftHold},
		{&c.Hold, &d.Hold}, {&c.Cooldown, &d.Cooldown}, {&c.LatencyCooldown, &d.LatencyCooldown}, {&c.LatencyPause, &d.LatencyPause},
		{&c.PowerFail, &d.PowerFail}, {&c.ResearchHold, &d.ResearchHold}, {&c.SearchTime, &d.SearchTime},
	}
	for _, x := range durs {
		if *x.v <= 0 {
			*x.v = *x.d
		}
	}
	minSet := c.StepMarginMin > 0
	flts := []struct{ v, d *float64 }{
		{&c.DriftRel, &d.DriftRel}, {&c.PlanMargin, &d.PlanMargin}, {&c.StepMargin, &d.StepMargin}, {&c.StepMarginMin, &d.StepMarginMin},
		{&c.Hysteresis, &d.Hysteresis}, {&c.NoiseRel, &d.NoiseRel}, {&c.Confidence, &d.Confidence},
	}
	for _, x := range flts {
		if *x.v <= 0 {
			*x.v = *x.d
		}
	}
	if !minSet && c.StepMarginMin > c.StepMargin {
		// A step_margin set below the default fallback's: no fallback, not an error.
		c.StepMarginMin = c.StepMargin
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
	if c.ExternalChange == "" {
		c.ExternalChange = d.ExternalChange
	}
	if c.ResearchBackoffMax <= 0 {
		c.ResearchBackoffMax = d.ResearchBackoffMax
	}
	c.Refine = c.Refine.withDefaults() // Enabled and Trials stay as given
	return c
}

// Choice is a configuration the controller applied or planned, with model v1's
// numbers for it: the mode, every stream's batch (Streams) and every training job's
// micro-batch (Train) — the pair's one stream and one job, or several.
type Choice struct {
	Mode      powermode.Mode `json:"mode"`
	Predicted Prediction     `json:"predicted"`
	// Streams is every stream's batch and figures, in the order planned for.
	Streams []StreamChoice `json:"streams,omitempty"`
	// Train is every training job's micro-batch, in the order planned for.
	Train []TrainChoice `json:"train,omitempty"`
}

// Batch is the first stream's batch (0: none): the pair's stream's, the first
// inference workload registered, as events and the control API's plan show it.
func (ch Choice) Batch() int {
	if len(ch.Streams) == 0 {
		return 0
	}
	return ch.Streams[0].Batch
}

// MicroBatch is the first training job's micro-batch (the pair's job's; 0: whole
// minibatches or, for a trainer that declared micro-batches, the scheduler's run-time
// choice).
func (ch Choice) MicroBatch() int {
	if len(ch.Train) == 0 {
		return 0
	}
	return ch.Train[0].MicroBatch
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
	// Targets are the operator's targets the controller starts with (the
	// configuration's; RestoreSettings may put saved run-time ones over them).
	Targets plan.Targets
	// SettingsPath is where run-time settings are saved (settings.go); empty: not saved.
	SettingsPath string
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
	// rooms: the learned admission rooms last reported as events (room.go).
	rooms roomWatch
	// micro: the micro-batch size last reported per training worker; microKeep: the
	// plan in force is infeasible by latency and training runs in micro-batches
	// (micro.go).
	micro     map[string]int
	microKeep bool
	// microSet: the micro-batch size set per training worker (applyMicro, keepMicro).
	microSet map[string]int
	// settings: the configuration's budgets and the saved run-time settings (settings.go);
	// loop: the control loop's heartbeat (health.go).
	settings *settingsState
	loop     loopBeat

	mu coopMutex // a sync.Mutex unless the clock is cooperative (coop.go)
	// targets are the operator's targets in force, shared and per workload (budgets.go):
	// the model's budgets and the scheduler's deadlines are made from them.
	targets plan.Targets
	pair    *Pair
	pairAt  time.Time
	cur     *Choice // applied
	stepped bool
	// stepFor is what the step-downs since the controller last left its plan stepped down
	// for: rule 6 waits for that constraint to clear its hysteresis band (reaction.go).
	stepFor  stepCause
	degraded string // reason, "" when not degraded
	applyErr error  // the last failed board Apply (nil after a success), for ApplyMode's answer
	// While the board refuses mode changes: the configuration decided but not in force,
	// how many writes in a row failed since when, and when the next retry is due
	// (backed off: retrying a refused write every step only floods the log).
	want           *Choice
	applyFails     int
	applyFailSince time.Time
	retryAt        time.Time

	// Several inference streams or training jobs (issue 19; streams.go): grp is nil
	// while one of each is registered (the pair above is then the whole plan).
	grp *group
	// meters: every planned stream's arrival rate (the pair's stream too), by workload;
	// a meter lives while its stream is planned for (forgetGone).
	meters map[string]*rateMeter
	// badPoint: (stream, mode, batch) that broke its stream's latency budget (rule 4;
	// the pair's stream too), left out of every decision until the budgets change.
	badPoint map[streamPoint]bool

	needPlan    string // reason a plan is due ("" none)
	job         bool   // a search is running
	jobMethod   string
	jobDone     sched.Event
	base        context.Context // ends when Run ends
	forceApply  bool            // the board's mode is not cur's (a search moved it)
	held        bool            // an operator-applied mode is held
	ext         *external       // another tool's change the controller stands down for (external.go)
	driftSince  time.Time
	belowSince  time.Time
	lastStep    time.Time
	lastLatStep time.Time
	// latPause is the latency rule's last resort in force (latpause.go).
	latPause  latencyPause
	upBack    upBackoff // rule 6's hold, doubled after step ups broken soon after (upbackoff.go)
	lastApply time.Time
	// corrP: measured/predicted power at the modes where the power budget broke (rule 2),
	// applied to every stored profile there.
	corrP map[powermode.Mode]float64
	// cfgSince is when the mode or a batch in force was last changed: latency is judged
	// only on requests served since (latencySettled). cfgDrain is the longest latency in
	// the recent window then: requests queued before the change are served after it,
	// within about that long.
	cfgSince   time.Time
	cfgDrain   time.Duration
	measured   Measured
	latCount   int
	live       LiveCounts
	lastSearch *search.Result
	violations map[string]uint64 // budget violations acted on, by budget
	heat       heatState         // temperatures, throttling and the thermal cap (heat.go)
	ref        refineState       // live refinement: evidence, confirmed point, trials (refine.go)

	research researchState // the controller's own re-searches and their back-off (research.go)

	declined []string // workloads whose workers all decline profile batches (decline.go)
	notices  []string // what the operator must act on, kept until restart (Notice)
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
	b := o.Targets.WithDefaults().Clone()
	if err := b.Validate(); err != nil {
		return nil, fmt.Errorf("control: budgets: %w", err)
	}
	cfg := o.Config.withDefaults()
	if search.CheckLive(cfg.Searcher) != nil {
		return nil, fmt.Errorf("control: searcher %q: want gmd or als", cfg.Searcher)
	}
	if !slices.Contains(ExternalPolicies, cfg.ExternalChange) {
		return nil, fmt.Errorf("control: external change policy %q: want one of %s", cfg.ExternalChange, strings.Join(ExternalPolicies, ", "))
	}
	c := &Controller{cfg: cfg, sched: o.Sched, board: o.Board, store: o.Store, clock: o.Clock, log: o.Log,
		presets: o.Presets, pnames: o.PresetNames, targets: b,
		base: context.Background(), violations: map[string]uint64{},
		power: NewPowerMonitor(10 * cfg.PowerWindow), corrP: map[powermode.Mode]float64{},
		settings: &settingsState{file: SettingsFile{Path: o.SettingsPath}, config: b.Clone()}}
	c.mu.co, _ = o.Clock.(sched.Coop)
	c.events = NewEventLog(cfg.Events, o.Clock.Now)
	if err := c.setDeadlines(b); err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	return c, nil
}
func msDur(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// Events is the controller's event log.
func (c *Controller) Events() *EventLog { return c.events }

// Config returns the effective configuration.
func (c *Controller) Config() Config { return c.cfg }

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
	declined := declinedOf(c.sched.Snapshot())
	c.mu.Lock()
	if c.pair == nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("optimize: %w", ErrNoPair)
	}
	c.noteDeclined(declined)
	if b := c.blocked(); len(b) > 0 {
		c.mu.Unlock()
		return nil, fmt.Errorf("optimize: %s: %w (no on_profile handler in their clients; set one, or profile offline with fulcrumctl profile)", strings.Join(b, ", "), ErrNoProfiles)
	}
	if c.job {
		c.mu.Unlock()
		return nil, fmt.Errorf("optimize: %w", ErrBusy)
	}
	done, out := c.startSearch(ctx, method, "optimize requested", maxProfiles)
	c.mu.Unlock()
	_ = done.Wait(context.Background()) // ctx ending cancels the search, which then returns promptly
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
	var sampled sched.Event // fired when the power sampler has stopped
	if c.board != nil {
		sampled = sched.NewEvent(c.clock)
		sched.Go(c.clock, func() {
			defer sampled.Fire()
			for c.sleep(ctx, c.cfg.PowerSample) {
				_ = c.power.Sample(ctx, c.board, c.clock.Now())
			}
		})
	}
	c.loop.start(c.clock.Now())
	for c.sleep(ctx, c.cfg.Period) {
		c.Step(ctx)
		c.persistSettings() // a held mode a step or a search let go of
		c.loop.beat(c.clock.Now())
	}
	c.loop.stop()
	if sampled != nil {
		_ = sampled.Wait(context.Background())
	}
	c.mu.Lock()
	done := c.jobDone
	c.mu.Unlock()
	if done != nil {
		_ = done.Wait(context.Background())
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
	e := sched.NewEvent(c.clock)
	t := c.clock.AfterFunc(d, e.Fire)
	if e.Wait(ctx) != nil {
		t.Stop()
		return false
	}
	return true
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
	// The micro-batch sizes the trainer declared (issue 32): profiled at every mode
	// and chosen by the decision with the mode and the batch.
	return &Pair{Train: tr.Workload, TrainBatch: tr.Batch, Infer: inf.Workload, Batches: batches, MicroBatches: declaredMicro(*tr)}, inf.ID
}
func samePair(a, b *Pair) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Train == b.Train && a.TrainBatch == b.TrainBatch && a.Infer == b.Infer && slices.Equal(a.Batches, b.Batches) &&
		slices.Equal(a.MicroBatches, b.MicroBatches)
}

// Step runs one control decision: update the measurements, then plan, step or
// re-plan as the rules say (docs/controller.md). Run calls it every Period.
func (c *Controller) Step(ctx context.Context) {
	snap := c.sched.Snapshot()
	now := c.clock.Now()
	pair, _ := c.pairOf(snap)
	grp := c.groupOf(snap)
	declined := declinedOf(snap)

	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.watchMicro() // after this step's decision, whichever way the step ends
	c.noteWorkers(snap, now, pair, grp, declined)
	pn, standDown := c.observeBoard(ctx, now)
	if standDown || c.pair == nil {
		return
	}
	c.observeStreams(snap, now)
	if c.holdDecisions(ctx, snap, now) {
		return
	}
	c.stepPlanned(ctx, snap, now, pn)
}

// noteWorkers takes in who is registered: a changed pair or group asks for a plan and
// forgets what was learned of the old one; declined profiles, learned admission rooms and
// micro-batch sizes are noted. Called with c.mu held.
func (c *Controller) noteWorkers(snap sched.Snapshot, now time.Time, pair *Pair, grp *group, declined []string) {
	if changed := !samePair(pair, c.pair); changed || !sameGroup(grp, c.grp) {
		if pair != nil {
			verb := "workers registered"
			if c.pair != nil {
				verb = "workers changed" // one joined or left: plan for the ones there now
			}
			c.needPlan = fmt.Sprintf("%s: training %s (batch %d), inference %s", verb, pair.Train, pair.TrainBatch, pair.Infer)
			if grp != nil {
				c.needPlan = verb + ": " + grp.String()
			}
			if changed {
				c.pairAt = now
			}
			c.refineReset() // what was learned live is of other workloads
		}
		c.pair, c.grp = pair, grp
		c.forgetGone(grp)
	}
	c.noteDeclined(declined)
	c.noteRooms(snap, now)
	c.noteMicro(snap)
}

// observeBoard reads the board's power and heat and watches for another tool's mode
// change; standDown reports that the controller stands down this step. pn is the number
// of power readings in the window. Called with c.mu held.
func (c *Controller) observeBoard(ctx context.Context, now time.Time) (pn int, standDown bool) {
	if c.board != nil {
		c.measured.PowerMW, pn = c.power.Average(now, c.cfg.PowerWindow)
		c.observeHeat(ctx, now)
		// Another tool's clock, core or EMC change (jetson_clocks, nvpmodel -m) is seen
		// within one period; standing down, nothing below writes a mode.
		if !c.job && c.watchExternal(ctx, now) {
			return pn, true
		}
	}
	return pn, false
}

// observeStreams updates every planned stream's arrival rate, and the pair's stream's
// recent p99 and its count. Called with c.mu held.
func (c *Controller) observeStreams(snap sched.Snapshot, now time.Time) {
	// Every stream's meter (EWMA of its request counter's slope), also while a search
	// runs: status shows these rates, and a meter left behind during a search showed a
	// rate from before it (issue 34).
	for _, s := range c.planned().Streams {
		if wl, ok := snap.Workload(proto.RoleInfer, s.Workload); ok {
			c.meter(s.Workload, now).observe(wl.Requests, now, c.cfg.RateWarmup, c.cfg.RateTau, c.cfg.RateLevelTau)
		}
	}
	if wl, ok := snap.Workload(proto.RoleInfer, c.pair.Infer); ok {
		c.measured.LatencyP99MS = wl.LatencyRecent.P99MS
		c.latCount = wl.LatencyRecent.Count
	}
	if m := c.meters[c.pair.Infer]; m != nil {
		c.measured.RateRPS = m.rate
	}
}

// holdDecisions reports whether nothing is decided this step beyond what it did itself:
// a profiling job runs, the board is degraded, a refused mode write waits for its retry
// (or is retried), or a re-search started. Called with c.mu held.
func (c *Controller) holdDecisions(ctx context.Context, snap sched.Snapshot, now time.Time) bool {
	if c.job {
		return true
	}
	if c.board != nil && c.checkDegraded(ctx, now) {
		return true
	}
	if c.want != nil && (c.needPlan == "" || now.Before(c.retryAt)) {
		// The board refused the last mode change: nothing else is decided until it
		// takes one (every decision would be another refused write), and the retry
		// waits out the back-off. A budget change re-plans at the next retry instead.
		if now.Before(c.retryAt) {
			return true
		}
		c.apply(ctx, *c.want)
		if c.want == nil {
			c.needPlan = "the board accepts mode changes again"
		}
		return true
	}
	// Training paused by an infeasible plan, or a failed search: search again after a
	// backed-off hold (research.go).
	return c.maybeResearch(snap, now)
}

// stepPlanned applies the control rules in order (docs/controller.md) to the workloads
// planned for, one training job and one inference stream (the pair) or several: live
// refinement, power broken, a plan asked for, the planned batches and micro-batches on
// new workers, a stream's latency broken, rate drift, back up after a step. Each rule is
// written once for any number of streams and jobs; the reaction to a broken budget
// (reaction.go) steps to a stored configuration — power: learn the correction at the mode
// in force and take the best predicted within the budget with every candidate scaled by
// the step's ratio; latency: leave the broken stream's point out and take a shorter
// training turn or a smaller batch, scaled by each stream's ratio for this step only —
// and after the hold below the budgets the decision is taken again and followed where it
// predicts more training. Called with c.mu held.
func (c *Controller) stepPlanned(ctx context.Context, snap sched.Snapshot, now time.Time, pn int) {
	rates, ready := c.streamRates(now) // Step has observed every stream's rate meter
	// Live refinement (every stream's rate): its windows, and a trial ended the moment
	// it breaks a budget.
	if c.refineStep(ctx, snap, now, rates) {
		return
	}
	// Power broken (judged on readings taken since the last change only): act now,
	// before anything else — also when a lowered budget is what broke it.
	if avg, over := c.powerOver(now); over {
		c.measured.PowerMW = avg
		c.violations["power"]++
		if strings.HasPrefix(c.needPlan, reasonBudgets) {
			c.needPlan = "" // the step is chosen against the new budgets; step_up re-plans later
		}
		c.stepDownPower(ctx)
		return
	}
	if c.needPlan != "" && ready {
		reason := c.needPlan
		c.needPlan = ""
		c.plan(ctx, reason, false)
		return
	}
	if c.cur == nil {
		return
	}
	c.keepBatches(snap) // a worker that (re)registered serves its stream's planned batch
	c.keepMicro(snap)   // and a trainer runs its job's planned micro-batch
	c.endLatencyPause(now)
	if c.latencyBroken(ctx, now) {
		return
	}
	if c.driftReplan(ctx, now) {
		return
	}
	c.maybeStepUp(ctx, now, pn)
}

// keepBatches sets the planned batch on every inference worker that serves another one
// (it registered or re-registered since the decision) and can serve the planned one.
// Called with c.mu held.
func (c *Controller) keepBatches(snap sched.Snapshot) {
	for _, w := range snap.Workers {
		if w.Role != proto.RoleInfer {
			continue
		}
		if want := c.batchFor(*c.cur, w.Workload); want > 0 && w.Batch != want && (len(w.BatchSizes) == 0 || slices.Contains(w.BatchSizes, want)) {
			if err := c.sched.SetInferBatch(w.ID, want); err != nil {
				c.log.Warn("set the planned inference batch on a new worker", "worker", w.ID, "err", err)
			}
		}
	}
}

// latencyBroken is the latency rule: a stream's recent p99 (the pair's, or each of
// several) over its own budget, judged on requests served since the configuration in
// force was applied, steps down (stepDownLatency). It reports whether it acted. Called
// with c.mu held.
func (c *Controller) latencyBroken(ctx context.Context, now time.Time) bool {
	if now.Sub(c.lastStep) < c.cfg.Cooldown || now.Sub(c.lastLatStep) < c.cfg.LatencyCooldown || !c.latencySettled(now) || c.latPause.active {
		return false
	}
	if !c.latencyOver() {
		return false
	}
	c.violations["latency"]++
	c.stepDownLatency(ctx)
	return true
}

// driftReplan is the drift rule: a stream whose rate is measured (no rate budget, its
// own or the shared one) and drifted beyond the meter's noise from the rate planned for,
// held for DriftHold, re-plans from the stored profiles. It reports whether it
// re-planned. Called with c.mu held.
func (c *Controller) driftReplan(ctx context.Context, now time.Time) bool {
	if c.held || c.targets.RateRPS > 0 {
		c.driftSince = time.Time{}
		return false
	}
	var drifted, names []string
	for _, s := range c.plannedRates() {
		if s.planned > 0 && !s.fixed && rateDrifted(s.rate, s.planned, c.cfg.DriftRel, c.cfg.RateTau, !c.driftSince.IsZero()) {
			drifted = append(drifted, fmt.Sprintf("%s from %.1f/s to %.1f/s", s.workload, s.planned, s.rate))
			names = append(names, s.workload)
		}
	}
	switch {
	case len(drifted) == 0:
		c.driftSince = time.Time{}
	case c.driftSince.IsZero():
		c.driftSince = now
	case now.Sub(c.driftSince) >= c.cfg.DriftHold:
		c.driftSince = time.Time{}
		for _, name := range names {
			c.meters[name].rebase(now, c.cfg.RateTau) // the plan below is made for the new rate
		}
		reason := fmt.Sprintf("arrival rate drifted: %s (over %.0f%% and %d σ of the meter's noise for %s)", strings.Join(drifted, ", "), c.cfg.DriftRel*100, driftZ, c.cfg.DriftHold)
		c.plan(ctx, reason, false)
		return true
	}
	return false
}

// plannedRate is one stream's measured rate against the rate the plan in force was
// made for; fixed: its rate is a budget, not measured.
type plannedRate struct {
	workload      string
	rate, planned float64
	fixed         bool
}

// plannedRates are the streams planned for with their rates. Called with c.mu held.
func (c *Controller) plannedRates() []plannedRate {
	var out []plannedRate
	for _, s := range c.planned().Streams {
		if m := c.meters[s.Workload]; m != nil {
			out = append(out, plannedRate{workload: s.Workload, rate: m.rate, planned: m.planned, fixed: c.targets.Streams[s.Workload].RateRPS > 0})
		}
	}
	return out
}

// powerOver reports the board's mean power since the configuration in force settled
// (over the last PowerWindow), and whether it breaks the power budget — judged once half
// a window of settled readings exists and the step cool-down has passed. Called with c.mu
// held.
func (c *Controller) powerOver(now time.Time) (avgMW float64, over bool) {
	settled := c.lastApply.Add(c.cfg.PowerSettle)
	if c.cur == nil || c.targets.PowerMW <= 0 || c.board == nil || now.Sub(settled) < c.cfg.PowerWindow/2 ||
		now.Sub(c.lastStep) < c.cfg.Cooldown {
		return 0, false
	}
	from := now.Add(-c.cfg.PowerWindow)
	if from.Before(settled) {
		from = settled
	}
	avg, n := c.power.Mean(from, now)
	return avg, n > 0 && avg > c.targets.PowerMW
}
