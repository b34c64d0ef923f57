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

// runMulti is RunBench for spec.Streams ≥ 2 inference streams (issue 19): every training
// workload with every set of spec.Streams inference workloads of the table, each stream
// at the same rate and latency budget, × power budgets. The baselines (preset, maxn,
// random-<K>) profile their modes with noise, plan.MultiDecider (spec.Rules) decides over
// them, and the decision is scored on the truth against MultiOracle; the margin oracles
// (oracle-m<percent>, MultiMarginOracle) keep the decision's admission room. GMD and ALS
// search for one stream only, so they are refused here.
func runMulti(ctx context.Context, spec BenchSpec) (*BenchReport, error) {
	start := time.Now()
	k := spec.Streams
	listers := make([]search.ModeLister, len(spec.Searchers))
	margins := map[int]float64{} // the margin oracles, by searcher index
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
		refuse := fmt.Errorf("bench: searcher %q plans for one inference stream; with %d streams use oracle, oracle-m<percent>, preset, maxn or random-<K> (GMD and ALS for several streams are issue 19's next step)", n, k)
		if sp.Kind != search.KindPreset && sp.Kind != search.KindMaxN && sp.Kind != search.KindRandom {
			return nil, refuse
		}
		s, err := search.New(n, search.Env{})
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		ml, ok := s.(search.ModeLister)
		if !ok {
			return nil, refuse
		}
		listers[i] = ml
	}
	if len(spec.Pairs) > 0 {
		return nil, errors.New("bench: pairs and several streams: choose the workloads by --streams alone (every training workload with every set of that many inference workloads)")
	}
	infers := spec.Truth.Workloads(truth.Infer)
	if len(infers) < k {
		return nil, fmt.Errorf("bench: %d streams but the ground truth has %d inference workloads (%v)", k, len(infers), infers)
	}
	type set struct {
		name string
		mt   *truthprof.MultiTruth
	}
	var sets []set
	for _, t := range spec.Truth.Workloads(truth.Train) {
		for _, comb := range combinations(infers, k) {
			mt, err := truthprof.NewMultiTruth(spec.Truth, []string{t}, comb, nil)
			if err != nil {
				return nil, fmt.Errorf("bench: %s with %v: %w", t, comb, err)
			}
			sets = append(sets, set{t + ":" + strings.Join(comb, "+"), mt})
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
	rep := &BenchReport{ConfigsTotal: len(cfgs), Pairs: len(sets), Streams: k, Noise: spec.Noise, Seed: spec.Seed, Rules: spec.Rules}
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
	type job struct{ s, cfg int }
	var jobs []job
	for si, l := range listers {
		if _, margin := margins[si]; l != nil || margin {
			for ci := range cfgs {
				jobs = append(jobs, job{si, ci})
			}
		}
	}
	var done atomic.Int64
	err := forEach(ctx, workers, len(jobs), func(ji int) error {
		jb := jobs[ji]
		t0 := time.Now()
		c := &cfgs[jb.cfg]
		s := sets[c.set]
		p := search.Problem{Space: s.mt.Space(), Presets: presets[c.set], PresetNames: spec.PresetNames, MaxProfiles: spec.MaxProfiles,
			Seed: deriveSeed(spec.Seed, spec.Searchers[jb.s], "config", uint64(jb.cfg))}
		var o Outcome
		if mr, margin := margins[jb.s]; margin {
			o = scoreMarginMulti(s.name, s.mt, c, mr, spec.Rules.Admission)
		} else {
			o = scoreMulti(s.name, s.mt, c, listers[jb.s], p, spec, deriveSeed(spec.Seed, "", "config", uint64(jb.cfg)))
		}
		outcomes[jb.s][jb.cfg] = o
		wall[jb.s][jb.cfg] = time.Since(t0)
		if spec.Progress != nil {
			spec.Progress(int(done.Add(1)), len(jobs))
		}
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
	o := Outcome{Pair: Pair{Train: name}}
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
	o.Profiles = len(profiles)
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
