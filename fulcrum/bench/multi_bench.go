package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

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

// runMulti is RunBench for spec.Streams ≥ 2 inference streams or spec.Jobs ≥ 2 training
// jobs (issue 19): every set of spec.Jobs training workloads (equal time shares) with every
// set of spec.Streams inference workloads of the table, each stream at the same rate and
// latency budget, × power budgets. The baselines (preset, maxn,
// random-<K>) profile their modes with noise, plan.MultiDecider (spec.Rules) decides over
// them, and the decision is scored on the truth against MultiOracle; the margin oracles
// (oracle-m<percent>, MultiMarginOracle) keep the decision's admission room.
//
// GMD and ALS run as fulcrumd runs them with several streams (docs/controller.md
// "Several streams and training jobs"): the searcher walks the pooled pair
// (plan.PooledPair: the first training job and one stream standing for all of them, at
// plan.PooledBudgets) while every workload is measured at each mode it asks for
// (truthprof.PooledProfiler); the decision is plan.MultiDecider over those measurements.
func runMulti(ctx context.Context, spec BenchSpec) (*BenchReport, error) {
	start := time.Now()
	k, m := max(spec.Streams, 1), max(spec.Jobs, 1)
	listers := make([]search.ModeLister, len(spec.Searchers))
	pairSearch := make([]search.Searcher, len(spec.Searchers)) // GMD and ALS, by searcher index
	margins := map[int]float64{}                               // the margin oracles, by searcher index
	build := spec.Build
	if build == nil {
		build = func(name string) (search.Searcher, error) { return search.New(name, search.Env{}) }
	}
	for i, n := range spec.Searchers {
		if n == "oracle" {
			continue
		}
		sp, err := search.Parse(n)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		if sp.Kind == search.KindMarginOracle {
			margins[i] = sp.MarginRel
			continue
		}
		s, err := build(n)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		if sp.Kind == search.KindGMD || sp.Kind == search.KindALS {
			pairSearch[i] = s
			continue
		}
		ml, ok := s.(search.ModeLister)
		if !ok {
			return nil, fmt.Errorf("bench: searcher %q: with %d streams use oracle, oracle-m<percent>, gmd, als, preset, maxn or random-<K>", n, k)
		}
		listers[i] = ml
	}
	if len(spec.Pairs) > 0 {
		return nil, errors.New("bench: pairs and several streams: choose the workloads by --streams alone (every training workload with every set of that many inference workloads)")
	}
	infers, trains := spec.Truth.Workloads(truth.Infer), spec.Truth.Workloads(truth.Train)
	if len(infers) < k {
		return nil, fmt.Errorf("bench: %d streams but the ground truth has %d inference workloads (%v)", k, len(infers), infers)
	}
	if len(trains) < m {
		return nil, fmt.Errorf("bench: %d training jobs but the ground truth has %d training workloads (%v)", m, len(trains), trains)
	}
	type set struct {
		name string
		mt   *truthprof.MultiTruth
	}
	var sets []set
	for _, ts := range combinations(trains, m) {
		for _, comb := range combinations(infers, k) {
			mt, err := truthprof.NewMultiTruth(spec.Truth, ts, comb, nil)
			if err != nil {
				return nil, fmt.Errorf("bench: %v with %v: %w", ts, comb, err)
			}
			sets = append(sets, set{strings.Join(ts, "+") + ":" + strings.Join(comb, "+"), mt})
		}
	}
	var cfgs []multiConfig
	for si, s := range sets {
		for _, r := range spec.RatesRPS {
			for _, l := range spec.LatenciesMS {
				for _, pw := range spec.PowersMW {
					b := plan.MultiBudgets{PowerMW: pw, Quantile: spec.Quantile}
					for _, name := range s.mt.Infers {
						b.Streams = append(b.Streams, plan.StreamBudget{Name: name, RateRPS: r, LatencyMS: l})
					}
					if err := b.WithDefaults().Validate(); err != nil {
						return nil, fmt.Errorf("bench: budgets rate %g latency %g ms power %g mW: %w", r, l, pw, err)
					}
					cfgs = append(cfgs, multiConfig{set: si, budgets: b})
				}
			}
		}
	}
	if len(cfgs) == 0 {
		return nil, errors.New("bench: the ground truth has no training workload")
	}
	if err := spec.Rules.ForMulti(cfgs[0].budgets, nil).Validate(); err != nil {
		return nil, fmt.Errorf("bench: decision rules: %w", err)
	}
	if _, err := sets[0].mt.Measure(sets[0].mt.Profiles()[0].Mode, spec.Noise, 0); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	workers := max(1, spec.Parallel)
	if err := forEach(ctx, workers, len(cfgs), func(c int) error {
		pl, err := MultiOracle(sets[cfgs[c].set].mt, cfgs[c].budgets)
		cfgs[c].oracle = pl
		return err
	}); err != nil {
		return nil, fmt.Errorf("bench: oracle: %w", err)
	}
	rep := &BenchReport{ConfigsTotal: len(cfgs), Pairs: len(sets), Streams: k, Jobs: m, Noise: spec.Noise, Seed: spec.Seed, Rules: spec.Rules}
	for _, c := range cfgs {
		if !c.oracle.Feasible {
			rep.ConfigsOracleInfeasible++
		}
	}
	// Each set's presets, snapped into its space, as the pair bench snaps them.
	presets := make([][]powermode.Mode, len(sets))
	for i, s := range sets {
		for _, m := range spec.Presets {
			presets[i] = append(presets[i], s.mt.Space().Snap(m))
		}
	}
	outcomes := make([][]Outcome, len(spec.Searchers))
	wall := make([][]time.Duration, len(spec.Searchers))
	for i := range outcomes {
		outcomes[i], wall[i] = make([]Outcome, len(cfgs)), make([]time.Duration, len(cfgs))
	}
	// A job is one configuration (cfg ≥ 0), or, for a pair learner (ALS), one set: its
	// campaign, then an answer per configuration of the set.
	type job struct{ s, cfg, set int }
	var jobs []job
	total := 0
	for si := range spec.Searchers {
		_, margin := margins[si]
		if _, learner := pairSearch[si].(search.PairLearner); learner {
			for i := range sets {
				jobs = append(jobs, job{si, -1, i})
			}
			total += len(cfgs)
			continue
		}
		if listers[si] != nil || margin || pairSearch[si] != nil {
			for ci := range cfgs {
				jobs = append(jobs, job{si, ci, cfgs[ci].set})
			}
			total += len(cfgs)
		}
	}
	// pooledProblem is the search problem over set si's pooled pair (plan.PooledPair): every
	// workload's space, the first job, the batch sizes every stream has, and b's pooled
	// budgets (nil for a campaign, which is for every budget).
	pooledProblem := func(si int, b *plan.MultiBudgets, seed uint64) search.Problem {
		mt := sets[si].mt
		p := search.Problem{Space: mt.Space(), Train: mt.Trains[0], TrainBatch: mt.Profiles()[0].Train[0].Batch,
			Infer: "pooled:" + strings.Join(mt.Infers, "+"), InferBatches: commonBatches(mt.Batches),
			Presets: presets[si], PresetNames: spec.PresetNames, MaxProfiles: spec.MaxProfiles, Seed: seed, NoiseRel: spec.Noise, Rules: spec.Rules}
		if b != nil {
			p.Budgets = plan.PooledBudgets(*b)
		}
		return p
	}
	var done atomic.Int64
	progress := func() {
		if spec.Progress != nil {
			spec.Progress(int(done.Add(1)), total)
		}
	}
	err := forEach(ctx, workers, len(jobs), func(ji int) error {
		jb := jobs[ji]
		t0 := time.Now()
		s := sets[jb.set]
		if jb.cfg < 0 { // ALS: one campaign for the set's pooled pair, an answer per configuration
			pl := pairSearch[jb.s].(search.PairLearner)
			// Every stream runs at the swept rate, so the pooled pair depends on no
			// configuration's rates: equal weights serve the whole campaign.
			ones := make([]float64, len(s.mt.Infers))
			for i := range ones {
				ones[i] = 1
			}
			camp, err := truthprof.NewPooledProfiler(s.mt, spec.Noise, deriveSeed(spec.Seed, "", "pair", uint64(jb.set)), ones)
			if err != nil {
				return err
			}
			ans, lerr := pl.Learn(ctx, pooledProblem(jb.set, nil, deriveSeed(spec.Seed, spec.Searchers[jb.s], "pair", uint64(jb.set))), camp)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			for ci := range cfgs {
				c := &cfgs[ci]
				if c.set != jb.set {
					continue
				}
				t1 := time.Now()
				var o Outcome
				if lerr != nil {
					o = Outcome{Pair: Pair{Train: s.name}, Status: "no_answer", Err: fmt.Errorf("learn: %w", lerr)}
				} else {
					prof := camp.Fork(deriveSeed(spec.Seed, "", "config", uint64(ci)))
					_, aerr := ans.Answer(ctx, plan.PooledBudgets(c.budgets), prof)
					if ctx.Err() != nil {
						return ctx.Err()
					}
					o = scoreMultiProfiles(s.name, s.mt, c, prof.Multi(), aerr, spec)
					o.Profiles = prof.Count()
				}
				o.Campaign = camp.Count()
				outcomes[jb.s][ci] = o
				wall[jb.s][ci] = time.Since(t1)
				progress()
			}
			wall[jb.s][firstCfg(cfgs, jb.set)] += time.Since(t0)
			return nil
		}
		c := &cfgs[jb.cfg]
		noiseBase := deriveSeed(spec.Seed, "", "config", uint64(jb.cfg))
		var o Outcome
		switch mr, margin := margins[jb.s]; {
		case margin:
			o = scoreMarginMulti(s.name, s.mt, c, mr, spec.Rules.Admission)
		case pairSearch[jb.s] != nil:
			o = scorePooled(ctx, s.name, s.mt, c, pairSearch[jb.s], pooledProblem(c.set, &c.budgets, deriveSeed(spec.Seed, spec.Searchers[jb.s], "config", uint64(jb.cfg))), spec, noiseBase)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		default:
			p := search.Problem{Space: s.mt.Space(), Presets: presets[c.set], PresetNames: spec.PresetNames, MaxProfiles: spec.MaxProfiles,
				Seed: deriveSeed(spec.Seed, spec.Searchers[jb.s], "config", uint64(jb.cfg))}
			o = scoreMulti(s.name, s.mt, c, listers[jb.s], p, spec, noiseBase)
		}
		outcomes[jb.s][jb.cfg] = o
		wall[jb.s][jb.cfg] = time.Since(t0)
		progress()
		return ctx.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	for si, name := range spec.Searchers {
		var st SearcherStats
		if name == "oracle" {
			st = oracleRow(len(cfgs), func(i int) (int, bool) { return sets[cfgs[i].set].mt.Len(), cfgs[i].oracle.Feasible })
		} else {
			st = summarise(name, outcomes[si])
		}
		for _, d := range wall[si] {
			st.WallS += d.Seconds()
		}
		rep.Searchers = append(rep.Searchers, st)
	}
	rep.Outcomes = outcomes
	rep.WallS = time.Since(start).Seconds()
	return rep, nil
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
		e, eerr := m.Evaluate(tp, dec.Best.Batches())
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

// firstCfg is the index of the first configuration of set si.
func firstCfg(cfgs []multiConfig, si int) int {
	return slices.IndexFunc(cfgs, func(c multiConfig) bool { return c.set == si })
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
