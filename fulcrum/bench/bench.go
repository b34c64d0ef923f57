// Package bench scores the searchers against ground truth: every training × inference
// pair of a truth table × arrival rates × latency and power budgets, each searcher
// answering through a noisy replay of the table (truthprof), each answer re-evaluated on
// the noise-free truth and compared with the exhaustive oracle (docs/benchmarks.md).
package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/search"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// Pair is a training × inference workload pair of a ground-truth table.
type Pair struct {
	Train string `json:"train"`
	Infer string `json:"infer"`
}

func (p Pair) String() string { return p.Train + ":" + p.Infer }

// BenchSpec says what the benchmark sweeps.
type BenchSpec struct {
	Truth *truth.Table
	// Pairs to run; nil runs every training × inference workload pair of the table.
	Pairs       []Pair
	RatesRPS    []float64
	LatenciesMS []float64
	PowersMW    []float64
	Quantile    float64 // 0: DefaultQuantile
	// Searchers by registry name (search.Parse), plus "oracle" for the oracle's own row.
	Searchers []string
	Noise     float64 // relative standard deviation of each profiled value
	Seed      uint64
	Parallel  int // workers; 0: 1
	// Presets and PresetNames are the board's nvpmodel presets (unsnapped); each pair
	// snaps them into its space.
	Presets     []powermode.Mode
	PresetNames []string
	MaxProfiles int // per searcher run; 0: each searcher's default
	// Build overrides search.New for the profiling searchers (tests use it to inject
	// searchers); the oracles are the benchmark's own and never go through it.
	Build func(name string) (search.Searcher, error)
	// Rules are the decision rules (plan.Decider) every answer is decided by, as the
	// daemon decides: after a searcher has profiled, the decision over what it profiled
	// (its repeats pooled) is what is scored, not the searcher's own answer. The margin
	// oracles keep the same admission room. fulcrumctl passes fulcrumd's defaults
	// (control.DecisionRules); the zero value is model v1 alone with exact profiles.
	Rules plan.Rules
	// Streams is the number of inference streams planned together: 0 or 1 sweeps
	// training × inference pairs; k ≥ 2 sweeps every training workload with every set
	// of k inference workloads (model v1 for several workloads, issue 19).
	Streams int
	// Jobs is the number of training jobs planned together (0 or 1: one); m ≥ 2 sweeps
	// every set of m training workloads (equal time shares) with every set of Streams
	// inference workloads.
	Jobs int
	// Micro lets the decision and the oracles run training as micro-batch turns where
	// the truth has micro-batch rows (issue 32); false scores whole minibatches only
	// (k = 1), as before. Tables without micro-batch rows score the same either way.
	Micro bool
	// Progress, when set, is called (from the workers, concurrently) each time a
	// searcher's answer to a configuration is scored, with the number scored and the
	// total.
	Progress func(done, total int)
}

// SearcherStats is one row of the report. Percentages and ratios are over the
// configurations the oracle can satisfy; profile counts over all configurations.
type SearcherStats struct {
	Name string `json:"name"`
	// WithinBudgetPct: the searcher claimed a feasible choice and it meets every budget
	// on the noise-free truth.
	WithinBudgetPct float64 `json:"within_budget_pct"`
	// WithinBudget counts those configurations (the percentage's base, the satisfiable
	// configurations, moves with what the oracle may run; the count does not).
	WithinBudget int `json:"within_budget"`
	// ViolationPct: claimed feasible, but the truth violates a budget.
	ViolationPct float64 `json:"violation_pct"`
	// NoAnswerPct: no choice, or the decision claimed nothing it saw meets the budgets
	// (the daemon would then pause training rather than violate), or an error.
	NoAnswerPct float64 `json:"no_answer_pct"`
	// FalseClaimPct: over the configurations no choice can satisfy, the share where a
	// choice was claimed feasible anyway (a violation the other columns cannot show).
	FalseClaimPct float64 `json:"false_claim_pct"`
	// MeanOptRatio and P5OptRatio: true throughput of the choice / the oracle's; 0 for
	// a violating or missing answer.
	MeanOptRatio float64 `json:"mean_opt_ratio"`
	P5OptRatio   float64 `json:"p5_opt_ratio"`
	// MeanProfiles and MaxProfiles: distinct modes profiled per configuration (a pair
	// learner's campaign counts once per pair, spread over its configurations, plus
	// each configuration's confirming profiles; MaxProfiles counts the whole campaign).
	MeanProfiles float64 `json:"mean_profiles"`
	MaxProfiles  int     `json:"max_profiles"`
	// WallS is the summed time the searcher's runs took (across workers).
	WallS  float64 `json:"wall_s"`
	Errors int     `json:"errors"`
}

// BenchReport is the benchmark's result.
type BenchReport struct {
	ConfigsTotal            int             `json:"configs_total"`
	ConfigsOracleInfeasible int             `json:"configs_oracle_infeasible"`
	Pairs                   int             `json:"pairs"`             // workload pairs, or sets with Streams ≥ 2
	Streams                 int             `json:"streams,omitempty"` // inference streams per set (≥ 2), 0 for pairs
	Jobs                    int             `json:"jobs,omitempty"`    // training jobs per set, 0 for pairs
	Noise                   float64         `json:"noise"`
	Seed                    uint64          `json:"seed"`
	Micro                   bool            `json:"micro"` // training micro-batches scored: BenchSpec.Micro and the truth has them
	Rules                   plan.Rules      `json:"rules"` // the decision's
	Searchers               []SearcherStats `json:"searchers"`
	WallS                   float64         `json:"wall_s"`
	// Outcomes holds every (searcher, configuration) outcome, in Searchers × config
	// order, for tests and detailed output; not in the JSON summary.
	Outcomes [][]Outcome `json:"-"`
}

// Outcome is one searcher's answer to one configuration, scored on the truth.
type Outcome struct {
	Pair    Pair
	Budgets plan.Budgets
	Status  string // within, violation, no_answer, oracle_infeasible, false_claim
	// Decision is the decision over the searcher's profiles (what is scored); Searcher
	// is the searcher's own answer.
	Decision plan.Decision
	Searcher search.Result
	Ratio    float64
	Profiles int       // modes this configuration profiled (a pair learner: confirming ones)
	Campaign int       // a pair learner's campaign profiles for the pair (0 otherwise)
	Choice   plan.Eval // re-evaluated on the noise-free truth
	Err      error
}

// RunBench runs every searcher on every configuration and scores the answers on the
// noise-free truth. Results depend only on the spec (and Seed), not on scheduling.
//
// One path serves every shape: the pair (one trainer, one stream) and several streams
// or training jobs (spec.Streams, spec.Jobs) differ only in their shape (pairShape,
// multiShape: the workload sets, their budgets and oracle, how a searcher's answer is
// decided and scored); run generates the sweep's jobs, runs them and aggregates the
// report for both.
func RunBench(ctx context.Context, spec BenchSpec) (*BenchReport, error) {
	start := time.Now()
	if err := checkSpec(spec); err != nil {
		return nil, err
	}
	r, err := newRoster(spec)
	if err != nil {
		return nil, err
	}
	var sh shape
	if spec.Streams >= 2 || spec.Jobs >= 2 {
		sh, err = newMultiShape(spec, r)
	} else {
		sh, err = newPairShape(spec, r)
	}
	if err != nil {
		return nil, err
	}
	return run(ctx, spec, sh, start)
}

// checkSpec refuses a spec no shape can run.
func checkSpec(spec BenchSpec) error {
	switch {
	case spec.Truth == nil:
		return errors.New("bench: no ground truth given")
	case len(spec.Searchers) == 0:
		return errors.New("bench: no searchers given")
	case len(spec.RatesRPS) == 0 || len(spec.LatenciesMS) == 0 || len(spec.PowersMW) == 0:
		return errors.New("bench: give at least one rate, latency and power budget")
	case spec.Streams < 0 || spec.Jobs < 0:
		return fmt.Errorf("bench: %d streams, %d training jobs: want 1 (pairs) or more", spec.Streams, spec.Jobs)
	}
	return nil
}

// shape is what differs between the pair sweep (one trainer, one stream) and the sweep of
// several streams or training jobs (issue 19). Configurations are numbered set-major,
// then rate, latency and power (eachConfig); their numbers seed the noise.
type shape interface {
	// sets and configs count the workload sets and the configurations; setOf(c) is
	// configuration c's set.
	sets() int
	configs() int
	setOf(c int) int
	// oracle finds every configuration's optimum on the noise-free truth; oracleAt(c)
	// says how many modes it scanned for c and whether anything meets c's budgets.
	oracle(ctx context.Context, workers int) error
	oracleAt(c int) (modes int, feasible bool)
	// role says how searcher s (an index of spec.Searchers) runs.
	role(s int) role
	// evaluate runs searcher s (perConfig) on configuration c and scores the decision
	// over what it profiled; the caller checks the context afterwards.
	evaluate(ctx context.Context, s, c int) Outcome
	// learn runs pair learner s (perSet) once on set, answers each of the set's
	// configurations and hands each scored answer to scored. An error stops the bench.
	learn(ctx context.Context, s, set int, scored func(c int, o Outcome)) error
	// describe fills the report's account of the sweep (sets, streams, jobs, micro).
	describe(rep *BenchReport)
}

// role is how a searcher runs in the sweep.
type role int

const (
	roleNone      role = iota // the oracle's own row: computed, not run
	rolePerConfig             // one search per configuration (baselines, GMD, the margin oracles)
	rolePerSet                // a pair learner (ALS): one campaign per set, an answer per configuration
)

// roster is the searchers of a spec, built once: built[i] is spec.Searchers[i]'s
// searcher (nil for the oracle and the margin oracles, which the shapes build from the
// truth), kinds[i] its parsed kind where the name parses, margins the margin oracles'
// margins by index.
type roster struct {
	names    []string
	built    []search.Searcher
	kinds    []search.Kind
	parseErr []error
	margins  map[int]float64
}

func newRoster(spec BenchSpec) (roster, error) {
	build := spec.Build
	if build == nil {
		build = func(name string) (search.Searcher, error) { return search.New(name, search.Env{}) }
	}
	n := len(spec.Searchers)
	r := roster{names: spec.Searchers, built: make([]search.Searcher, n), kinds: make([]search.Kind, n), parseErr: make([]error, n), margins: map[int]float64{}}
	for i, name := range spec.Searchers {
		if name == "oracle" {
			continue
		}
		sp, err := search.Parse(name)
		r.parseErr[i] = err
		if err == nil {
			r.kinds[i] = sp.Kind
			if sp.Kind == search.KindMarginOracle {
				r.margins[i] = sp.MarginRel
				continue
			}
		}
		s, err := build(name)
		if err != nil {
			return roster{}, fmt.Errorf("bench: %w", err)
		}
		r.built[i] = s
	}
	return r, nil
}

// eachConfig calls fn for every configuration of a sweep over sets workload sets, in
// the order configurations are numbered: set-major, then rate, latency and power.
func eachConfig(spec BenchSpec, sets int, fn func(set int, rateRPS, latencyMS, powerMW float64) error) error {
	for set := range sets {
		for _, r := range spec.RatesRPS {
			for _, l := range spec.LatenciesMS {
				for _, pw := range spec.PowersMW {
					if err := fn(set, r, l, pw); err != nil {
						return fmt.Errorf("bench: budgets rate %g latency %g ms power %g mW: %w", r, l, pw, err)
					}
				}
			}
		}
	}
	return nil
}

// job is one unit of work: searcher s on configuration cfg, or (cfg < 0) a pair
// learner's campaign on set.
type job struct{ s, cfg, set int }

// planJobs lists the sweep's jobs, searcher by searcher, and the number of answers
// they will score.
func planJobs(sh shape, searchers int) (jobs []job, answers int) {
	for s := range searchers {
		switch sh.role(s) {
		case rolePerSet:
			for set := range sh.sets() {
				jobs = append(jobs, job{s, -1, set})
			}
			answers += sh.configs()
		case rolePerConfig:
			for c := range sh.configs() {
				jobs = append(jobs, job{s, c, sh.setOf(c)})
			}
			answers += sh.configs()
		}
	}
	return jobs, answers
}

// run is the one bench path: the oracle of every configuration, every searcher's jobs
// on spec.Parallel workers, then the report.
func run(ctx context.Context, spec BenchSpec, sh shape, start time.Time) (*BenchReport, error) {
	workers := max(1, spec.Parallel)
	if err := sh.oracle(ctx, workers); err != nil {
		return nil, fmt.Errorf("bench: oracle: %w", err)
	}
	jobs, answers := planJobs(sh, len(spec.Searchers))
	outcomes := make([][]Outcome, len(spec.Searchers))
	for i := range outcomes {
		outcomes[i] = make([]Outcome, sh.configs())
	}
	wall := make([]time.Duration, len(jobs))
	var done atomic.Int64
	record := func(s, c int, o Outcome) {
		outcomes[s][c] = o
		if spec.Progress != nil {
			spec.Progress(int(done.Add(1)), answers)
		}
	}
	err := forEach(ctx, workers, len(jobs), func(ji int) error {
		jb := jobs[ji]
		t0 := time.Now()
		defer func() { wall[ji] = time.Since(t0) }()
		if jb.cfg < 0 {
			return sh.learn(ctx, jb.s, jb.set, func(c int, o Outcome) { record(jb.s, c, o) })
		}
		o := sh.evaluate(ctx, jb.s, jb.cfg)
		if err := ctx.Err(); err != nil {
			return err
		}
		record(jb.s, jb.cfg, o)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	rep := report(spec, sh, outcomes, jobs, wall)
	rep.WallS = time.Since(start).Seconds()
	return rep, nil
}

// report aggregates the outcomes into the report: a row per searcher, the oracle's
// computed from the configurations.
func report(spec BenchSpec, sh shape, outcomes [][]Outcome, jobs []job, wall []time.Duration) *BenchReport {
	rep := &BenchReport{ConfigsTotal: sh.configs(), Noise: spec.Noise, Seed: spec.Seed, Rules: spec.Rules}
	sh.describe(rep)
	for c := range sh.configs() {
		if _, ok := sh.oracleAt(c); !ok {
			rep.ConfigsOracleInfeasible++
		}
	}
	for si, name := range spec.Searchers {
		if name == "oracle" {
			rep.Searchers = append(rep.Searchers, oracleRow(sh.configs(), sh.oracleAt))
			outcomes[si] = nil
			continue
		}
		st := summarise(name, outcomes[si])
		for ji, jb := range jobs {
			if jb.s == si {
				st.WallS += wall[ji].Seconds()
			}
		}
		rep.Searchers = append(rep.Searchers, st)
	}
	rep.Outcomes = outcomes
	return rep
}

// deriveSeed gives every (searcher, kind, number) its own reproducible seed. The
// profilers' noise is seeded without the searcher's name (""), so that every searcher
// sees the same measurement of a mode in a configuration (common random numbers) and
// the report compares searchers, not their luck.
func deriveSeed(seed uint64, name, kind string, n uint64) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write([]byte(kind))
	binary.LittleEndian.PutUint64(b[:], n)
	h.Write(b[:])
	return h.Sum64()
}

// forEach runs fn(0..n-1) on workers goroutines and returns the first error; after an
// error or cancellation the remaining items are skipped.
func forEach(ctx context.Context, workers, n int, fn func(i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, max(n, 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					cancel(err)
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return nil
}
