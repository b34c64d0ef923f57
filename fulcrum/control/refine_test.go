package control

import (
	"math"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// The pooling rule of live refinement (docs/design.md §9 "Live refinement"): each
// quantity's live ratio samples and the stored profile (ratio 1) weighed by inverse
// variance, a window worth at most one profiled repeat.
func TestPoolRatio(t *testing.T) {
	const noise = 0.03
	cases := []struct {
		name        string
		samples     []float64
		n0          int
		wantRatio   float64
		wantRepeats float64
	}{
		{"no evidence keeps the stored profile", nil, 2, 1, 2},
		{"one window counts as one repeat", []float64{0.94}, 1, 0.97, 2},
		// Four windows agreeing closer than the noise: each still one repeat.
		{"agreeing windows count one repeat each", []float64{0.95, 0.951, 0.949, 0.95}, 1, (1 + 4*0.95) / 5, 5},
		// Windows spread 10 % apart are worth (0.03/0.1)² repeats each.
		{"spread windows count less", []float64{0.9, 1.1}, 1, 1, 1 + 2*math.Pow(0.03/stddev(0.9, 1.1), 2)},
	}
	for _, c := range cases {
		r, n := poolRatio(c.samples, c.n0, noise)
		if math.Abs(r-c.wantRatio) > 1e-9 || math.Abs(n-c.wantRepeats) > 1e-9 {
			t.Errorf("%s: ratio %.6f repeats %.4f, want %.6f and %.4f", c.name, r, n, c.wantRatio, c.wantRepeats)
		}
	}
	if r, n := poolRatio([]float64{0.5}, 1, 0); r != 1 || n != 1 {
		t.Errorf("an exact decision (noise 0) takes no evidence: ratio %v repeats %v", r, n)
	}
}

func stddev(a, b float64) float64 { m := (a + b) / 2; return math.Sqrt((a-m)*(a-m) + (b-m)*(b-m)) }

// TestPoolEvidence: the mixed power a window reads is compared with model v1's power of
// the stored profile at the window's rate; times and power take their pooled ratios
// at every batch of the mode; the repeats are the fewest any quantity is worth, capped.
func TestPoolEvidence(t *testing.T) {
	p := plan.ModeProfile{Mode: powermode.Mode{Cores: 4, CPUKHz: 1e6, GPUHz: 5e8, EMCHz: 1e9},
		Train:   plan.TrainPoint{Batch: 32, TimeMS: 100, PowerMW: 20000},
		Infer:   []plan.InferPoint{{Batch: 1, TimeMS: 10, PowerMW: 10000}, {Batch: 4, TimeMS: 30, PowerMW: 12000}},
		Repeats: 1}
	// At 10 req/s and batch 1: ρ = 0.1, model power 0.1·10 + 0.9·20 = 19 W; the board
	// reads 17.1 W (0.9×), the turns run 10 % slower.
	w := pairWindow{TrainMS: 110, InferMS: 11, InferBatch: 1, PowerMW: 17100, RateRPS: 10}
	ws := []pairWindow{w, w, w}
	got, pooled := poolPair(p, ws, 0.03, 30, 0)
	if pooled.Repeats != 4 || pooled.Windows != 3 {
		t.Fatalf("three windows on one repeat: %+v, want 4 repeats", pooled)
	}
	wantT, wantP := (1+3*1.1)/4, (1+3*0.9)/4
	if math.Abs(got.Train.TimeMS-100*wantT) > 1e-9 || math.Abs(got.Infer[1].TimeMS-30*wantT) > 1e-9 {
		t.Errorf("times %v, %v: want ×%.4f at every batch", got.Train.TimeMS, got.Infer[1].TimeMS, wantT)
	}
	if math.Abs(got.Train.PowerMW-20000*wantP) > 1e-6 || math.Abs(got.Infer[0].PowerMW-10000*wantP) > 1e-6 {
		t.Errorf("power %v, %v: want ×%.4f", got.Train.PowerMW, got.Infer[0].PowerMW, wantP)
	}
	if p.Train.TimeMS != 100 || p.Infer[0].PowerMW != 10000 {
		t.Fatal("poolEvidence changed the stored profile")
	}
	// A window without an inference measurement leaves the inference ratio unmeasured:
	// the profile counts no more repeats than the stored one.
	got, pooled = poolPair(p, []pairWindow{{TrainMS: 110, PowerMW: 17100, RateRPS: 10, InferBatch: 1}}, 0.03, 30, 0)
	if pooled.Repeats != 1 || got.Infer[0].TimeMS != 10 {
		t.Errorf("no inference evidence: %+v, inference time %v", pooled, got.Infer[0].TimeMS)
	}
	// A mode that broke the power budget live keeps its learned correction: the pooled
	// power never goes under it.
	if got, _ := poolPair(p, ws, 0.03, 30, 1); got.Train.PowerMW != 20000 || got.Infer[0].PowerMW != 10000 {
		t.Errorf("power floor 1: power %v, %v; want the stored 20000, 10000", got.Train.PowerMW, got.Infer[0].PowerMW)
	}
	// A window of micro-batch turns is compared with the stored micro-batch row.
	pm := p.Clone()
	pm.Micro = []plan.TrainPoint{{Batch: 8, TimeMS: 30, PowerMW: 20000, Minibatch: 32}}
	got, _ = poolPair(pm, []pairWindow{{TrainMS: 33, TrainMicro: 8, InferMS: 10, InferBatch: 1}}, 0.03, 30, 0)
	if k := got.Train.TimeMS / 100; math.Abs(k-1.05) > 1e-9 || math.Abs(got.Micro[0].TimeMS-30*1.05) > 1e-9 {
		t.Errorf("micro-batch window 10 %% slow on one repeat: minibatch ×%.4f, micro-batch %v; want ×1.05 both", k, got.Micro[0].TimeMS)
	}
	many := make([]pairWindow, 100)
	for i := range many {
		many[i] = w
	}
	if _, pooled = poolPair(p, many, 0.03, 30, 0); pooled.Repeats != 30 {
		t.Errorf("100 windows with max_repeats 30: %d repeats", pooled.Repeats)
	}
}

// TestPooledEvidenceTightensTheDecision: the decision's P for a configuration near the
// power edge rises as windows that read the board within the budget are pooled.
func TestPooledEvidenceTightensTheDecision(t *testing.T) {
	p := plan.ModeProfile{Mode: powermode.Mode{Cores: 4, CPUKHz: 1e6, GPUHz: 5e8, EMCHz: 1e9},
		Train: plan.TrainPoint{Batch: 32, TimeMS: 100, PowerMW: 20000},
		Infer: []plan.InferPoint{{Batch: 1, TimeMS: 10, PowerMW: 10000}}, Repeats: 1}
	d := plan.Rules{NoiseRel: 0.03}.For(plan.Budgets{RateRPS: 10, LatencyMS: 1000, PowerMW: 19500}.WithDefaults(), []int{1})
	pOf := func(mp plan.ModeProfile) float64 {
		all, err := d.ScoreAll([]plan.ModeProfile{mp})
		if err != nil {
			t.Fatal(err)
		}
		return all[0].PFeasible
	}
	prev := pOf(p)
	if prev >= 0.99 {
		t.Fatalf("setup: P %.4f is claimable already", prev)
	}
	// The board reads what the stored profile predicts (19 W against 19.5): only the
	// evidence's weight changes.
	w := pairWindow{TrainMS: 100, InferMS: 10, InferBatch: 1, PowerMW: 19000, RateRPS: 10}
	var ws []pairWindow
	for k := 1; k <= 12; k++ {
		ws = append(ws, w)
		mp, _ := poolPair(p, ws, 0.03, 30, 0)
		if got := pOf(mp); got <= prev {
			t.Fatalf("after %d windows P %.5f, not above %.5f", k, got, prev)
		} else {
			prev = got
		}
	}
	if prev < 0.99 {
		t.Errorf("after 12 windows P %.4f: still not claimed", prev)
	}
}

func TestRefineDefaults(t *testing.T) {
	full := DefaultConfig()
	full.Live = DefaultLiveOptions()
	if err := full.Validate(); err != nil {
		t.Fatal(err)
	}
	if o := DefaultConfig().Refine; !o.Enabled || !o.Trials || !o.NearClaim || o.NearClaimP != 0.9 || !o.Probes || o.ProbeHeadroom != 0.05 {
		t.Errorf("live refinement off by default: %+v", o)
	}
	if o := (Config{}).withDefaults().Refine; o.Enabled || o.Window <= 0 {
		t.Errorf("a zero Config: %+v; want refinement off with the default numbers", o)
	}
	c := full
	c.Refine.TrialMinP = 1.5
	if c.Validate() == nil {
		t.Error("trial_min_p 1.5 accepted")
	}
	c = full
	c.Refine.NearClaimP = -0.5
	if c.Validate() == nil {
		t.Error("near_claim_p -0.5 accepted")
	}
	c = full
	c.Refine.ProbeHeadroom = 1.2
	if c.Validate() == nil {
		t.Error("probe_headroom 1.2 accepted")
	}
}

// TestScoreInTakesTheClaimedTurnThatTrainsMost: a configuration key leaves the training
// turn free; its figures are those of the turn the decision would run — among the claimed
// turns the one that trains most — not of the turn with the highest P. With the best-P
// rule a trial running micro-batches of 16 was judged on micro-batches of 8 (P 1.0 against
// 0.99…), read 130 samples/s where it trained 152, and was abandoned (AGX lifetime sweep,
// 10 req/s, 150 ms, 20 W).
func TestScoreInTakesTheClaimedTurnThatTrainsMost(t *testing.T) {
	m := powermode.Mode{Cores: 4, CPUKHz: 1344000, GPUHz: 714e6, EMCHz: 2133e6}
	p := plan.MultiProfile{Mode: m,
		Train: []plan.TrainPoint{{Batch: 32, TimeMS: 200, PowerMW: 17000}},
		Micro: [][]plan.TrainPoint{{{Batch: 8, TimeMS: 56, PowerMW: 17000, Minibatch: 32}, {Batch: 16, TimeMS: 104, PowerMW: 17000, Minibatch: 32}}},
		Infer: [][]plan.InferPoint{{{Batch: 1, TimeMS: 12, PowerMW: 15000}}}, Repeats: 4}
	key := keyOf(m, []int{1})
	score := func(latMS float64) (best plan.MultiScored, p8, p16 plan.MultiScored) {
		b := plan.MultiBudgets{Streams: []plan.StreamBudget{{Name: "infer", RateRPS: 10, LatencyMS: latMS}}, PowerMW: 20000}.WithDefaults()
		d := plan.Rules{NoiseRel: 0.03, Confidence: 0.99}.ForMulti(b, []int{1})
		all, err := d.ScoreAll([]plan.MultiProfile{p})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range all {
			switch microOf(s) {
			case 8:
				p8 = s
			case 16:
				p16 = s
			}
		}
		best, ok := scoreIn(d, []plan.MultiProfile{p}, key)
		if !ok {
			t.Fatal("key not scored")
		}
		return best, p8, p16
	}
	// The latency budget where micro-batches of 16 are claimed just above 99 %, 8 surely.
	lo, hi := 100.0, 400.0
	for range 60 {
		mid := (lo + hi) / 2
		if _, _, s16 := score(mid); s16.PFeasible < 0.995 {
			lo = mid
		} else {
			hi = mid
		}
	}
	best, s8, s16 := score(hi)
	if !(s16.PFeasible >= 0.99 && s8.PFeasible > s16.PFeasible && s16.ObjectiveSPS > s8.ObjectiveSPS) {
		t.Fatalf("setup at %.1f ms: micro 8 P %.5f %.1f samples/s, micro 16 P %.5f %.1f samples/s", hi, s8.PFeasible, s8.ObjectiveSPS, s16.PFeasible, s16.ObjectiveSPS)
	}
	if microOf(best) != 16 {
		t.Errorf("key scored at micro-batch %d (P %.5f, %.1f samples/s); want the claimed 16 (P %.5f, %.1f)", microOf(best), best.PFeasible, best.ObjectiveSPS, s16.PFeasible, s16.ObjectiveSPS)
	}
	// Nothing claimed: the best P stands.
	b := plan.MultiBudgets{Streams: []plan.StreamBudget{{Name: "infer", RateRPS: 10, LatencyMS: hi}}, PowerMW: 17000}.WithDefaults()
	d := plan.Rules{NoiseRel: 0.03, Confidence: 0.99}.ForMulti(b, []int{1})
	all, _ := d.ScoreAll([]plan.MultiProfile{p})
	top := 0.0
	for _, s := range all {
		top = max(top, s.PFeasible)
	}
	if got, _ := scoreIn(d, []plan.MultiProfile{p}, key); top >= 0.99 || got.PFeasible != top {
		t.Errorf("nothing claimed (best P %.4f): scored P %.4f, want the best", top, got.PFeasible)
	}
}

// microOf is the first job's micro-batch in s (0: whole minibatches).
func microOf(s plan.MultiScored) int {
	if len(s.MicroBatches) == 0 {
		return 0
	}
	return s.MicroBatches[0]
}
