// Package lifetime runs fulcrumd on virtual time: its own scheduler, controller, live
// profiler, searchers, decision and bbolt store — built with daemon.DefaultOptions()
// through the daemon's own constructors — against a simulated board whose physics is
// stepped by the clock, with in-process simulated workers, for hours of virtual time in
// seconds, deterministically for a seed (docs/design.md §9, "The daemon on virtual
// time"; issue 30). fulcrumctl bench --lifetime scores its Results.
package lifetime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fulcrum-edge/fulcrum/configs"
	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/internal/paths"
	"github.com/fulcrum-edge/fulcrum/internal/stats"
	"github.com/fulcrum-edge/fulcrum/internal/vclock"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/powermode/tegra"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// Scenario is one lifetime run.
type Scenario struct {
	// Board is the catalog board (e.g. "agx-orin-64gb") whose simulated tree and physics
	// the run uses.
	Board string
	// Truth, when set, answers turn times and power from this table (docs/design.md §8;
	// every mode of Board's space the run reaches must have rows) instead of the
	// physics simulator's models, with the per-minibatch noise on times and the same
	// noise on each step's power; the board then starts at the table's highest clocks.
	// A batch the table skips between two of its batches (an inference batch of 3 the
	// scheduler grants with 3 requests queued, in a table of 1, 2, 4, 6, …) is their
	// linear interpolation (truth.Table.LookupBetween).
	// Board must still name the catalog board the table is of (its tree, presets, space).
	Truth *truth.Table
	// Train are the training workloads (one job each), e.g. {"resnet18-train"}.
	Train []string
	// Infer are the inference streams.
	Infer []Stream
	// PowerBudgetMW is the power budget the operator sets at start; 0: none.
	PowerBudgetMW float64
	// Searcher is "gmd" or "als" (the controller's searcher), or "preset": the board
	// held at its default nvpmodel preset, the controller not running (no search, no
	// steps; the scheduler still interleaves within the latency budget).
	Searcher string
	// Duration is the virtual time run.
	Duration time.Duration
	// Seed seeds the workers' noise and arrivals.
	Seed int64
	// Tail gives the workers heavy-tailed turn times: "" or "none" (none), or
	// "pytorch-cpu" (internal/tailmodel's fit to real PyTorch on a CPU, training's for the
	// trainers, inference's for the streams): with its probability a turn runs the tail's
	// ratio × longer, on top of NoiseFrac (the body), from a seeded generator of its own —
	// as fulcrumctl sim worker --tail does on real time.
	Tail string
	// MicroBatches makes every training worker declare micro-batches (issue 32,
	// docs/runtime.md "Micro-batched training turns"). Without Truth: the divisors of its
	// minibatch down to an eighth of it (32: 4, 8 and 16; k ≤ 8 turns a minibatch, the
	// smallest a BatchNorm network trains well with), a turn timed by the model's batch
	// curve at that size. With Truth: the micro-batch sizes the table has micro_batch rows
	// for at every mode with the workload's minibatch row (what bench's oracles choose
	// among), a turn's time and power that row's. A grant's micro_batch then runs that
	// many samples, and the minibatch counts once, after its last turn. False: none
	// declared, k = 1.
	MicroBatches bool
	// MicroTrain, with MicroBatches, names the training workloads that declare them
	// (the others declare none, k = 1); nil: every one.
	MicroTrain []string
	// NoiseFrac is the per-minibatch noise (log-normal sigma); 0 takes 0.03.
	NoiseFrac float64
	// Configure, when set, changes fulcrumd's options after daemon.DefaultOptions() and
	// before anything is built from them (e.g. the scheduler's learned admission room,
	// o.Server.Sched.RoomMaxFrac): the runs of a comparison differ only there.
	Configure func(o *daemon.Options)
	// Changes happen mid-run, in order of At.
	Changes []Change
	// Log receives fulcrumd's logs (nil: discarded).
	Log *slog.Logger
	// BoardInterval is the physics step of the simulated board; 0 takes
	// DefaultBoardInterval. Each step's power is the time-weighted mean of what ran
	// during it (an INA3221 averages ~430 ms), so a step longer than the real-time
	// simulator's 100 ms loses no busy time, only detail within the step.
	BoardInterval time.Duration
	// Stored are profiles in the store before fulcrumd opens it (what an earlier
	// search left; nil: an empty store).
	Stored []store.Profile
	// Probes look at the daemon mid-run (probe.go).
	Probes []Probe
}

// DefaultBoardInterval is the simulated board's physics step on virtual time: each
// step rewrites the tree's sensor files, the run's largest cost (docs/benchmarks.md).
const DefaultBoardInterval = 500 * time.Millisecond

// Stream is one inference stream: Poisson arrivals at RateRPS, each request answered
// within LatencyMS (the stream's budget on its p99; 0: fulcrumd's default budget).
type Stream struct {
	Workload  string
	RateRPS   float64
	LatencyMS float64
}

// Change is a mid-run change at At (virtual time since start); zero fields change
// nothing.
type Change struct {
	At time.Duration
	// RateFactor multiplies every stream's nominal rate from At on (2: the rate doubles).
	RateFactor float64
	// PowerBudgetMW sets the power budget (< 0: none).
	PowerBudgetMW float64
	// LatencyMS sets every stream's latency budget.
	LatencyMS float64
}

// StreamResult is what one inference stream saw.
type StreamResult struct {
	Workload  string  `json:"workload"`
	RateRPS   float64 `json:"rate_rps"`   // nominal (before Changes)
	LatencyMS float64 `json:"latency_ms"` // the budget at the end
	Requests  int     `json:"requests"`
	Served    int     `json:"served"`
	Refused   int     `json:"refused"` // rate_limited by the scheduler's admission
	Late      int     `json:"late"`    // served after the budget in force when served
	// P99MS is the p99 of every served request's latency (arrival → release) over the
	// run; P99AfterPlanMS of those that arrived after the first plan was applied (0: no
	// plan, or none served since).
	P99MS          float64 `json:"p99_ms"`
	P99AfterPlanMS float64 `json:"p99_after_plan_ms"`
	// ServedAfterPlan and LateAfterPlan count the requests behind P99AfterPlanMS and
	// those of them served after the budget in force when they were served (the
	// fraction a p99 budget allows is 1 %).
	ServedAfterPlan int `json:"served_after_plan"`
	LateAfterPlan   int `json:"late_after_plan"`
}

// Result is what a run did.
type Result struct {
	// Events is the controller's event log, in order (determinism is checked on it);
	// the run's temporary directory reads RunDir in their text.
	Events []control.Event `json:"events"`
	// TrainSamples are the samples trained, by training workload.
	TrainSamples map[string]float64 `json:"train_samples"`
	// TrainMinibatches are the minibatches trained, by training workload (a minibatch
	// run as micro-batches counts once, after its last turn); MicroTurns the training
	// turns that ran a micro-batch (Scenario.MicroBatches).
	TrainMinibatches map[string]int `json:"train_minibatches"`
	MicroTurns       int            `json:"micro_turns,omitempty"`
	// TrainSamplesAfterPlan are the samples trained after the first plan was applied,
	// by training workload: what training gets once the controller decided (a paused
	// job's stays 0).
	TrainSamplesAfterPlan map[string]float64 `json:"train_samples_after_plan"`
	// PhaseSamples are the samples trained, summed over the jobs, in each stretch between
	// the scenario's changes (PhaseBounds): what each budget or rate phase got. Absent
	// without changes inside the run.
	PhaseSamples []float64 `json:"phase_samples,omitempty"`
	// FirstPlanS is when the first plan was applied (s since start); -1: never.
	FirstPlanS float64 `json:"first_plan_s"`
	// ProfilesTaken counts profile runs measured live (control.LiveCounts.Profiled) and
	// ProfileBatches the profile batches the workers ran.
	ProfilesTaken  int `json:"profiles_taken"`
	ProfileBatches int `json:"profile_batches"`
	// SearchS is the time training was paused while a search ran (the live profiler
	// measuring modes): what searches cost training. TrainPausedS is the time training
	// was paused for any reason (searches, and the controller's guard when no known
	// configuration meets the budgets with training). Both sampled every second, as
	// LatencyBrokenS.
	SearchS      float64 `json:"search_s"`
	TrainPausedS float64 `json:"train_paused_s"`
	// LatencyBrokenS is the time any stream's recent p99 window (the scheduler's, with at
	// least controller.min_latency_samples requests in it) was over its budget, sampled
	// every second, or (after the first plan) the same window's requests that arrived
	// after the plan were (LatencyBrokenAfterPlanS); PowerBrokenS the time the board's
	// 1 s average power (the physics' own, every board step) was over the power budget.
	LatencyBrokenS float64 `json:"latency_broken_s"`
	PowerBrokenS   float64 `json:"power_broken_s"`
	// LatencyBrokenAfterPlanS and PowerBrokenAfterPlanS are the part of those after the
	// first plan was applied (seen by the next second's sample): what the plans broke,
	// the first search's own profiling left out. A latency second counts there when the
	// recent window's requests that arrived after the plan break the window's rule (p99
	// over the budget, at least min_latency_samples of them): the late requests of the
	// search's profile turns, released after the plan, stay in the scheduler's window for
	// its 5 s but are the search's (they count in LatencyBrokenS only).
	LatencyBrokenAfterPlanS float64 `json:"latency_broken_after_plan_s"`
	PowerBrokenAfterPlanS   float64 `json:"power_broken_after_plan_s"`
	// HoldExpired counts turns fulcrumd took back past the scheduler's hold limit (a
	// heavy-tailed turn can run past it: Scenario.Tail); the worker then registers
	// again, as a real one reconnects.
	HoldExpired int `json:"hold_expired"`
	// MeanPowerMW is the board's mean power over the run.
	MeanPowerMW float64 `json:"mean_power_mw"`
	// PowerOneSecond spreads the board's 1 s average power (the power budget's reading)
	// over the run: at one configuration held (preset) it is how far above its mean
	// draw a second goes, which a configuration must stay under the budget by to keep it.
	PowerOneSecond Spread         `json:"power_one_second"`
	Streams        []StreamResult `json:"streams"`
	// FinalMode is the mode the board ran at the end.
	FinalMode powermode.Mode `json:"final_mode"`
	// Turns is the scheduler's turn count; DurationS the virtual time run.
	Turns     uint64  `json:"turns"`
	DurationS float64 `json:"duration_s"`
}

// Spread summarises a series: its mean, sample standard deviation, 99.5th percentile
// (nearest rank, internal/stats) and maximum.
type Spread struct {
	MeanMW   float64 `json:"mean_mw"`
	StdDevMW float64 `json:"stddev_mw"`
	P995MW   float64 `json:"p99_5_mw"`
	MaxMW    float64 `json:"max_mw"`
}

func spreadOf(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	m, sd := stats.MeanStddev(xs)
	c := slices.Clone(xs)
	slices.Sort(c)
	return Spread{MeanMW: m, StdDevMW: sd, P995MW: stats.Quantile(c, 0.995), MaxMW: c[len(c)-1]}
}

// harness is one run's state. Everything in it is touched by one thing at a time: the
// virtual clock's driver or the participant holding the turn.
type harness struct {
	sc         Scenario
	clock      *vclock.Clock
	sched      *sched.Scheduler
	ctl        *control.Controller
	gpu        *gpu
	board      *sim.Board
	files      *stepCache
	dir        string // the run's temporary directory
	trainers   []*worker
	streams    []*worker
	rateFactor float64
	powerMW    float64 // the power budget in force (0: none)
	minLatency int
	recent     time.Duration // the scheduler's recent latency window (sched.Config.RecentWindow)
	stopped    bool
	planned    bool      // a plan was applied (an apply event with a mode, no error)
	planAt     time.Time // when the first one was (its event's time)
	err        error

	events   []control.Event
	lastSeq  uint64
	window   []float64    // the last second of board power readings
	store    *store.Store // fulcrumd's profile store (Instant.Profiles)
	powerSum float64
	steps    int
	res      Result
	// oneSecond is the board's 1 s average power at every physics step once a second
	// of readings exists (Result.PowerOneSecond).
	oneSecond []float64
}

func (h *harness) fail(err error) {
	if h.err == nil {
		h.err = err
	}
}

// Run runs sc and returns what happened. The run's files (simulated tree, state
// directory, bbolt store) live in a temporary directory removed at the end.
func Run(ctx context.Context, sc Scenario) (Result, error) {
	if sc.Duration <= 0 {
		return Result{}, errors.New("lifetime: Duration must be positive")
	}
	if len(sc.Train) == 0 || len(sc.Infer) == 0 {
		return Result{}, errors.New("lifetime: a scenario needs at least one training workload and one inference stream")
	}
	if !slices.Contains([]string{"gmd", "als", "preset"}, sc.Searcher) {
		return Result{}, fmt.Errorf("lifetime: searcher %q: want gmd, als or preset", sc.Searcher)
	}
	if _, err := newTail(sc.Tail, proto.RoleTrain, 0, 0); err != nil {
		return Result{}, err
	}
	sc.NoiseFrac = cmp.Or(sc.NoiseFrac, 0.03)
	sc.BoardInterval = cmp.Or(sc.BoardInterval, DefaultBoardInterval)
	if sc.Log == nil {
		sc.Log = slog.New(slog.DiscardHandler)
	}
	cat, err := powermode.LoadCatalog(configs.FS, "boards")
	if err != nil {
		return Result{}, fmt.Errorf("lifetime: %w", err)
	}
	spec, err := cat.Board(sc.Board)
	if err != nil {
		return Result{}, fmt.Errorf("lifetime: %w", err)
	}
	models, err := sim.LoadWorkloads(configs.FS, "workloads")
	if err != nil {
		return Result{}, fmt.Errorf("lifetime: %w", err)
	}
	if sc.Truth != nil {
		// The table's workloads, with the models' where they exist (their power breakdown
		// is scaled to the table's; a workload the models lack draws a generic busy GPU).
		models = truthWorkloads(sc.Truth, models)
	}
	for _, n := range sc.Train {
		if w, ok := models[n]; !ok || w.Role != truth.Train {
			return Result{}, fmt.Errorf("lifetime: %q is not a training workload of %s", n, workloadSource(sc.Truth))
		}
	}
	for _, s := range sc.Infer {
		if w, ok := models[s.Workload]; !ok || w.Role != truth.Infer {
			return Result{}, fmt.Errorf("lifetime: %q is not an inference workload of %s", s.Workload, workloadSource(sc.Truth))
		}
		if s.RateRPS <= 0 {
			return Result{}, fmt.Errorf("lifetime: stream %s: rate %g req/s must be positive", s.Workload, s.RateRPS)
		}
	}
	// The simulated tree is real files, rewritten at every physics step: on tmpfs where
	// there is one.
	tmp := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		tmp = "/dev/shm"
	}
	dir, err := os.MkdirTemp(tmp, "fulcrum-lifetime-")
	if err != nil {
		dir, err = os.MkdirTemp("", "fulcrum-lifetime-")
	}
	if err != nil {
		return Result{}, fmt.Errorf("lifetime: %w", err)
	}
	defer os.RemoveAll(dir)
	root, state := filepath.Join(dir, "board"), filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o755); err != nil {
		return Result{}, fmt.Errorf("lifetime: %w", err)
	}

	clock := vclock.New(0)
	h := &harness{sc: sc, clock: clock, rateFactor: 1, powerMW: sc.PowerBudgetMW, dir: dir}
	h.gpu = &gpu{now: clock.Now, lastStep: clock.Now(), hw: sim.HardwareFor(spec), stale: true, tau: map[tauKey]float64{}, truth: sc.Truth}
	simOpts := sim.Options{Workloads: models, Interval: sc.BoardInterval, Logger: sc.Log.With("component", "sim"), Activities: h.gpu.activities}
	if sc.Truth != nil {
		prng := rand.New(rand.NewPCG(uint64(sc.Seed), 300))
		simOpts.PowerMW = func(m powermode.Mode, a sim.Activity) (float64, bool) {
			w, ok := models[a.Workload]
			if !ok {
				return 0, false
			}
			r, ok := sc.Truth.LookupBetween(truthKey(w, truth.Role(a.Role), m, a.Batch))
			if !ok {
				return 0, false
			}
			return r.PowerMW * sim.NoisyFactor(prng, sc.NoiseFrac), true
		}
	}
	h.board, err = sim.New(root, spec, simOpts)
	if err != nil {
		return Result{}, fmt.Errorf("lifetime: %w", err)
	}
	h.files = newStepCache(root)
	h.board.Tree().SetInPlace(h.files.written) // the physics and its readers take turns
	if h.gpu.runner, err = sim.NewRunner(root, spec); err != nil {
		return Result{}, fmt.Errorf("lifetime: %w", err)
	}

	// fulcrumd as it starts with its defaults, on this board and clock.
	o := daemon.DefaultOptions()
	if sc.Configure != nil {
		sc.Configure(&o)
	}
	o.StateDir, o.Board, o.BoardRoot, o.Clock, o.Log = state, "sim:"+spec.Name, root, clock, sc.Log
	if sc.Searcher != "preset" {
		o.Control.Searcher = sc.Searcher
	}
	o.Targets.PowerMW = sc.PowerBudgetMW
	latMax := 0.0
	for _, s := range sc.Infer {
		latMax = max(latMax, s.LatencyMS)
	}
	if latMax > 0 {
		o.Targets.LatencyMS = sc.Infer[0].LatencyMS
		if len(sc.Infer) > 1 {
			o.Targets.LatencyMS = latMax
		}
	}
	h.minLatency = o.Control.MinLatency
	h.recent = o.Server.Sched.RecentWindow
	b, err := daemon.OpenBoardWith(ctx, o.Board, root, state, sc.Log, tegra.Options{Now: clock.Now, FS: h.files})
	if err != nil {
		return Result{}, fmt.Errorf("lifetime: %w", err)
	}
	defer b.Close(context.Background())
	wb := &watchedBackend{Backend: b.Backend, g: h.gpu}
	if sc.Truth != nil {
		if wb.space, err = sc.Truth.Space(); err != nil {
			return Result{}, fmt.Errorf("lifetime: the truth table's modes: %w", err)
		}
	}
	b.Backend = wb
	// The board boots at its nvpmodel default preset (a truth table's: its highest clocks).
	start0 := defaultMode(spec)
	if sc.Truth != nil {
		start0 = highestClocks(sc.Truth)
	}
	if err := b.Backend.Apply(ctx, start0); err != nil {
		return Result{}, fmt.Errorf("lifetime: set the default preset: %w", err)
	}
	db := filepath.Join(state, paths.StoreName)
	st, err := store.Open(db, store.Options{Timeout: o.StoreTimeout, Verify: true})
	if err != nil {
		return Result{}, fmt.Errorf("lifetime: %w", err)
	}
	defer st.Close()
	h.store = st
	if err := putStored(st, sc.Stored); err != nil {
		return Result{}, fmt.Errorf("lifetime: %w", err)
	}
	h.sched = sched.New(o.Server.Sched, clock, sc.Log.With("component", "sched"))
	defer h.sched.Close()
	h.ctl, err = daemon.NewController(ctx, o, h.sched, b, st, db)
	if err != nil {
		return Result{}, fmt.Errorf("lifetime: %w", err)
	}
	for _, s := range sc.Infer {
		if s.LatencyMS > 0 && len(sc.Infer) > 1 {
			if err := h.ctl.SetStreamTarget(s.Workload, control.StreamTarget{LatencyMS: s.LatencyMS}, nil); err != nil {
				return Result{}, fmt.Errorf("lifetime: stream %s: %w", s.Workload, err)
			}
		}
	}

	// Workers register, the streams start.
	for i, n := range sc.Train {
		w := models[n]
		var micro []int
		declares := sc.MicroBatches && (sc.MicroTrain == nil || slices.Contains(sc.MicroTrain, n))
		switch {
		case declares && sc.Truth != nil:
			micro = truthMicroSizes(sc.Truth, n, w.Batch)
		case declares:
			micro = microSizes(w.Batch)
		}
		wk, err := h.register(proto.RoleTrain, w, w.Batch, nil, micro, uint64(100+i))
		if err != nil {
			return Result{}, fmt.Errorf("lifetime: %w", err)
		}
		h.trainers = append(h.trainers, wk)
	}
	for i, s := range sc.Infer {
		w := models[s.Workload]
		wk, err := h.register(proto.RoleInfer, w, 1, w.BatchSizes(), nil, uint64(200+i))
		if err != nil {
			return Result{}, fmt.Errorf("lifetime: %w", err)
		}
		wk.stream, wk.rateRPS = i, s.RateRPS
		wk.budget = time.Duration(cmp.Or(s.LatencyMS, o.Targets.LatencyMS) * float64(time.Millisecond))
		h.streams = append(h.streams, wk)
	}
	for _, wk := range h.trainers {
		wk.acquire()
	}
	for _, wk := range h.streams {
		wk.acquire()
		wk.scheduleArrival()
	}
	for _, ch := range sc.Changes {
		h.clock.AfterFunc(ch.At, func() { h.change(ctx, ch) })
	}
	h.startProbes()
	h.stepBoard()
	h.clock.AfterFunc(time.Second, h.sample)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if sc.Searcher != "preset" {
		clock.Go(func() { _ = h.ctl.Run(runCtx) })
	}
	start := clock.Now()
	end := start.Add(sc.Duration)
	for now := start; now.Before(end) && h.err == nil; {
		now = minTime(now.Add(time.Minute), end)
		if err := clock.RunUntil(now); err != nil {
			return Result{}, fmt.Errorf("lifetime: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return Result{}, fmt.Errorf("lifetime: %w", err)
		}
	}
	h.collect(start) // before the shutdown below moves anything
	cancel()
	if err := clock.Settle(time.Minute); err != nil {
		return Result{}, fmt.Errorf("lifetime: stopping the controller: %w", err)
	}
	h.stopped = true
	h.pollEvents()
	h.res.Events = h.events
	if sc.Searcher != "preset" {
		h.res.ProfilesTaken = h.ctl.Status().Live.Profiled
	}
	if h.err != nil {
		return h.res, fmt.Errorf("lifetime: %w", h.err)
	}
	return h.res, nil
}

// truthWorkloads are the table's workloads as simulator workloads: the model's where
// configs/workloads has one of the same name and role, else a bare one (name, role,
// batch); batch sizes are the table's.
func truthWorkloads(t *truth.Table, models map[string]*sim.Workload) map[string]*sim.Workload {
	out := map[string]*sim.Workload{}
	for _, role := range []truth.Role{truth.Train, truth.Infer} {
		for _, n := range t.Workloads(role) {
			bs := t.Batches(n, role)
			if len(bs) == 0 {
				continue
			}
			w := &sim.Workload{Name: n, Role: role, Batch: bs[0]}
			if m, ok := models[n]; ok && m.Role == role {
				c := *m
				w = &c
			}
			if role == truth.Train && !slices.Contains(bs, w.Batch) {
				w.Batch = bs[0]
			}
			w.Batches = bs
			out[n] = w
		}
	}
	return out
}

func workloadSource(t *truth.Table) string {
	if t != nil {
		return "the truth table"
	}
	return "configs/workloads"
}

// highestClocks is the table's mode with the highest GPU, then CPU, then EMC clock, then
// the most cores.
func highestClocks(t *truth.Table) powermode.Mode {
	var best powermode.Mode
	for _, m := range t.Modes() {
		if m.GPUHz > best.GPUHz || m.GPUHz == best.GPUHz && (m.CPUKHz > best.CPUKHz || m.CPUKHz == best.CPUKHz &&
			(m.EMCHz > best.EMCHz || m.EMCHz == best.EMCHz && m.Cores > best.Cores)) {
			best = m
		}
	}
	return best
}

// defaultMode is the board's nvpmodel default preset, snapped to its space.
func defaultMode(spec *powermode.BoardSpec) powermode.Mode {
	sp, err := spec.Space()
	for _, p := range spec.NVP.Presets {
		if p.ID == spec.NVP.Default {
			m := spec.PresetMode(p)
			if err == nil {
				m = sp.Snap(m)
			}
			return m
		}
	}
	m := spec.PresetMode(powermode.PresetSpec{})
	if err == nil {
		m = sp.Snap(m)
	}
	return m
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// stepBoard advances the physics one step and sets the next; it also keeps the board's
// 1 s power average for PowerBrokenS.
func (h *harness) stepBoard() {
	if h.stopped {
		return
	}
	r, err := h.board.Step(h.clock.Now())
	if err != nil {
		h.fail(fmt.Errorf("simulated board step: %w", err))
		return
	}
	iv := h.board.Interval()
	n := max(int(time.Second/iv), 1)
	h.window = append(h.window, r.TotalMW)
	if len(h.window) > n {
		h.window = h.window[1:]
	}
	h.powerSum += r.TotalMW
	h.steps++
	if len(h.window) == n {
		sum := 0.0
		for _, v := range h.window {
			sum += v
		}
		avg := sum / float64(n)
		h.oneSecond = append(h.oneSecond, avg)
		if h.powerMW > 0 && avg > h.powerMW {
			h.res.PowerBrokenS += iv.Seconds()
			if h.planned {
				h.res.PowerBrokenAfterPlanS += iv.Seconds()
			}
		}
	}
	h.clock.AfterFunc(iv, h.stepBoard)
}

// sample runs every second: the scheduler's recent latency windows against each
// stream's budget, and the controller's new events.
func (h *harness) sample() {
	if h.stopped {
		return
	}
	snap := h.sched.Snapshot()
	if snap.TrainingPaused {
		h.res.TrainPausedS++
		if h.sc.Searcher != "preset" {
			// Searching takes the controller's lock: asked from a participant, which may
			// park on it (a timer callback may not).
			h.clock.Go(func() {
				if h.ctl.Searching() != "" {
					h.res.SearchS++
				}
			})
		}
	}
	broken, brokenAfterPlan := false, false
	for _, wk := range h.streams {
		budgetMS := float64(wk.budget) / float64(time.Millisecond)
		if wl, ok := snap.Workload(proto.RoleInfer, wk.w.Name); ok {
			r := wl.LatencyRecent
			broken = broken || r.Count >= h.minLatency && r.P99MS > budgetMS
		}
		if h.planned && wk.recentAfterPlanBroken(h.clock.Now(), h.recent, h.planAt, h.minLatency, budgetMS) {
			brokenAfterPlan = true
		}
	}
	if broken || brokenAfterPlan {
		h.res.LatencyBrokenS++
	}
	if brokenAfterPlan {
		h.res.LatencyBrokenAfterPlanS++
	}
	h.pollEvents()
	h.clock.AfterFunc(time.Second, h.sample)
}

// RunDir stands for the run's temporary directory in the events' text.
const RunDir = "<run>"

// pollEvents copies the controller's events added since the last poll (its log is a
// ring; a second holds far fewer than its size).
func (h *harness) pollEvents() {
	for _, e := range h.ctl.Events().List(h.lastSeq) {
		if e.Seq > h.lastSeq {
			// The run's temporary directory differs from run to run; the log must not.
			e.Reason = strings.ReplaceAll(e.Reason, h.dir, RunDir)
			e.Err = strings.ReplaceAll(e.Err, h.dir, RunDir)
			if !h.planned && e.Kind == control.KindApply && e.Err == "" && e.Mode != nil {
				h.planned, h.planAt = true, e.Time
			}
			h.events = append(h.events, e)
			h.lastSeq = e.Seq
		}
	}
}

// change applies a scenario change: rates at once, budgets through the controller as
// the operator's fulcrumctl budget set would (in a participant: it takes the
// controller's lock).
func (h *harness) change(ctx context.Context, ch Change) {
	if ch.RateFactor > 0 {
		h.rateFactor = ch.RateFactor
	}
	if ch.LatencyMS > 0 {
		for _, wk := range h.streams {
			wk.budget = time.Duration(ch.LatencyMS * float64(time.Millisecond))
		}
	}
	if ch.PowerBudgetMW != 0 {
		h.powerMW = max(ch.PowerBudgetMW, 0)
	}
	if ch.PowerBudgetMW == 0 && ch.LatencyMS == 0 {
		return
	}
	h.clock.Go(func() {
		b := h.ctl.Targets().Shared()
		if ch.PowerBudgetMW != 0 {
			b.PowerMW = max(ch.PowerBudgetMW, 0)
		}
		if ch.LatencyMS > 0 {
			b.LatencyMS = ch.LatencyMS
			if len(h.streams) > 1 {
				for _, wk := range h.streams {
					if err := h.ctl.SetStreamTarget(wk.w.Name, control.StreamTarget{LatencyMS: ch.LatencyMS}, nil); err != nil {
						h.fail(fmt.Errorf("change at %s: %w", ch.At, err))
					}
				}
			}
		}
		if h.sc.Searcher == "preset" {
			h.sched.SetLatencyBudget(time.Duration(b.LatencyMS * float64(time.Millisecond)))
			return
		}
		if err := h.ctl.SetTargets(b); err != nil {
			h.fail(fmt.Errorf("change at %s: set budgets: %w", ch.At, err))
		}
	})
}

// PhaseBounds are the times, from the run's start, at which the run's stretches of
// constant budgets and rates start after the first: every change's At inside (0, dur),
// sorted, each once (Result.PhaseSamples).
func PhaseBounds(changes []Change, dur time.Duration) []time.Duration {
	var out []time.Duration
	for _, c := range changes {
		if c.At > 0 && c.At < dur {
			out = append(out, c.At)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// collect fills the run's figures at its end.
func (h *harness) collect(start time.Time) {
	now := h.clock.Now()
	h.pollEvents()
	h.res.DurationS = now.Sub(start).Seconds()
	h.res.FirstPlanS = -1
	for _, e := range h.events {
		if e.Kind == control.KindApply && e.Err == "" && e.Mode != nil {
			h.res.FirstPlanS = e.Time.Sub(start).Seconds()
			break
		}
	}
	h.res.TrainSamples, h.res.TrainMinibatches, h.res.TrainSamplesAfterPlan = map[string]float64{}, map[string]int{}, map[string]float64{}
	for _, wk := range h.trainers {
		h.res.TrainSamples[wk.w.Name] += wk.samples
		h.res.TrainMinibatches[wk.w.Name] += wk.batches
		h.res.MicroTurns += wk.microTurns
		if h.res.FirstPlanS >= 0 {
			planAt := start.Add(time.Duration(h.res.FirstPlanS * float64(time.Second)))
			n := 0.0
			for _, tt := range wk.trained {
				if tt.at.After(planAt) {
					n += float64(tt.samples)
				}
			}
			h.res.TrainSamplesAfterPlan[wk.w.Name] += n
		}
		h.res.ProfileBatches += wk.profiles
	}
	if bounds := PhaseBounds(h.sc.Changes, h.sc.Duration); len(bounds) > 0 {
		h.res.PhaseSamples = make([]float64, len(bounds)+1)
		for _, wk := range h.trainers {
			for _, tt := range wk.trained {
				i, _ := slices.BinarySearch(bounds, tt.at.Sub(start)) // a turn ending on a bound is the earlier stretch's
				h.res.PhaseSamples[i] += float64(tt.samples)
			}
		}
	}
	for i, wk := range h.streams {
		h.res.ProfileBatches += wk.profiles
		lat := slices.Clone(wk.latMS)
		slices.Sort(lat)
		sr := StreamResult{Workload: wk.w.Name, RateRPS: h.sc.Infer[i].RateRPS, LatencyMS: float64(wk.budget) / float64(time.Millisecond),
			Requests: wk.requests, Served: len(lat), Refused: wk.refused, Late: wk.late}
		if len(lat) > 0 {
			sr.P99MS = stats.Quantile(lat, 0.99)
		}
		if h.res.FirstPlanS >= 0 {
			planAt := start.Add(time.Duration(h.res.FirstPlanS * float64(time.Second)))
			var after []float64
			for j, at := range wk.latAt {
				if at.After(planAt) {
					after = append(after, wk.latMS[j])
					if wk.latLate[j] { // against the budget it was served under (a tour moves it)
						sr.LateAfterPlan++
					}
				}
			}
			sr.ServedAfterPlan = len(after)
			slices.Sort(after)
			if len(after) > 0 {
				sr.P99AfterPlanMS = stats.Quantile(after, 0.99)
			}
		}
		h.res.Streams = append(h.res.Streams, sr)
	}
	if h.steps > 0 {
		h.res.MeanPowerMW = h.powerSum / float64(h.steps)
	}
	h.res.PowerOneSecond = spreadOf(h.oneSecond)
	h.res.Turns = h.sched.Snapshot().Turns
	if m, err := h.gpu.clocks(); err == nil {
		h.res.FinalMode = m
	}
}
