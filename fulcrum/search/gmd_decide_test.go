package search

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/benchtest"
	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/truthprof"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// benchRules are decision rules like fulcrumd's defaults at 3% noise.
func benchRules() plan.Rules {
	return plan.Rules{NoiseRel: 0.03, Confidence: 0.99, Admission: plan.Admission{MarginMS: 5, DevRel: 0.06}}
}

// TestGMDBudgetIncludesRepeats: with the decision's rules and a profiler that can
// remeasure, every search spends at most 15 profiles, repeat measurements included.
func TestGMDBudgetIncludesRepeats(t *testing.T) {
	pt, names, presets := benchtest.SmallPair(t)
	repeated := 0
	for seed := range uint64(6) {
		for _, powW := range []float64{16, 20, 26, 34} {
			for _, latMS := range []float64{60, 150, 300} {
				b := plan.Budgets{RateRPS: 10, LatencyMS: latMS, PowerMW: powW * 1000}
				prof, _ := truthprof.NewPairProfiler(pt, 0.03, rand.New(rand.NewPCG(seed, 7)))
				p := smallProblem(pt, names, presets, b)
				p.NoiseRel, p.Rules = 0.03, benchRules()
				res, err := NewGMD(GMDOptions{}).Search(context.Background(), p, prof)
				if err != nil {
					t.Fatal(err)
				}
				spent := len(res.Profiled) + len(res.Remeasured)
				if spent > DefaultGMDProfiles || prof.Count() != spent {
					t.Errorf("seed %d %v: %d profiled + %d repeats, profiler counted %d; budget %d", seed, b, len(res.Profiled), len(res.Remeasured), prof.Count(), DefaultGMDProfiles)
				}
				if len(res.Remeasured) > 0 {
					repeated++
				}
			}
		}
	}
	if repeated == 0 {
		t.Error("no search remeasured anything: the confirmation for the decision never ran")
	}
}

// TestGMDStartsFromPredictedBest: after the start and the four probes, the next
// profile is the model's predicted best over the whole space (globalPick), not a
// neighbour of a preset.
func TestGMDStartsFromPredictedBest(t *testing.T) {
	pt, names, presets := benchtest.SmallPair(t)
	b := plan.Budgets{RateRPS: 10, LatencyMS: 300, PowerMW: 26000}
	p := smallProblem(pt, names, presets, b)
	p.NoiseRel, p.Rules = 0.03, benchRules()
	prof, _ := truthprof.NewPairProfiler(pt, 0, nil)
	res, err := NewGMD(GMDOptions{}).Search(context.Background(), p, prof)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Profiled) < 6 {
		t.Fatalf("profiled %d modes, want the start, 4 probes and more", len(res.Profiled))
	}
	// Replay the first five profiles into a fresh walk and ask it for its pick.
	g := NewGMD(GMDOptions{})
	w := g.newWalkForTest(t, p)
	exact, _ := truthprof.NewPairProfiler(pt, 0, nil)
	w.prof = exact
	for _, m := range res.Profiled[:5] {
		idx, _ := p.Space.Index(m)
		if _, err := w.eval(idx); err != nil {
			t.Fatal(err)
		}
	}
	best, bestS := powermode.Index{}, math.Inf(-1)
	for idx, s := range w.score {
		if s > bestS || s == bestS && cmpIndex(idx, best) < 0 {
			best, bestS = idx, s
		}
	}
	pick, _, ok := w.globalPick(best, 0)
	if !ok {
		t.Fatal("no predicted best after the probes")
	}
	if got := res.Profiled[5]; got != p.Space.Mode(pick) {
		t.Errorf("sixth profile %s, the model's predicted best after the probes is %s", got, p.Space.Mode(pick))
	}
}

// TestGMDGlobalPickIsArgmax: the global step's pick is the unprofiled mode with the
// highest predicted θ·P(feasible) over the whole space (checked by brute force).
func TestGMDGlobalPickIsArgmax(t *testing.T) {
	pt, names, presets := benchtest.SmallPair(t)
	b := plan.Budgets{RateRPS: 10, LatencyMS: 150, PowerMW: 20000}
	p := smallProblem(pt, names, presets, b)
	p.NoiseRel, p.Rules = 0.03, benchRules()
	w := NewGMD(GMDOptions{}).newWalkForTest(t, p)
	prof, _ := truthprof.NewPairProfiler(pt, 0.03, rand.New(rand.NewPCG(3, 4)))
	w.prof = prof
	var centre powermode.Index
	for i := range 7 {
		idx, _ := p.Space.Index(pt.ModeAt(i * pt.Len() / 7))
		if _, err := w.eval(idx); err != nil {
			t.Fatal(err)
		}
		centre = idx
	}
	pick, v, ok := w.globalPick(centre, 0)
	if !ok {
		t.Fatal("no pick")
	}
	cp, _ := w.profileAt(centre)
	f, _ := w.fit(centre, p.Space.Dims(), cp)
	bestV := 0.0
	for idx, m := range p.Space.All() {
		if w.isKnown(idx) {
			continue
		}
		pr := f.predict(m, cp)
		pr.Train.Batch = cp.Train.Batch
		sc, err := w.pdec.ScoreAll([]plan.ModeProfile{pr})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sc {
			bestV = math.Max(bestV, s.ThroughputSPS*s.PFeasible)
		}
	}
	if math.Abs(v-bestV) > 1e-9*bestV || w.isKnown(pick) {
		t.Errorf("pick %v with θ·P %.4f (known %v), brute force best %.4f", pick, v, w.isKnown(pick), bestV)
	}
}

// TestGMDConfirmsForTheDecision: candidates measured just inside the budget, which the
// decision does not claim from one measurement, are remeasured until it claims them
// or the budget is spent; the decision then claims more often than without repeats,
// and rarely over the true budget.
func TestGMDConfirmsForTheDecision(t *testing.T) {
	pt := benchtest.PairFromRows(t, benchtest.EdgeRows([]float64{13500, 17000, 19200, 21500}))
	b := plan.Budgets{RateRPS: 5, LatencyMS: 1000, PowerMW: 20000}
	model, _ := plan.NewModel(b, pt.Batches)
	const runs = 100
	claimed := map[string]int{}
	theta := map[string]float64{}
	var violations int
	for seed := range uint64(runs) {
		for _, name := range []string{"confirm", "none"} {
			o := GMDOptions{}
			if name == "none" {
				o.Confirm = -1
			}
			prof, _ := truthprof.NewPairProfiler(pt, 0.03, rand.New(rand.NewPCG(seed, 11)))
			p := problemOf(pt)
			p.Budgets, p.NoiseRel, p.Rules = b, 0.03, benchRules()
			if _, err := NewGMD(o).Search(context.Background(), p, prof); err != nil {
				t.Fatal(err)
			}
			if prof.Count() > DefaultGMDProfiles {
				t.Fatalf("%d profiles", prof.Count())
			}
			d, err := p.Rules.For(b, pt.Batches).Decide(prof.Known())
			if err != nil {
				t.Fatal(err)
			}
			if !d.Feasible || d.Best.ThroughputSPS < 0 {
				continue
			}
			claimed[name]++
			e, ok := pt.Score(model, d.Best.Mode, d.Best.Batch, d.Best.MicroBatch)
			if !ok || !e.Feasible {
				if name == "confirm" {
					violations++
				}
				continue
			}
			theta[name] += e.ThroughputSPS
		}
	}
	t.Logf("decision claims: %d with confirmation (true θ sum %.0f), %d without (%.0f); %d violations", claimed["confirm"], theta["confirm"], claimed["none"], theta["none"], violations)
	if theta["confirm"] <= theta["none"] {
		t.Errorf("true throughput claimed: %.0f with confirmation, %.0f without: repeats should let the decision claim more", theta["confirm"], theta["none"])
	}
	if violations > runs*4/100 {
		t.Errorf("%d of %d decisions over the true budget", violations, runs)
	}
}

// newWalkForTest builds a walk as Search does (without its profiler).
func (g *GMD) newWalkForTest(t *testing.T, p Problem) *walk {
	t.Helper()
	model, err := plan.NewModel(p.Rules.Admission.Budgets(p.Budgets), p.InferBatches)
	if err != nil {
		t.Fatal(err)
	}
	w := &walk{ctx: context.Background(), sp: p.Space, model: model, margin: DefaultGMDMarginSigmas * p.NoiseRel, budget: DefaultGMDProfiles, penalty: g.opts.Penalty,
		score: map[powermode.Index]float64{}, reps: map[powermode.Mode]int{}, sums: map[powermode.Mode]plan.ModeProfile{}}
	if d := p.Rules.For(p.Budgets, p.InferBatches); d.NoiseRel > 0 && d.Validate() == nil {
		w.dec = &d
	}
	w.pdec = w.predictDecider(p)
	w.setTop()
	return w
}
