package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"gonum.org/v1/gonum/stat"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/truthprof"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/search"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// The lifetime benchmark (issue 30): every configuration of the sweep run for a lifetime
// of virtual time by the whole daemon (fulcrum/lifetime), each method scored on the
// training it did against what the truth's best room-keeping configuration would have
// done over the same time (docs/benchmarks.md "Lifetime benchmark").
//
// bench does not import the harness: the command hands RunLifetime a LifeRunner that
// calls lifetime.Run, so bench stays free of the daemon's packages (and of an import
// cycle should the harness use bench's truth replay) and its scoring is testable alone.

// LifeStream is one inference stream of a lifetime run.
type LifeStream struct {
	Workload  string  `json:"workload"`
	RateRPS   float64 `json:"rate_rps"`
	LatencyMS float64 `json:"latency_ms"`
}

// LifeChange is a change of the budgets or the load during a run, at At from its start.
// Zero fields leave that quantity as it is.
type LifeChange struct {
	At time.Duration `json:"-"`
	// AtS is At in seconds, for the JSON.
	AtS float64 `json:"at_s"`
	// RateFactor multiplies every stream's configured (t = 0) arrival rate.
	RateFactor float64 `json:"rate_factor,omitempty"`
	// PowerMW is the new power budget; LatencyMS every stream's new latency budget.
	PowerMW   float64 `json:"power_mw,omitempty"`
	LatencyMS float64 `json:"latency_ms,omitempty"`
}

// LifeRun is one lifetime run: a configuration and a method, as the harness runs it.
type LifeRun struct {
	Board   string
	Truth   *truth.Table
	Train   []string
	Infer   []LifeStream
	PowerMW float64
	Method  string // gmd, als or preset
	// Duration is the virtual time the run lasts.
	Duration time.Duration
	Seed     int64
	Noise    float64
	Changes  []LifeChange
	// Micro makes the run's training workers declare micro-batches
	// (lifetime.Scenario.MicroBatches: with a truth table, the sizes it has micro_batch
	// rows for, timed by those rows). LifetimeSpec.Micro.
	Micro bool
}

// LifeResult is what a lifetime run did.
type LifeResult struct {
	// TrainSamples is the training samples done, summed over the training jobs;
	// TrainAfterPlan those done after the first plan was applied (a run whose controller
	// paused training for good once it decided has none).
	TrainSamples   float64
	TrainAfterPlan float64
	// Planned says whether a plan was ever made; FirstPlanS is when (virtual seconds).
	Planned    bool
	FirstPlanS float64
	// ProfilesTaken is the modes profiled; SearchS the training time lost to searches.
	ProfilesTaken int
	SearchS       float64
	// LatencyBrokenS and PowerBrokenS: virtual seconds a latency budget (the scheduler's
	// recent p99 window with enough requests in it) and the power budget (its 1 s
	// average) were broken.
	LatencyBrokenS float64
	PowerBrokenS   float64
	// LatencyBrokenAfterPlanS and PowerBrokenAfterPlanS: the part of those after the
	// first plan (withinBudget judges the plans by it, the first search left out).
	LatencyBrokenAfterPlanS float64
	PowerBrokenAfterPlanS   float64
	// PhaseSamples are the samples trained in each stretch of constant budgets and
	// rates (the run's changes split it; nil without changes).
	PhaseSamples []float64
}

// LifeRunner runs one lifetime; fulcrumctl's calls lifetime.Run.
type LifeRunner func(context.Context, LifeRun) (LifeResult, error)

// LifetimeSpec says what the lifetime benchmark sweeps, as BenchSpec does for one decision.
type LifetimeSpec struct {
	Truth *truth.Table
	// Board is the catalog board the daemon runs as (its presets, its default mode).
	Board       string
	Pairs       []Pair // nil: every pair (Streams, Jobs ≤ 1)
	RatesRPS    []float64
	LatenciesMS []float64
	PowersMW    []float64
	Streams     int // as BenchSpec.Streams
	Jobs        int // as BenchSpec.Jobs
	// Micro (issue 32) lets training run as micro-batch turns where the truth has
	// micro_batch rows: the harness's trainers declare them (LifeRun.Micro) and the
	// denominator and the one-shot oracle choose among them. False: whole minibatches
	// everywhere (k = 1), the truth read without its micro-batch rows.
	Micro bool
	// Methods: gmd, als and preset run through Run; oracle-m<percent> is the margin
	// oracle's one-shot decision at t = 0, held for the whole run and computed from the
	// truth (no harness run).
	Methods  []string
	Duration time.Duration
	Changes  []LifeChange
	// BudgetsEvery, when positive, moves every configuration's latency and power budgets
	// every BudgetsEvery of the run to another of the sweep's budget pairs (its
	// LatenciesMS × PowersMW), on a tour drawn from Seed and the configuration
	// (BudgetTour); these changes join Changes.
	BudgetsEvery time.Duration
	Noise        float64
	Seed         uint64
	Parallel     int // runs at once; 0: 1. Results do not depend on it.
	// Admission is the scheduler's room the daemon keeps (plan.Rules.Admission of its
	// defaults): the denominator is the best configuration that keeps it.
	Admission plan.Admission
	Quantile  float64 // 0: plan.DefaultQuantile
	Run       LifeRunner
	// BoardFrom says what the harness's board answers from ("truth", "physics"); the
	// report carries it, nothing here depends on it.
	BoardFrom string
	// Progress, when set, is called (concurrently) after every finished run.
	Progress func(done, total int)
}

// LifetimeApart is a method's figures over the configurations where no configuration
// of the truth keeps the admission room at any time of the run (denominator 0).
type LifetimeApart struct {
	Configs          int     `json:"configs"`
	TrainSamples     float64 `json:"train_samples"`
	LatencyBrokenPct float64 `json:"latency_broken_pct"`
	PowerBrokenPct   float64 `json:"power_broken_pct"`
}

// LifetimeStats is one method's row.
type LifetimeStats struct {
	Name string `json:"name"`
	// Source: "harness" (run on virtual time) or "truth" (computed from the truth).
	Source string `json:"source"`
	// WithinBudget counts the scored configurations where the run's plans train within
	// every budget (it trained after its first plan, at least 1 % of the denominator, and
	// broke no budget for more than 1 % of the time after it: trainsAfterPlan,
	// brokenAfterPlan), the one-shot bench's within column over a lifetime (the first
	// search's own breaks are in the broken columns); WithinBudgetPct is its share of the
	// scored configurations. ViolationPct: the share that trained after the plan but
	// broke a budget for more than 1 % of the time after it.
	WithinBudget    int     `json:"within_budget"`
	WithinBudgetPct float64 `json:"within_budget_pct"`
	ViolationPct    float64 `json:"violation_pct"`
	// LifetimeRatio is Σ samples ÷ Σ ideal samples over the scored configurations (those
	// with a room-keeping answer); MeanRatio and P5Ratio are over their per-configuration
	// ratios.
	LifetimeRatio float64 `json:"lifetime_ratio"`
	MeanRatio     float64 `json:"mean_ratio"`
	P5Ratio       float64 `json:"p5_ratio"`
	TrainSamples  float64 `json:"train_samples"`
	IdealSamples  float64 `json:"ideal_samples"`
	// LatencyBrokenPct and PowerBrokenPct: share of the scored configurations' time a
	// budget was broken.
	LatencyBrokenPct float64 `json:"latency_broken_pct"`
	PowerBrokenPct   float64 `json:"power_broken_pct"`
	// MeanFirstPlanS and MaxFirstPlanS over the scored configurations that planned;
	// NoPlan counts those that never did.
	MeanFirstPlanS float64 `json:"mean_first_plan_s"`
	MaxFirstPlanS  float64 `json:"max_first_plan_s"`
	NoPlan         int     `json:"no_plan"`
	MeanProfiles   float64 `json:"mean_profiles"`
	MaxProfiles    int     `json:"max_profiles"`
	// MeanSearchS is the training time lost to searches per configuration; SearchPct its
	// share of the run.
	MeanSearchS float64       `json:"mean_search_s"`
	SearchPct   float64       `json:"search_pct"`
	Apart       LifetimeApart `json:"apart"`
	Errors      int           `json:"errors"`
	// ByBudgets is the training of every stretch between changes, summed by the budgets
	// and rate in force there (runs with changes only: --budgets-every, --power-drop-at,
	// --rate-double-at); where over a tour the method loses.
	ByBudgets []BudgetStretches `json:"by_budgets,omitempty"`
}

// BudgetStretches is one method's training over every stretch of the sweep's runs that
// ran at one rate and pair of budgets.
type BudgetStretches struct {
	RateRPS   float64 `json:"rate_rps"`
	LatencyMS float64 `json:"latency_ms"`
	PowerMW   float64 `json:"power_mw"`
	// Stretches counts them, of every configuration (scored or apart).
	Stretches    int     `json:"stretches"`
	TrainSamples float64 `json:"train_samples"`
	IdealSamples float64 `json:"ideal_samples"`
	// Ratio is TrainSamples ÷ IdealSamples; absent where nothing keeps the room there.
	Ratio *float64 `json:"ratio,omitempty"`
}

// LifetimeReport is the lifetime benchmark's result. Everything in its JSON depends only
// on the spec (seed included), never on Parallel or the machine.
type LifetimeReport struct {
	DurationS float64 `json:"duration_s"`
	Configs   int     `json:"configs"`
	// ConfigsApart have no room-keeping configuration at any time of the run.
	ConfigsApart int `json:"configs_apart"`
	Sets         int `json:"sets"` // workload pairs, or sets with Streams or Jobs ≥ 2
	Streams      int `json:"streams"`
	Jobs         int `json:"jobs"`
	// Micro: training micro-batches were on (LifetimeSpec.Micro) and the truth has them.
	Micro     bool           `json:"micro,omitempty"`
	Board     string         `json:"board"`
	BoardFrom string         `json:"board_from,omitempty"`
	Noise     float64        `json:"noise"`
	Seed      uint64         `json:"seed"`
	Admission plan.Admission `json:"admission"`
	Changes   []LifeChange   `json:"changes,omitempty"`
	// BudgetsEveryS is LifetimeSpec.BudgetsEvery in seconds (each configuration's own
	// changes are in its row).
	BudgetsEveryS float64         `json:"budgets_every_s,omitempty"`
	Methods       []LifetimeStats `json:"methods"`
	// Configurations: every configuration's runs, in the sweep's order.
	Configurations []LifeConfigRow `json:"configurations"`
	WallS          float64         `json:"-"`
	// Outcomes: per method, per configuration (the sweep's order).
	Outcomes [][]LifeOutcome `json:"-"`
}

// LifeConfigRow is one configuration of the report: its denominator and every method's run.
type LifeConfigRow struct {
	Config       string  `json:"config"`
	IdealSamples float64 `json:"ideal_samples"`
	// Tour is the configuration's budget changes with LifetimeSpec.BudgetsEvery.
	Tour []LifeChange `json:"tour,omitempty"`
	Runs []LifeRow    `json:"runs"`
}

// LifeRow is one method's run of a configuration in the report.
type LifeRow struct {
	Method         string  `json:"method"`
	TrainSamples   float64 `json:"train_samples"`
	TrainAfterPlan float64 `json:"train_samples_after_plan"`
	// Ratio is absent where the configuration is apart (no room-keeping answer).
	Ratio          *float64 `json:"ratio,omitempty"`
	FirstPlanS     *float64 `json:"first_plan_s,omitempty"` // absent: never planned
	ProfilesTaken  int      `json:"profiles_taken"`
	SearchS        float64  `json:"search_s"`
	LatencyBrokenS float64  `json:"latency_broken_s"`
	PowerBrokenS   float64  `json:"power_broken_s"`
	// LatencyBrokenAfterPlanS, PowerBrokenAfterPlanS: of those, after the first plan.
	LatencyBrokenAfterPlanS float64 `json:"latency_broken_after_plan_s"`
	PowerBrokenAfterPlanS   float64 `json:"power_broken_after_plan_s"`
	// PhaseRatios are the ratio of each stretch between the configuration's changes
	// (its tour's and the spec's): samples trained there over the stretch's room-keeping
	// optimum; null where that optimum is 0. Absent without changes.
	PhaseRatios []*float64 `json:"phase_ratios,omitempty"`
	Error       string     `json:"error,omitempty"`
}

// LifeOutcome is one method's run of one configuration, scored.
type LifeOutcome struct {
	Config       string
	IdealSamples float64
	LifeResult
	Err error
}

// Ratio is the configuration's lifetime ratio (NaN when its denominator is 0).
func (o LifeOutcome) Ratio() float64 {
	if o.IdealSamples <= 0 {
		return math.NaN()
	}
	return o.TrainSamples / o.IdealSamples
}

// lifeConfig is one configuration of the lifetime sweep.
type lifeConfig struct {
	name   string
	trains []string
	infers []string
	rate   float64
	latMS  float64
	powMW  float64
	pt     *truthprof.PairTruth  // one job, one stream
	mt     *truthprof.MultiTruth // otherwise
	ideal  float64               // samples of the best room-keeping configuration over the run
	// phases are the run's stretches (phasesOf), phaseIdeal ideal by stretch.
	phases     []lifePhase
	phaseIdeal []float64
	// tour is its budget changes (LifetimeSpec.BudgetsEvery); changes the spec's and
	// these, the run's.
	tour, changes []LifeChange
}

// lifePhase is a stretch of the run with constant budgets and rates.
type lifePhase struct {
	lenS               float64
	rate, latMS, powMW float64
}

// phasesOf splits a run of dur into the stretches between changes (applied in time
// order; changes at or after dur are never reached).
func phasesOf(dur time.Duration, rate, latMS, powMW float64, changes []LifeChange) []lifePhase {
	cs := slices.Clone(changes)
	slices.SortStableFunc(cs, func(a, b LifeChange) int { return cmp.Compare(a.At, b.At) })
	cur := lifePhase{rate: rate, latMS: latMS, powMW: powMW}
	var out []lifePhase
	from := time.Duration(0)
	for _, c := range cs {
		if c.At >= dur {
			break
		}
		if c.At > from {
			cur.lenS = (c.At - from).Seconds()
			out = append(out, cur)
			from = c.At
		}
		if c.RateFactor > 0 {
			cur.rate = rate * c.RateFactor
		}
		if c.PowerMW > 0 {
			cur.powMW = c.PowerMW
		}
		if c.LatencyMS > 0 {
			cur.latMS = c.LatencyMS
		}
	}
	cur.lenS = (dur - from).Seconds()
	if cur.lenS > 0 {
		out = append(out, cur)
	}
	return out
}

// phaseRatios is samples over ideal, stretch by stretch (nil: a run without changes or a
// failed one; an entry is nil where the stretch's optimum is 0).
func phaseRatios(samples, ideal []float64) []*float64 {
	if len(ideal) < 2 || len(samples) != len(ideal) {
		return nil
	}
	out := make([]*float64, len(ideal))
	for i, id := range ideal {
		if id > 0 {
			x := samples[i] / id
			out[i] = &x
		}
	}
	return out
}

// lifeMethod is a parsed method: a harness searcher or a one-shot margin oracle, held
// from t = 0 or, with replan, decided again at every change.
type lifeMethod struct {
	name      string
	oracle    bool
	replan    bool
	marginRel float64
}

// replanSuffix names the margin oracle that decides again at every change
// (oracle-m3-replan): a searcher that re-plans for free and perfectly.
const replanSuffix = "-replan"

func parseLifeMethods(names []string) ([]lifeMethod, error) {
	if len(names) == 0 {
		return nil, errors.New("lifetime: no methods given: want gmd, als, preset or oracle-m<percent>")
	}
	var out []lifeMethod
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			return nil, fmt.Errorf("lifetime: method %q given twice", n)
		}
		seen[n] = true
		base, replan := strings.CutSuffix(n, replanSuffix)
		sp, err := search.Parse(base)
		if err != nil {
			return nil, fmt.Errorf("lifetime: %w", err)
		}
		switch {
		case sp.Kind == search.KindMarginOracle:
			out = append(out, lifeMethod{name: n, oracle: true, replan: replan, marginRel: sp.MarginRel})
		case replan:
			return nil, fmt.Errorf("lifetime: method %q: only a margin oracle takes %s (e.g. oracle-m3%s)", n, replanSuffix, replanSuffix)
		case n == "gmd" || n == "als" || n == "preset":
			out = append(out, lifeMethod{name: n})
		default:
			return nil, fmt.Errorf("lifetime: method %q: the daemon's lifetime runs gmd, als or preset; oracle-m<percent> is the one-shot oracle row (oracle-m<percent>-replan: decided again at every change)", n)
		}
	}
	return out, nil
}

// RunLifetime runs every method on every configuration for spec.Duration of virtual time
// and scores the runs (docs/benchmarks.md "Lifetime benchmark").
func RunLifetime(ctx context.Context, spec LifetimeSpec) (*LifetimeReport, error) {
	start := time.Now()
	switch {
	case spec.Truth == nil:
		return nil, errors.New("lifetime: no ground truth given")
	case spec.Duration <= 0:
		return nil, fmt.Errorf("lifetime: duration %v: want a positive virtual time, e.g. 1h", spec.Duration)
	case len(spec.RatesRPS) == 0 || len(spec.LatenciesMS) == 0 || len(spec.PowersMW) == 0:
		return nil, errors.New("lifetime: give at least one rate, latency and power budget")
	case spec.Streams < 0 || spec.Jobs < 0:
		return nil, fmt.Errorf("lifetime: %d streams, %d training jobs: want 1 or more", spec.Streams, spec.Jobs)
	}
	methods, err := parseLifeMethods(spec.Methods)
	if err != nil {
		return nil, err
	}
	for _, c := range spec.Changes {
		if c.At <= 0 || c.RateFactor < 0 || c.PowerMW < 0 || c.LatencyMS < 0 {
			return nil, fmt.Errorf("lifetime: change at %v: want a positive time and positive values (0: unchanged)", c.At)
		}
	}
	if spec.BudgetsEvery < 0 || spec.BudgetsEvery > 0 && spec.BudgetsEvery >= spec.Duration {
		return nil, fmt.Errorf("lifetime: budgets every %v: want a positive time below the duration %v, e.g. %v", spec.BudgetsEvery, spec.Duration, spec.Duration/8)
	}
	if spec.BudgetsEvery > 0 && len(spec.LatenciesMS)*len(spec.PowersMW) < 2 {
		return nil, errors.New("lifetime: budgets changed every so often need at least two budget pairs to move between: give two or more latency or power budgets")
	}
	needRun := slices.ContainsFunc(methods, func(m lifeMethod) bool { return !m.oracle })
	if needRun && spec.Run == nil {
		return nil, errors.New("lifetime: no runner given for gmd, als or preset")
	}
	cfgs, sets, micro, err := lifeConfigs(spec)
	if err != nil {
		return nil, err
	}
	for ci := range cfgs {
		c := &cfgs[ci]
		if spec.BudgetsEvery > 0 {
			c.tour = BudgetTour(spec, c.latMS, c.powMW, ci)
		}
		c.changes = append(slices.Clone(spec.Changes), c.tour...)
	}
	q := plan.Budgets{Quantile: spec.Quantile}.WithDefaults().Quantile
	workers := max(1, spec.Parallel)
	// The denominators: per configuration, per stretch of the run, the truth's best
	// configuration that keeps the admission room.
	if err := forEach(ctx, workers, len(cfgs), func(i int) error {
		c := &cfgs[i]
		c.ideal, c.phaseIdeal = 0, nil
		c.phases = phasesOf(spec.Duration, c.rate, c.latMS, c.powMW, c.changes)
		for _, ph := range c.phases {
			sps, _, err := c.best(ph, 0, spec.Admission, q)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			c.ideal += sps * ph.lenS
			c.phaseIdeal = append(c.phaseIdeal, sps*ph.lenS)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("lifetime: room-keeping optimum: %w", err)
	}
	outcomes := make([][]LifeOutcome, len(methods))
	for i := range outcomes {
		outcomes[i] = make([]LifeOutcome, len(cfgs))
	}
	type job struct{ m, c int }
	var jobs []job
	for mi, m := range methods {
		for ci := range cfgs {
			if m.oracle {
				o, err := oneShot(&cfgs[ci], m, spec, q)
				if err != nil {
					return nil, fmt.Errorf("lifetime: %s, %s: %w", m.name, cfgs[ci].name, err)
				}
				outcomes[mi][ci] = o
				continue
			}
			jobs = append(jobs, job{mi, ci})
		}
	}
	var done atomic.Int64
	err = forEach(ctx, workers, len(jobs), func(ji int) error {
		jb := jobs[ji]
		c := &cfgs[jb.c]
		run := LifeRun{Board: spec.Board, Truth: spec.Truth, Train: c.trains, PowerMW: c.powMW, Method: methods[jb.m].name,
			Duration: spec.Duration, Seed: LifetimeRunSeed(spec.Seed, jb.c), Noise: spec.Noise,
			Changes: slices.Clone(c.changes), Micro: spec.Micro}
		for _, w := range c.infers {
			run.Infer = append(run.Infer, LifeStream{Workload: w, RateRPS: c.rate, LatencyMS: c.latMS})
		}
		res, err := spec.Run(ctx, run)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		o := LifeOutcome{Config: c.name, IdealSamples: c.ideal, LifeResult: res}
		if err != nil {
			// A failed run did no training that counts; its error is reported.
			o.LifeResult, o.Err = LifeResult{}, fmt.Errorf("%s, %s: %w", methods[jb.m].name, c.name, err)
		}
		outcomes[jb.m][jb.c] = o
		if spec.Progress != nil {
			spec.Progress(int(done.Add(1)), len(jobs))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("lifetime: %w", err)
	}
	rep := &LifetimeReport{DurationS: spec.Duration.Seconds(), Configs: len(cfgs), Sets: sets, Streams: max(spec.Streams, 1), Jobs: max(spec.Jobs, 1),
		Board: spec.Board, BoardFrom: spec.BoardFrom, Noise: spec.Noise, Seed: spec.Seed, Admission: spec.Admission, Outcomes: outcomes, Micro: micro,
		BudgetsEveryS: spec.BudgetsEvery.Seconds()}
	rep.Changes = reported(spec.Changes)
	for ci, c := range cfgs {
		if c.ideal <= 0 {
			rep.ConfigsApart++
		}
		row := LifeConfigRow{Config: c.name, IdealSamples: c.ideal, Tour: reported(c.tour)}
		for mi, m := range methods {
			o := outcomes[mi][ci]
			r := LifeRow{Method: m.name, TrainSamples: o.TrainSamples, TrainAfterPlan: o.TrainAfterPlan, ProfilesTaken: o.ProfilesTaken, SearchS: o.SearchS,
				LatencyBrokenS: o.LatencyBrokenS, PowerBrokenS: o.PowerBrokenS, LatencyBrokenAfterPlanS: o.LatencyBrokenAfterPlanS, PowerBrokenAfterPlanS: o.PowerBrokenAfterPlanS}
			if x := o.Ratio(); !math.IsNaN(x) {
				r.Ratio = &x
			}
			if o.Planned {
				r.FirstPlanS = &o.FirstPlanS
			}
			if o.Err != nil {
				r.Error = o.Err.Error()
			}
			r.PhaseRatios = phaseRatios(o.PhaseSamples, c.phaseIdeal)
			row.Runs = append(row.Runs, r)
		}
		rep.Configurations = append(rep.Configurations, row)
	}
	for mi, m := range methods {
		st := summariseLifetime(m.name, outcomes[mi], spec.Duration.Seconds())
		st.ByBudgets = byBudgets(outcomes[mi], cfgs)
		st.Source = "harness"
		if m.oracle {
			st.Source = "truth"
		}
		rep.Methods = append(rep.Methods, st)
	}
	rep.WallS = time.Since(start).Seconds()
	return rep, nil
}

// lifeConfigs lists the sweep's configurations, set-major, then rate, latency, power (the
// one-shot bench's order), the number of workload sets, and whether some set's truth has
// training micro-batches (only with spec.Micro).
func lifeConfigs(spec LifetimeSpec) ([]lifeConfig, int, bool, error) {
	k, m := max(spec.Streams, 1), max(spec.Jobs, 1)
	type set struct {
		name           string
		trains, infers []string
		pt             *truthprof.PairTruth
		mt             *truthprof.MultiTruth
	}
	var sets []set
	if k == 1 && m == 1 {
		for _, p := range pairsOf(spec.Truth, spec.Pairs) {
			pt, err := truthprof.NewPairTruth(spec.Truth, p.Train, p.Infer, 0, nil)
			if err != nil {
				return nil, 0, false, fmt.Errorf("lifetime: pair %s: %w", p, err)
			}
			if !spec.Micro {
				pt = pt.WithoutMicro()
			}
			sets = append(sets, set{name: p.String(), trains: []string{p.Train}, infers: []string{p.Infer}, pt: pt})
		}
	} else {
		if len(spec.Pairs) > 0 {
			return nil, 0, false, errors.New("lifetime: pairs and several streams or jobs: choose the workloads by streams and jobs alone")
		}
		infers, trains := spec.Truth.Workloads(truth.Infer), spec.Truth.Workloads(truth.Train)
		if len(infers) < k || len(trains) < m {
			return nil, 0, false, fmt.Errorf("lifetime: %d streams and %d training jobs but the ground truth has %d inference (%v) and %d training workloads (%v)", k, m, len(infers), infers, len(trains), trains)
		}
		for _, ts := range combinations(trains, m) {
			for _, is := range combinations(infers, k) {
				mt, err := truthprof.NewMultiTruth(spec.Truth, ts, is, nil)
				if err != nil {
					return nil, 0, false, fmt.Errorf("lifetime: %v with %v: %w", ts, is, err)
				}
				if !spec.Micro {
					mt = mt.WithoutMicro()
				}
				sets = append(sets, set{name: strings.Join(ts, "+") + ":" + strings.Join(is, "+"), trains: ts, infers: is, mt: mt})
			}
		}
	}
	if len(sets) == 0 {
		return nil, 0, false, errors.New("lifetime: the ground truth has no training × inference workloads to run")
	}
	micro := slices.ContainsFunc(sets, func(s set) bool {
		return s.pt != nil && len(s.pt.MicroBatches) > 0 || s.mt != nil && s.mt.HasMicro()
	})
	var cfgs []lifeConfig
	for _, s := range sets {
		for _, r := range spec.RatesRPS {
			for _, l := range spec.LatenciesMS {
				for _, p := range spec.PowersMW {
					name := fmt.Sprintf("%s @ %g req/s, %g ms, %g W", s.name, r, l, p/1000)
					cfgs = append(cfgs, lifeConfig{name: name, trains: s.trains, infers: s.infers, rate: r, latMS: l, powMW: p, pt: s.pt, mt: s.mt})
				}
			}
		}
	}
	return cfgs, len(sets), micro, nil
}

// byBudgets sums one method's outcomes (in cfgs' order) stretch by stretch by the rate
// and budgets in force, ordered by power, latency, rate (nil: no run had changes).
func byBudgets(outs []LifeOutcome, cfgs []lifeConfig) []BudgetStretches {
	type key struct{ rate, latMS, powMW float64 }
	sums := map[key]*BudgetStretches{}
	for ci, o := range outs {
		c := cfgs[ci]
		ps := o.PhaseSamples
		if ps == nil && o.TrainSamples == 0 {
			ps = make([]float64, len(c.phases)) // trained nothing (or failed): nothing in every stretch
		}
		if len(c.phases) < 2 || len(ps) != len(c.phases) || len(c.phaseIdeal) != len(c.phases) {
			continue // no changes, or a runner that reports no samples by stretch
		}
		for i, ph := range c.phases {
			k := key{ph.rate, ph.latMS, ph.powMW}
			b := sums[k]
			if b == nil {
				b = &BudgetStretches{RateRPS: ph.rate, LatencyMS: ph.latMS, PowerMW: ph.powMW}
				sums[k] = b
			}
			b.Stretches++
			b.TrainSamples += ps[i]
			b.IdealSamples += c.phaseIdeal[i]
		}
	}
	out := make([]BudgetStretches, 0, len(sums))
	for _, b := range sums {
		if b.IdealSamples > 0 {
			r := b.TrainSamples / b.IdealSamples
			b.Ratio = &r
		}
		out = append(out, *b)
	}
	slices.SortFunc(out, func(a, b BudgetStretches) int {
		return cmp.Or(cmp.Compare(a.PowerMW, b.PowerMW), cmp.Compare(a.LatencyMS, b.LatencyMS), cmp.Compare(a.RateRPS, b.RateRPS))
	})
	if len(out) == 0 {
		return nil
	}
	return out
}

// summariseLifetime scores one method's outcomes over runs of durS seconds each.
func summariseLifetime(name string, outs []LifeOutcome, durS float64) LifetimeStats {
	st := LifetimeStats{Name: name}
	var ratios []float64
	var latS, powS, apartLatS, apartPowS, firstS, searchS float64
	planned, profiles, within, viol := 0, 0, 0, 0
	for _, o := range outs {
		if o.Err != nil {
			st.Errors++
		}
		profiles += o.ProfilesTaken
		st.MaxProfiles = max(st.MaxProfiles, o.ProfilesTaken)
		searchS += o.SearchS
		if o.IdealSamples <= 0 {
			st.Apart.Configs++
			st.Apart.TrainSamples += o.TrainSamples
			apartLatS += o.LatencyBrokenS
			apartPowS += o.PowerBrokenS
			continue
		}
		ratios = append(ratios, o.Ratio())
		switch trains, broken := o.trainsAfterPlan(), o.brokenAfterPlan(durS); {
		case trains && !broken:
			within++
		case trains:
			viol++
		}
		st.TrainSamples += o.TrainSamples
		st.IdealSamples += o.IdealSamples
		latS += o.LatencyBrokenS
		powS += o.PowerBrokenS
		if o.Planned {
			planned++
			firstS += o.FirstPlanS
			st.MaxFirstPlanS = max(st.MaxFirstPlanS, o.FirstPlanS)
		} else {
			st.NoPlan++
		}
	}
	if n := len(ratios); n > 0 {
		st.LifetimeRatio = st.TrainSamples / st.IdealSamples
		st.MeanRatio = stat.Mean(ratios, nil)
		slices.Sort(ratios)
		st.P5Ratio = stat.Quantile(0.05, stat.Empirical, ratios, nil)
		st.LatencyBrokenPct = 100 * latS / (float64(n) * durS)
		st.PowerBrokenPct = 100 * powS / (float64(n) * durS)
		st.WithinBudget = within
		st.WithinBudgetPct = 100 * float64(within) / float64(n)
		st.ViolationPct = 100 * float64(viol) / float64(n)
	}
	if planned > 0 {
		st.MeanFirstPlanS = firstS / float64(planned)
	}
	if st.Apart.Configs > 0 {
		st.Apart.LatencyBrokenPct = 100 * apartLatS / (float64(st.Apart.Configs) * durS)
		st.Apart.PowerBrokenPct = 100 * apartPowS / (float64(st.Apart.Configs) * durS)
	}
	if len(outs) > 0 {
		st.MeanProfiles = float64(profiles) / float64(len(outs))
		st.MeanSearchS = searchS / float64(len(outs))
		st.SearchPct = 100 * st.MeanSearchS / durS
	}
	return st
}

// reported is cs as the report writes them: a copy with AtS filled (nil for none).
func reported(cs []LifeChange) []LifeChange {
	var out []LifeChange
	for _, c := range cs {
		c.AtS = c.At.Seconds()
		out = append(out, c)
	}
	return out
}

// BudgetTour is the budget changes of configuration index config with spec.BudgetsEvery
// (scripts/lifeevents replays them with --budgets-every): at every multiple of it the
// latency and power budgets move to the next pair of a tour of the sweep's budget pairs
// (LatenciesMS × PowersMW) that starts at the configuration's own (latMS, powMW) and then
// visits every other pair once, in an order drawn from Seed and the configuration alone,
// before starting over: no two stretches in a row share their budgets, and a run as long
// as the tour sees every pair. Only Seed, Duration, BudgetsEvery and the budgets are read.
func BudgetTour(spec LifetimeSpec, latMS, powMW float64, config int) []LifeChange {
	type pair struct{ lat, pow float64 }
	var others []pair
	for _, l := range spec.LatenciesMS {
		for _, p := range spec.PowersMW {
			if l != latMS || p != powMW {
				others = append(others, pair{l, p})
			}
		}
	}
	rng := rand.New(rand.NewPCG(deriveSeed(spec.Seed, "", "budget-tour", uint64(config)), 0))
	rng.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
	tour := append([]pair{{latMS, powMW}}, others...)
	var out []LifeChange
	for i, at := 1, spec.BudgetsEvery; at < spec.Duration; i, at = i+1, at+spec.BudgetsEvery {
		b := tour[i%len(tour)]
		out = append(out, LifeChange{At: at, LatencyMS: b.lat, PowerMW: b.pow})
	}
	return out
}

// LifetimeRunSeed is the seed of the lifetime benchmark's run of configuration index
// config (in the sweep's order, the report's configurations) under the sweep's seed: what
// replays one run through lifetime.Run (scripts/lifeevents --bench-seed --index).
func LifetimeRunSeed(seed uint64, config int) int64 {
	return int64(deriveSeed(seed, "", "lifetime", uint64(config)) >> 1)
}

// withinShare is how much of the time after its first plan a run may break a budget for
// and still be within it (a p99 budget lets 1 % of the requests be late), and the least
// share of its denominator a run must train after that plan to count as training.
const withinShare = 0.01

// trainsAfterPlan: the run planned without error and trained after its first plan at
// least 1 % of its denominator (a minibatch that ends just after a controller paused
// training does not make a run that trains).
func (o LifeOutcome) trainsAfterPlan() bool {
	return o.Err == nil && o.Planned && o.IdealSamples > 0 && o.TrainAfterPlan >= withinShare*o.IdealSamples
}

// brokenAfterPlan: a budget was broken for more than 1 % of the time after the first
// plan (of a run of durS seconds).
func (o LifeOutcome) brokenAfterPlan(durS float64) bool {
	after := max(durS-o.FirstPlanS, 0)
	return o.LatencyBrokenAfterPlanS > withinShare*after || o.PowerBrokenAfterPlanS > withinShare*after
}
