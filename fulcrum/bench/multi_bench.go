package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/truthprof"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/search"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// multiConfig is one configuration of a several-stream sweep.
type multiConfig struct {
	set     int
	budgets plan.MultiBudgets
	oracle  plan.MultiPlan
}

// multiSet is one set of training and inference workloads of a several-stream sweep.
type multiSet struct {
	name string // train+train:infer+infer, the outcomes' Pair.Train
	mt   *truthprof.MultiTruth
}

// multiShape is the sweep of spec.Streams ≥ 2 inference streams or spec.Jobs ≥ 2
// training jobs (issue 19): every set of spec.Jobs training workloads (equal time
// shares) with every set of spec.Streams inference workloads of the table, each stream
// at the same rate and latency budget, × power budgets. The baselines (preset, maxn,
// random-<K>) profile their modes with noise, plan.MultiDecider (spec.Rules) decides
// over them, and the decision is scored on the truth against MultiOracle; the margin
// oracles (oracle-m<percent>, MultiMarginOracle) keep the decision's admission room.
//
// GMD and ALS run as fulcrumd runs them with several streams (docs/controller.md
// "Several streams and training jobs"): the searcher walks the pooled pair
// (plan.PooledPair: the first training job and one stream standing for all of them, at
// plan.PooledBudgets) while every workload is measured at each mode it asks for
// (truthprof.PooledProfiler); the decision is plan.MultiDecider over those measurements.
type multiShape struct {
	spec    BenchSpec
	r       roster
	k, m    int
	listers []search.ModeLister // the baselines, by searcher index
	pooled  []bool              // GMD and ALS (in r.built), by searcher index
	wsets   []multiSet
	presets [][]powermode.Mode // spec.Presets snapped into each set's space
	cfgs    []multiConfig
}

func newMultiShape(spec BenchSpec, r roster) (*multiShape, error) {
	k, m := max(spec.Streams, 1), max(spec.Jobs, 1)
	sh := &multiShape{spec: spec, r: r, k: k, m: m, listers: make([]search.ModeLister, len(r.names)), pooled: make([]bool, len(r.names))}
	if err := sh.classify(); err != nil {
		return nil, err
	}
	if len(spec.Pairs) > 0 {
		return nil, errors.New("bench: pairs and several streams: choose the workloads by --streams alone (every training workload with every set of that many inference workloads)")
	}
	if err := sh.buildSets(); err != nil {
		return nil, err
	}
	err := eachConfig(spec, len(sh.wsets), func(si int, r, l, pw float64) error {
		b := plan.MultiBudgets{PowerMW: pw, Quantile: spec.Quantile}
		for _, name := range sh.wsets[si].mt.Infers {
			b.Streams = append(b.Streams, plan.StreamBudget{Name: name, RateRPS: r, LatencyMS: l})
		}
		sh.cfgs = append(sh.cfgs, multiConfig{set: si, budgets: b})
		return b.WithDefaults().Validate()
	})
	if err != nil {
		return nil, err
	}
	if len(sh.cfgs) == 0 {
		return nil, errors.New("bench: the ground truth has no training workload")
	}
	if err := spec.Rules.ForMulti(sh.cfgs[0].budgets, nil).Validate(); err != nil {
		return nil, fmt.Errorf("bench: decision rules: %w", err)
	}
	first := sh.wsets[0].mt
	if _, err := first.Measure(first.Profiles()[0].Mode, spec.Noise, 0); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return sh, nil
}

// classify sorts the searchers: the margin oracles (in the roster), GMD and ALS (run on
// the pooled pair), and the baselines, which must list their modes (search.ModeLister).
func (sh *multiShape) classify() error {
	for i, n := range sh.r.names {
		if n == "oracle" {
			continue
		}
		if err := sh.r.parseErr[i]; err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		switch sh.r.kinds[i] {
		case search.KindMarginOracle:
			continue
		case search.KindGMD, search.KindALS:
			sh.pooled[i] = true
			continue
		}
		ml, ok := sh.r.built[i].(search.ModeLister)
		if !ok {
			return fmt.Errorf("bench: searcher %q: with %d streams use oracle, oracle-m<percent>, gmd, als, preset, maxn or random-<K>", n, sh.k)
		}
		sh.listers[i] = ml
	}
	return nil
}

// buildSets makes every set of sh.m training workloads with every set of sh.k inference
// workloads of the table, with the presets snapped into each set's space.
func (sh *multiShape) buildSets() error {
	infers, trains := sh.spec.Truth.Workloads(truth.Infer), sh.spec.Truth.Workloads(truth.Train)
	if len(infers) < sh.k {
		return fmt.Errorf("bench: %d streams but the ground truth has %d inference workloads (%v)", sh.k, len(infers), infers)
	}
	if len(trains) < sh.m {
		return fmt.Errorf("bench: %d training jobs but the ground truth has %d training workloads (%v)", sh.m, len(trains), trains)
	}
	for _, ts := range combinations(trains, sh.m) {
		for _, comb := range combinations(infers, sh.k) {
			mt, err := truthprof.NewMultiTruth(sh.spec.Truth, ts, comb, nil)
			if err != nil {
				return fmt.Errorf("bench: %v with %v: %w", ts, comb, err)
			}
			if !sh.spec.Micro {
				mt = mt.WithoutMicro()
			}
			var snapped []powermode.Mode
			for _, p := range sh.spec.Presets {
				snapped = append(snapped, mt.Space().Snap(p))
			}
			sh.wsets = append(sh.wsets, multiSet{strings.Join(ts, "+") + ":" + strings.Join(comb, "+"), mt})
			sh.presets = append(sh.presets, snapped)
		}
	}
	return nil
}

func (sh *multiShape) sets() int       { return len(sh.wsets) }
func (sh *multiShape) configs() int    { return len(sh.cfgs) }
func (sh *multiShape) setOf(c int) int { return sh.cfgs[c].set }

// oracle is MultiOracle per configuration.
func (sh *multiShape) oracle(ctx context.Context, workers int) error {
	return forEach(ctx, workers, len(sh.cfgs), func(c int) error {
		pl, err := MultiOracle(sh.wsets[sh.cfgs[c].set].mt, sh.cfgs[c].budgets)
		sh.cfgs[c].oracle = pl
		return err
	})
}

func (sh *multiShape) oracleAt(c int) (int, bool) {
	return sh.wsets[sh.cfgs[c].set].mt.Len(), sh.cfgs[c].oracle.Feasible
}

func (sh *multiShape) role(s int) role {
	if _, margin := sh.r.margins[s]; margin {
		return rolePerConfig
	}
	if sh.pooled[s] {
		if _, learner := sh.r.built[s].(search.PairLearner); learner {
			return rolePerSet
		}
		return rolePerConfig
	}
	if sh.listers[s] != nil {
		return rolePerConfig
	}
	return roleNone
}

func (sh *multiShape) describe(rep *BenchReport) {
	rep.Pairs, rep.Streams, rep.Jobs = len(sh.wsets), sh.k, sh.m
	rep.Micro = slices.ContainsFunc(sh.wsets, func(ws multiSet) bool { return ws.mt.HasMicro() })
}

// pooledProblem is the search problem over set si's pooled pair (plan.PooledPair): every
// workload's space, the first job, the batch sizes every stream has, and b's pooled
// budgets (nil for a campaign, which is for every budget).
func (sh *multiShape) pooledProblem(si int, b *plan.MultiBudgets, seed uint64) search.Problem {
	mt, spec := sh.wsets[si].mt, sh.spec
	p := search.Problem{Space: mt.Space(), Train: mt.Trains[0], TrainBatch: mt.Profiles()[0].Train[0].Batch,
		Infer: "pooled:" + strings.Join(mt.Infers, "+"), InferBatches: commonBatches(mt.Batches),
		Presets: sh.presets[si], PresetNames: spec.PresetNames, MaxProfiles: spec.MaxProfiles, Seed: seed, NoiseRel: spec.Noise, Rules: spec.Rules}
	if b != nil {
		p.Budgets = plan.PooledBudgets(*b)
	}
	return p
}

func (sh *multiShape) evaluate(ctx context.Context, s, ci int) Outcome {
	c := &sh.cfgs[ci]
	set := sh.wsets[c.set]
	seed := deriveSeed(sh.spec.Seed, sh.r.names[s], "config", uint64(ci))
	noiseBase := deriveSeed(sh.spec.Seed, "", "config", uint64(ci))
	if mr, margin := sh.r.margins[s]; margin {
		return scoreMarginMulti(set.name, set.mt, c, mr, sh.spec.Rules.Admission)
	}
	if sh.pooled[s] {
		return scorePooled(ctx, set.name, set.mt, c, sh.r.built[s], sh.pooledProblem(c.set, &c.budgets, seed), sh.spec, noiseBase)
	}
	p := search.Problem{Space: set.mt.Space(), Presets: sh.presets[c.set], PresetNames: sh.spec.PresetNames, MaxProfiles: sh.spec.MaxProfiles, Seed: seed}
	return scoreMulti(set.name, set.mt, c, sh.listers[s], p, sh.spec, noiseBase)
}

// learn is ALS on a set: one campaign for the set's pooled pair, an answer per
// configuration.
func (sh *multiShape) learn(ctx context.Context, s, si int, scored func(c int, o Outcome)) error {
	pl := sh.r.built[s].(search.PairLearner) // role gives perSet to pair learners only
	set := sh.wsets[si]
	// Every stream runs at the swept rate, so the pooled pair depends on no
	// configuration's rates: equal weights serve the whole campaign.
	ones := make([]float64, len(set.mt.Infers))
	for i := range ones {
		ones[i] = 1
	}
	camp, err := truthprof.NewPooledProfiler(set.mt, sh.spec.Noise, deriveSeed(sh.spec.Seed, "", "pair", uint64(si)), ones)
	if err != nil {
		return err
	}
	ans, lerr := pl.Learn(ctx, sh.pooledProblem(si, nil, deriveSeed(sh.spec.Seed, sh.r.names[s], "pair", uint64(si))), camp)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	for ci := range sh.cfgs {
		c := &sh.cfgs[ci]
		if c.set != si {
			continue
		}
		var o Outcome
		if lerr != nil {
			// Scored as the pair scores a failed campaign: no answer where the oracle
			// can satisfy the budgets, oracle_infeasible where it cannot.
			o = scoreMultiProfiles(set.name, set.mt, c, nil, fmt.Errorf("learn: %w", lerr), sh.spec)
		} else {
			prof := camp.Fork(deriveSeed(sh.spec.Seed, "", "config", uint64(ci)))
			_, aerr := ans.Answer(ctx, plan.PooledBudgets(c.budgets), prof)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			o = scoreMultiProfiles(set.name, set.mt, c, prof.Multi(), aerr, sh.spec)
			o.Profiles = prof.Count()
		}
		o.Campaign = camp.Count()
		scored(ci, o)
	}
	return nil
}

// scoreMulti profiles a baseline's modes with noise, decides over them as the daemon
// would (plan.MultiDecider) and scores the decision on the truth.
func scoreMulti(name string, mt *truthprof.MultiTruth, c *multiConfig, l search.ModeLister, p search.Problem, spec BenchSpec, noiseBase uint64) Outcome {
	modes, err := l.Modes(p)
	var profiles []plan.MultiProfile
	seen := map[powermode.Mode]bool{}
	for _, m := range modes {
		if err != nil || seen[m] {
			continue
		}
		seen[m] = true
		var mp plan.MultiProfile
		if mp, err = mt.Measure(m, spec.Noise, noiseBase); err == nil {
			profiles = append(profiles, mp)
		}
	}
	o := scoreMultiProfiles(name, mt, c, profiles, err, spec)
	o.Profiles = len(profiles)
	return o
}

// scoreMultiProfiles decides over profiles as the daemon would (plan.MultiDecider) and
// scores the decision on the truth; err is what went wrong getting them (no decision).
func scoreMultiProfiles(name string, mt *truthprof.MultiTruth, c *multiConfig, profiles []plan.MultiProfile, err error, spec BenchSpec) Outcome {
	o := Outcome{Pair: Pair{Train: name}}
	var dec plan.MultiDecision
	if err == nil {
		dec, err = spec.Rules.ForMulti(c.budgets, mt.AllBatches()).Decide(profiles)
	}
	o.Err = err
	claimed := err == nil && dec.Feasible
	switch {
	case !c.oracle.Feasible && claimed:
		o.Status = "false_claim"
	case !c.oracle.Feasible:
		o.Status = "oracle_infeasible"
	case !claimed:
		o.Status = "no_answer"
	default:
		m, merr := plan.NewMultiModel(c.budgets, mt.AllBatches())
		tp, ok := mt.Lookup(dec.Best.Mode)
		if merr != nil || !ok {
			o.Status, o.Err = "no_answer", fmt.Errorf("score %s: %v", dec.Best.Mode, errors.Join(merr, errors.New("mode not in the truth")))
			break
		}
		micro := dec.Best.MicroBatches
		if micro == nil {
			micro = make([]int, len(tp.Train))
		}
		e, eerr := m.EvaluateMicro(tp, dec.Best.Batches(), micro)
		switch {
		case eerr != nil:
			o.Status, o.Err = "no_answer", eerr
		case e.Feasible:
			o.Status, o.Ratio = "within", e.ObjectiveSPS/c.oracle.Best.ObjectiveSPS
		default:
			o.Status = "violation"
		}
	}
	return o
}

// scorePooled runs a pair searcher on p, the pooled pair's problem (plan.PooledPair: the
// first job and one stream standing for all, at their rates), with every workload
// measured at each mode it asks for, decides jointly over those measurements and scores the decision.
func scorePooled(ctx context.Context, name string, mt *truthprof.MultiTruth, c *multiConfig, s search.Searcher, p search.Problem, spec BenchSpec, noiseBase uint64) Outcome {
	rates := make([]float64, len(c.budgets.Streams))
	for i, sb := range c.budgets.Streams {
		rates[i] = sb.RateRPS
	}
	pp, err := truthprof.NewPooledProfiler(mt, spec.Noise, noiseBase, rates)
	if err != nil {
		return Outcome{Pair: Pair{Train: name}, Status: "no_answer", Err: err}
	}
	_, serr := s.Search(ctx, p, pp)
	o := scoreMultiProfiles(name, mt, c, pp.Multi(), serr, spec)
	o.Profiles = pp.Count()
	return o
}

// commonBatches are the batch sizes every stream has.
func commonBatches(bs [][]int) []int {
	out := slices.Clone(bs[0])
	for _, b := range bs[1:] {
		out = slices.DeleteFunc(out, func(x int) bool { return !slices.Contains(b, x) })
	}
	return out
}

// scoreMarginMulti scores the margin oracle's answer: the truth's best configuration
// that fits with the margin and the admission room, claimed when there is one.
func scoreMarginMulti(name string, mt *truthprof.MultiTruth, c *multiConfig, marginRel float64, adm plan.Admission) Outcome {
	o := Outcome{Pair: Pair{Train: name}}
	best, found, err := MultiMarginOracle(mt, c.budgets, marginRel, adm)
	o.Err = err
	switch {
	case !c.oracle.Feasible && found:
		o.Status = "false_claim"
	case !c.oracle.Feasible:
		o.Status = "oracle_infeasible"
	case err != nil || !found:
		o.Status = "no_answer"
	case best.Feasible:
		o.Status, o.Ratio = "within", best.ObjectiveSPS/c.oracle.Best.ObjectiveSPS
	default:
		o.Status = "violation"
	}
	return o
}

// combinations lists every k-element subset of xs, in order.
func combinations(xs []string, k int) [][]string {
	var out [][]string
	var rec func(start int, cur []string)
	rec = func(start int, cur []string) {
		if len(cur) == k {
			out = append(out, slices.Clone(cur))
			return
		}
		for i := start; i < len(xs); i++ {
			rec(i+1, append(cur, xs[i]))
		}
	}
	rec(0, nil)
	return out
}
