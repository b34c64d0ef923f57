package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/truthprof"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/search"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// benchConfig is one configuration of the pair sweep.
type benchConfig struct {
	pair    int
	budgets plan.Budgets
	oracle  search.Result
	model   *plan.Model
}

// pairShape is the sweep of training × inference pairs (one trainer, one stream): each
// searcher searches the pair's own space through a noisy replay of the pair
// (truthprof.TruthProfiler), plan.Decider decides over what it profiled, and the
// decision is scored on the truth against the pair's oracle (oracleRate, Oracle).
type pairShape struct {
	spec    BenchSpec
	r       roster
	pairs   []Pair
	pts     []*truthprof.PairTruth
	presets [][]powermode.Mode // spec.Presets snapped into each pair's space
	cfgs    []benchConfig
}

func newPairShape(spec BenchSpec, r roster) (*pairShape, error) {
	sh := &pairShape{spec: spec, r: r}
	if err := sh.buildPairs(); err != nil {
		return nil, err
	}
	err := eachConfig(spec, len(sh.pairs), func(pi int, r, l, pw float64) error {
		b := plan.Budgets{RateRPS: r, LatencyMS: l, PowerMW: pw, Quantile: spec.Quantile}.WithDefaults()
		sh.cfgs = append(sh.cfgs, benchConfig{pair: pi, budgets: b})
		return b.Validate()
	})
	if err != nil {
		return nil, err
	}
	if _, err := truthprof.NewPairProfiler(sh.pts[0], spec.Noise, rand.New(rand.NewPCG(1, 2))); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := spec.Rules.For(sh.cfgs[0].budgets, sh.pts[0].Batches).Validate(); err != nil {
		return nil, fmt.Errorf("bench: decision rules: %w", err)
	}
	return sh, nil
}

// buildPairs makes spec.Pairs (or every training × inference pair of the table) with
// each pair's truth (its micro-batch rows only with spec.Micro) and the presets snapped
// into its space.
func (sh *pairShape) buildPairs() error {
	sh.pairs = pairsOf(sh.spec.Truth, sh.spec.Pairs)
	if len(sh.pairs) == 0 {
		return errors.New("bench: the ground truth has no training × inference pair")
	}
	for _, p := range sh.pairs {
		pt, err := truthprof.NewPairTruth(sh.spec.Truth, p.Train, p.Infer, 0, nil)
		if err != nil {
			return fmt.Errorf("bench: pair %s: %w", p, err)
		}
		if !sh.spec.Micro {
			pt = pt.WithoutMicro()
		}
		var snapped []powermode.Mode
		for _, m := range sh.spec.Presets {
			snapped = append(snapped, pt.Space.Snap(m))
		}
		sh.pts, sh.presets = append(sh.pts, pt), append(sh.presets, snapped)
	}
	return nil
}

func (sh *pairShape) sets() int       { return len(sh.pairs) }
func (sh *pairShape) configs() int    { return len(sh.cfgs) }
func (sh *pairShape) setOf(c int) int { return sh.cfgs[c].pair }

// oracle scans each pair's truth once per arrival rate (oracleRate: the figures that
// do not depend on the latency and power budgets) and answers every configuration of
// that rate from it.
func (sh *pairShape) oracle(ctx context.Context, workers int) error {
	rates := len(sh.spec.RatesRPS)
	perRate := len(sh.cfgs) / len(sh.pairs) / rates
	quantile := plan.Budgets{Quantile: sh.spec.Quantile}.WithDefaults().Quantile
	return forEach(ctx, workers, len(sh.pairs)*rates, func(j int) error {
		pi := j / rates
		o, err := newOracleRate(sh.pts[pi], sh.spec.RatesRPS[j%rates], quantile)
		if err != nil {
			return err
		}
		for c := j * perRate; c < (j+1)*perRate; c++ { // configurations are laid out pair-major, then rate
			m, err := plan.NewModel(sh.cfgs[c].budgets, sh.pts[pi].Batches)
			if err != nil {
				return err
			}
			sh.cfgs[c].model = m
			sh.cfgs[c].oracle = o.answer(m)
		}
		return nil
	})
}

func (sh *pairShape) oracleAt(c int) (int, bool) {
	return sh.pts[sh.cfgs[c].pair].Len(), sh.cfgs[c].oracle.Feasible
}

func (sh *pairShape) role(s int) role {
	if _, margin := sh.r.margins[s]; margin {
		return rolePerConfig
	}
	switch sh.r.built[s].(type) {
	case nil:
		return roleNone
	case search.PairLearner:
		return rolePerSet
	}
	return rolePerConfig
}

func (sh *pairShape) describe(rep *BenchReport) {
	rep.Pairs = len(sh.pairs)
	rep.Micro = slices.ContainsFunc(sh.pts, func(pt *truthprof.PairTruth) bool { return len(pt.MicroBatches) > 0 })
}

// problem is pair pi's search problem at budgets b (zero for a campaign).
func (sh *pairShape) problem(pi int, b plan.Budgets, seed uint64) search.Problem {
	p := problemOf(sh.pts[pi])
	p.Budgets, p.Presets, p.PresetNames, p.MaxProfiles, p.Seed = b, sh.presets[pi], sh.spec.PresetNames, sh.spec.MaxProfiles, seed
	p.NoiseRel = sh.spec.Noise
	p.Rules = sh.spec.Rules
	return p
}

// profiler is a noisy replay of pair pi seeded by seed (the noise was checked when the
// shape was built).
func (sh *pairShape) profiler(pi int, seed uint64) *truthprof.TruthProfiler {
	tp, _ := truthprof.NewPairProfiler(sh.pts[pi], sh.spec.Noise, rand.New(rand.NewPCG(seed, seed^0xda942042e4dd58b5)))
	return tp
}

func (sh *pairShape) evaluate(ctx context.Context, s, ci int) Outcome {
	c := &sh.cfgs[ci]
	name := sh.r.names[s]
	seed := deriveSeed(sh.spec.Seed, name, "config", uint64(ci))
	prof := sh.profiler(c.pair, deriveSeed(sh.spec.Seed, "", "config", uint64(ci)))
	srch := sh.r.built[s]
	m, oracle := sh.r.margins[s]
	if oracle {
		srch = &MarginOracle{pt: sh.pts[c.pair], MarginRel: m, Admission: sh.spec.Rules.Admission}
	}
	res, err := srch.Search(ctx, sh.problem(c.pair, c.budgets, seed), prof)
	return sh.judge(c, res, err, prof, oracle)
}

func (sh *pairShape) learn(ctx context.Context, s, pi int, scored func(c int, o Outcome)) error {
	pl := sh.r.built[s].(search.PairLearner) // role gives perSet to pair learners only
	seed := deriveSeed(sh.spec.Seed, sh.r.names[s], "pair", uint64(pi))
	camp := sh.profiler(pi, deriveSeed(sh.spec.Seed, "", "pair", uint64(pi)))
	ans, lerr := pl.Learn(ctx, sh.problem(pi, plan.Budgets{}, seed), camp)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	for ci := range sh.cfgs {
		c := &sh.cfgs[ci]
		if c.pair != pi {
			continue
		}
		if lerr != nil {
			o := sh.judge(c, search.Result{}, fmt.Errorf("learn: %w", lerr), camp, false)
			o.Profiles, o.Campaign = 0, camp.Count()
			scored(ci, o)
			continue
		}
		cseed := deriveSeed(sh.spec.Seed, "", "config", uint64(ci))
		prof := camp.Fork(rand.New(rand.NewPCG(cseed, cseed^0xda942042e4dd58b5)))
		res, err := ans.Answer(ctx, c.budgets, prof)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		o := sh.judge(c, res, err, prof, false)
		o.Campaign = camp.Count()
		scored(ci, o)
	}
	return nil
}

// judge decides over what the searcher profiled, as the daemon does after a search,
// and scores that decision on the truth. The margin oracles profile nothing and are
// scored on their own answer.
func (sh *pairShape) judge(c *benchConfig, res search.Result, err error, prof *truthprof.TruthProfiler, oracle bool) Outcome {
	var d plan.Decision
	decided := res
	if err == nil && !oracle {
		d, err = sh.spec.Rules.For(c.budgets, sh.pts[c.pair].Batches).Decide(prof.Known())
		if err != nil {
			err = fmt.Errorf("decide: %w", err)
		}
		decided = search.Result{Choice: d.Best, Found: err == nil, Feasible: err == nil && d.Feasible}
	}
	o := score(sh.pairs[c.pair], sh.pts[c.pair], c, decided, err, prof.Count())
	o.Decision, o.Searcher = d, res
	return o
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

// pairsOf is pairs, or, when nil, every training × inference pair of the table (the
// one-shot and the lifetime sweeps both).
func pairsOf(tab *truth.Table, pairs []Pair) []Pair {
	if pairs != nil {
		return pairs
	}
	for _, t := range tab.Workloads(truth.Train) {
		for _, i := range tab.Workloads(truth.Infer) {
			pairs = append(pairs, Pair{t, i})
		}
	}
	return pairs
}
