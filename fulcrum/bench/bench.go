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
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"gonum.org/v1/gonum/stat"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/truthprof"
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

type benchConfig struct {
	pair    int
	budgets plan.Budgets
	oracle  search.Result
	model   *plan.Model
}

// RunBench runs every searcher on every configuration and scores the answers on the
// noise-free truth. Results depend only on the spec (and Seed), not on scheduling.
func RunBench(ctx context.Context, spec BenchSpec) (*BenchReport, error) {
	start := time.Now()
	if spec.Truth == nil {
		return nil, errors.New("bench: no ground truth given")
	}
	if len(spec.Searchers) == 0 {
		return nil, errors.New("bench: no searchers given")
	}
	if len(spec.RatesRPS) == 0 || len(spec.LatenciesMS) == 0 || len(spec.PowersMW) == 0 {
		return nil, errors.New("bench: give at least one rate, latency and power budget")
	}
	if spec.Streams < 0 || spec.Jobs < 0 {
		return nil, fmt.Errorf("bench: %d streams, %d training jobs: want 1 (pairs) or more", spec.Streams, spec.Jobs)
	}
	if spec.Streams >= 2 || spec.Jobs >= 2 {
		return runMulti(ctx, spec)
	}
	build := spec.Build
	if build == nil {
		build = func(name string) (search.Searcher, error) { return search.New(name, search.Env{}) }
	}
	searchers := make([]search.Searcher, len(spec.Searchers))
	// margins holds the margin oracles (by searcher index): each is built per pair from
	// that pair's truth, given to it explicitly.
	margins := map[int]float64{}
	for i, n := range spec.Searchers {
		if n == "oracle" {
			continue
		}
		if sp, err := search.Parse(n); err == nil && sp.Kind == search.KindMarginOracle {
			margins[i] = sp.MarginRel
			continue
		}
		s, err := build(n)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		searchers[i] = s
	}
	pairs := spec.Pairs
	if pairs == nil {
		for _, t := range spec.Truth.Workloads(truth.Train) {
			for _, i := range spec.Truth.Workloads(truth.Infer) {
				pairs = append(pairs, Pair{t, i})
			}
		}
	}
	if len(pairs) == 0 {
		return nil, errors.New("bench: the ground truth has no training × inference pair")
	}
	workers := max(1, spec.Parallel)

	// Phase 1: each pair's truth, and the oracle of every configuration.
	pts := make([]*truthprof.PairTruth, len(pairs))
	presets := make([][]powermode.Mode, len(pairs))
	for i, p := range pairs {
		pt, err := truthprof.NewPairTruth(spec.Truth, p.Train, p.Infer, 0, nil)
		if err != nil {
			return nil, fmt.Errorf("bench: pair %s: %w", p, err)
		}
		if !spec.Micro {
			pt = pt.WithoutMicro()
		}
		pts[i] = pt
		for _, m := range spec.Presets {
			presets[i] = append(presets[i], pt.Space.Snap(m))
		}
	}
	var cfgs []benchConfig
	type rateKey struct{ pair, rate int }
	var rateJobs []rateKey
	for pi := range pairs {
		for ri, r := range spec.RatesRPS {
			rateJobs = append(rateJobs, rateKey{pi, ri})
			for _, l := range spec.LatenciesMS {
				for _, pw := range spec.PowersMW {
					b := plan.Budgets{RateRPS: r, LatencyMS: l, PowerMW: pw, Quantile: spec.Quantile}.WithDefaults()
					if err := b.Validate(); err != nil {
						return nil, fmt.Errorf("bench: budgets rate %g latency %g ms power %g mW: %w", r, l, pw, err)
					}
					cfgs = append(cfgs, benchConfig{pair: pi, budgets: b})
				}
			}
		}
	}
	perRate := len(spec.LatenciesMS) * len(spec.PowersMW)
	err := forEach(ctx, workers, len(rateJobs), func(j int) error {
		rk := rateJobs[j]
		o, err := newOracleRate(pts[rk.pair], spec.RatesRPS[rk.rate], plan.Budgets{Quantile: spec.Quantile}.WithDefaults().Quantile)
		if err != nil {
			return err
		}
		base := j * perRate // configurations are laid out pair-major, then rate
		for c := base; c < base+perRate; c++ {
			m, err := plan.NewModel(cfgs[c].budgets, pts[rk.pair].Batches)
			if err != nil {
				return err
			}
			cfgs[c].model = m
			cfgs[c].oracle = o.answer(m)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bench: oracle: %w", err)
	}
	rep := &BenchReport{ConfigsTotal: len(cfgs), Pairs: len(pairs), Noise: spec.Noise, Seed: spec.Seed, Rules: spec.Rules,
		Micro: slices.ContainsFunc(pts, func(pt *truthprof.PairTruth) bool { return len(pt.MicroBatches) > 0 })}
	for _, c := range cfgs {
		if !c.oracle.Feasible {
			rep.ConfigsOracleInfeasible++
		}
	}

	// Phase 2: the searchers. A job is one configuration of a plain searcher, or one
	// pair (campaign and all its configurations) of a pair learner.
	type job struct{ s, pair, cfg int } // cfg < 0: a pair-learner job
	var jobs []job
	for si, s := range searchers {
		_, margin := margins[si]
		// A pair learner (ALS) learns each pair once and answers its configurations.
		if _, ok := s.(search.PairLearner); ok {
			for pi := range pairs {
				jobs = append(jobs, job{si, pi, -1})
			}
		} else if s != nil || margin {
			for ci := range cfgs {
				jobs = append(jobs, job{si, cfgs[ci].pair, ci})
			}
		}
	}
	outcomes := make([][]Outcome, len(searchers))
	for i := range outcomes {
		outcomes[i] = make([]Outcome, len(cfgs))
	}
	wall := make([][]time.Duration, len(searchers))
	for i := range wall {
		wall[i] = make([]time.Duration, len(jobs))
	}
	problem := func(pi int, b plan.Budgets, seed uint64) search.Problem {
		p := problemOf(pts[pi])
		p.Budgets, p.Presets, p.PresetNames, p.MaxProfiles, p.Seed = b, presets[pi], spec.PresetNames, spec.MaxProfiles, seed
		p.NoiseRel = spec.Noise
		p.Rules = spec.Rules
		return p
	}
	profiler := func(pi int, seed uint64) *truthprof.TruthProfiler {
		// Noise was validated when the first profiler was built (below, before the run).
		tp, _ := truthprof.NewPairProfiler(pts[pi], spec.Noise, rand.New(rand.NewPCG(seed, seed^0xda942042e4dd58b5)))
		return tp
	}
	if _, err := truthprof.NewPairProfiler(pts[0], spec.Noise, rand.New(rand.NewPCG(1, 2))); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := spec.Rules.For(cfgs[0].budgets, pts[0].Batches).Validate(); err != nil {
		return nil, fmt.Errorf("bench: decision rules: %w", err)
	}
	var done atomic.Int64
	total := 0
	for _, jb := range jobs {
		if jb.cfg >= 0 {
			total++
		} else {
			total += len(cfgs) / len(pairs)
		}
	}
	// judge decides over what the searcher profiled, as the daemon does after a search,
	// and scores that decision on the truth. The margin oracles profile nothing and are
	// scored on their own answer.
	judge := func(pi int, c *benchConfig, res search.Result, err error, prof *truthprof.TruthProfiler, oracle bool) Outcome {
		var d plan.Decision
		decided := res
		if err == nil && !oracle {
			d, err = spec.Rules.For(c.budgets, pts[pi].Batches).Decide(prof.Known())
			if err != nil {
				err = fmt.Errorf("decide: %w", err)
			}
			decided = search.Result{Choice: d.Best, Found: err == nil, Feasible: err == nil && d.Feasible}
		}
		o := score(pairs[pi], pts[pi], c, decided, err, prof.Count())
		o.Decision, o.Searcher = d, res
		if spec.Progress != nil {
			spec.Progress(int(done.Add(1)), total)
		}
		return o
	}
	err = forEach(ctx, workers, len(jobs), func(ji int) error {
		jb := jobs[ji]
		t0 := time.Now()
		defer func() { wall[jb.s][ji] = time.Since(t0) }()
		name := spec.Searchers[jb.s]
		if jb.cfg >= 0 {
			c := &cfgs[jb.cfg]
			seed := deriveSeed(spec.Seed, name, "config", uint64(jb.cfg))
			prof := profiler(jb.pair, deriveSeed(spec.Seed, "", "config", uint64(jb.cfg)))
			s := searchers[jb.s]
			m, oracle := margins[jb.s]
			if oracle {
				s = &MarginOracle{pt: pts[jb.pair], MarginRel: m, Admission: spec.Rules.Admission}
			}
			res, err := s.Search(ctx, problem(jb.pair, c.budgets, seed), prof)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			outcomes[jb.s][jb.cfg] = judge(jb.pair, c, res, err, prof, oracle)
			return nil
		}
		pl := searchers[jb.s].(search.PairLearner) // jobs holds pair-learner jobs for these only
		seed := deriveSeed(spec.Seed, name, "pair", uint64(jb.pair))
		camp := profiler(jb.pair, deriveSeed(spec.Seed, "", "pair", uint64(jb.pair)))
		ans, lerr := pl.Learn(ctx, problem(jb.pair, plan.Budgets{}, seed), camp)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		for ci := range cfgs {
			c := &cfgs[ci]
			if c.pair != jb.pair {
				continue
			}
			if lerr != nil {
				o := judge(jb.pair, c, search.Result{}, fmt.Errorf("learn: %w", lerr), camp, false)
				o.Profiles = 0
				o.Campaign = camp.Count()
				outcomes[jb.s][ci] = o
				continue
			}
			cseed := deriveSeed(spec.Seed, "", "config", uint64(ci))
			prof := camp.Fork(rand.New(rand.NewPCG(cseed, cseed^0xda942042e4dd58b5)))
			res, err := ans.Answer(ctx, c.budgets, prof)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			o := judge(jb.pair, c, res, err, prof, false)
			o.Campaign = camp.Count()
			outcomes[jb.s][ci] = o
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	for si, name := range spec.Searchers {
		var st SearcherStats
		if name == "oracle" {
			st = oracleStats(cfgs, pts)
			outcomes[si] = nil
		} else {
			st = summarise(name, outcomes[si])
			for _, d := range wall[si] {
				st.WallS += d.Seconds()
			}
		}
		rep.Searchers = append(rep.Searchers, st)
	}
	rep.Outcomes = outcomes
	rep.WallS = time.Since(start).Seconds()
	return rep, nil
}

// problemOf is the pair's problem without budgets: space, workloads, batch sizes.
func problemOf(pt *truthprof.PairTruth) search.Problem {
	return search.Problem{Space: pt.Space, Train: pt.Train, Infer: pt.Infer, TrainBatch: pt.TrainBatch, InferBatches: slices.Clone(pt.Batches)}
}

// score re-evaluates an answer on the noise-free truth.
func score(p Pair, pt *truthprof.PairTruth, c *benchConfig, res search.Result, err error, profiles int) Outcome {
	o := Outcome{Pair: p, Budgets: c.budgets, Profiles: profiles, Err: err}
	switch {
	case !c.oracle.Feasible && err == nil && res.Found && res.Feasible:
		o.Status = "false_claim"
	case !c.oracle.Feasible:
		o.Status = "oracle_infeasible"
	case err != nil || !res.Found || !res.Feasible:
		o.Status = "no_answer"
	default:
		e, ok := pt.Score(c.model, res.Choice.Mode, res.Choice.Batch, res.Choice.MicroBatch)
		if !ok {
			o.Status, o.Err = "no_answer", fmt.Errorf("choice %s batch %d micro-batch %d is not in the ground truth", res.Choice.Mode, res.Choice.Batch, res.Choice.MicroBatch)
			break
		}
		o.Choice = e
		if e.Feasible {
			o.Status = "within"
			o.Ratio = e.ThroughputSPS / c.oracle.Choice.ThroughputSPS
		} else {
			o.Status = "violation"
		}
	}
	return o
}

func summarise(name string, outs []Outcome) SearcherStats {
	st := SearcherStats{Name: name}
	var ratios []float64
	var within, viol, none, profiles, unsat, false_ int
	campaignSeen := map[Pair]bool{}
	for _, o := range outs {
		if o.Err != nil {
			st.Errors++
		}
		// A pair learner's campaign counts once per pair.
		if o.Campaign > 0 && !campaignSeen[o.Pair] {
			campaignSeen[o.Pair] = true
			profiles += o.Campaign
		}
		profiles += o.Profiles
		st.MaxProfiles = max(st.MaxProfiles, o.Campaign+o.Profiles)
		switch o.Status {
		case "oracle_infeasible":
			unsat++
			continue
		case "false_claim":
			unsat++
			false_++
			continue
		case "within":
			within++
		case "violation":
			viol++
		default:
			none++
		}
		ratios = append(ratios, o.Ratio)
	}
	st.WithinBudget = within
	if n := float64(len(ratios)); n > 0 {
		st.WithinBudgetPct = 100 * float64(within) / n
		st.ViolationPct = 100 * float64(viol) / n
		st.NoAnswerPct = 100 * float64(none) / n
		st.MeanOptRatio = stat.Mean(ratios, nil)
		slices.Sort(ratios)
		st.P5OptRatio = stat.Quantile(0.05, stat.Empirical, ratios, nil)
	}
	if unsat > 0 {
		st.FalseClaimPct = 100 * float64(false_) / float64(unsat)
	}
	if len(outs) > 0 {
		st.MeanProfiles = float64(profiles) / float64(len(outs))
	}
	return st
}

// oracleStats is the oracle's row: it always answers optimally where anything is
// feasible, having looked at every mode of the pair.
func oracleStats(cfgs []benchConfig, pts []*truthprof.PairTruth) SearcherStats {
	return oracleRow(len(cfgs), func(i int) (int, bool) { return pts[cfgs[i].pair].Len(), cfgs[i].oracle.Feasible })
}

// oracleRow is the oracle's row over n configurations; at(i) says how many modes the
// oracle scanned for configuration i and whether anything was feasible there.
func oracleRow(n int, at func(i int) (modes int, feasible bool)) SearcherStats {
	st := SearcherStats{Name: "oracle"}
	feasible, modes := 0, 0
	for i := range n {
		m, ok := at(i)
		modes += m
		st.MaxProfiles = max(st.MaxProfiles, m)
		if ok {
			feasible++
		}
	}
	st.WithinBudget = feasible
	if feasible > 0 {
		st.WithinBudgetPct, st.MeanOptRatio, st.P5OptRatio = 100, 1, 1
	}
	if n > 0 {
		st.MeanProfiles = float64(modes) / float64(n)
	}
	return st
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
