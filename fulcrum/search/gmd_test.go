package search

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/benchtest"
	"github.com/fulcrum-edge/fulcrum/truth"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/benchgen"
	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/truthprof"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// countingProfiler wraps a Profiler and fails the test when a mode is asked for twice.
type countingProfiler struct {
	t     *testing.T
	inner Profiler
	asked map[powermode.Mode]int
}

func (c *countingProfiler) Profile(ctx context.Context, m powermode.Mode) (plan.ModeProfile, error) {
	c.asked[m]++
	if c.asked[m] > 1 {
		c.t.Errorf("mode %s profiled %d times", m, c.asked[m])
	}
	for _, k := range c.inner.Known() {
		if k.Mode == m {
			c.t.Errorf("mode %s was already known (free) but was asked for", m)
		}
	}
	return c.inner.Profile(ctx, m)
}

func (c *countingProfiler) Known() []plan.ModeProfile { return c.inner.Known() }

func TestGMDFindsOptimumWithoutNoise(t *testing.T) {
	pt, names, presets := benchtest.SmallPair(t)
	for _, rate := range []float64{5, 20} {
		for _, powW := range []float64{16, 20, 26, 34} {
			b := plan.Budgets{RateRPS: rate, LatencyMS: 300, PowerMW: powW * 1000}
			want, err := oracleOf(t, pt, b)
			if err != nil || !want.Feasible {
				t.Fatalf("oracle %+v: %v %v", b, want, err)
			}
			prof, _ := truthprof.NewPairProfiler(pt, 0, nil)
			res, err := NewGMD(GMDOptions{Margin: -1}).Search(context.Background(), smallProblem(pt, names, presets, b), &countingProfiler{t: t, inner: prof, asked: map[powermode.Mode]int{}})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Feasible || res.Choice.ThroughputSPS != want.Choice.ThroughputSPS {
				t.Errorf("rate %g power %g W: gmd chose %s b%d θ=%.2f (feasible %v), optimum %s b%d θ=%.2f",
					rate, powW, res.Choice.Mode, res.Choice.Batch, res.Choice.ThroughputSPS, res.Feasible, want.Choice.Mode, want.Choice.Batch, want.Choice.ThroughputSPS)
			}
			if len(res.Profiled) > DefaultGMDProfiles || prof.Count() != len(res.Profiled) {
				t.Errorf("profiled %d (profiler counted %d), budget %d", len(res.Profiled), prof.Count(), DefaultGMDProfiles)
			}
		}
	}
}

func TestGMDRespectsProfileBudgetAndKnownProfiles(t *testing.T) {
	pt, names, presets := benchtest.SmallPair(t)
	b := plan.Budgets{RateRPS: 10, LatencyMS: 300, PowerMW: 26000}
	for _, budget := range []int{1, 3, 6} {
		prof, _ := truthprof.NewPairProfiler(pt, 0.03, rand.New(rand.NewPCG(1, 2)))
		// Two modes are known before the search: free, never asked for again.
		for _, i := range []int{0, pt.Len() - 1} {
			if _, err := prof.Profile(context.Background(), pt.ModeAt(i)); err != nil {
				t.Fatal(err)
			}
		}
		before := prof.Count()
		p := smallProblem(pt, names, presets, b)
		p.MaxProfiles = budget
		res, err := NewGMD(GMDOptions{}).Search(context.Background(), p, &countingProfiler{t: t, inner: prof, asked: map[powermode.Mode]int{}})
		if err != nil {
			t.Fatal(err)
		}
		if got := prof.Count() - before; got > budget || got != len(res.Profiled) {
			t.Errorf("budget %d: profiled %d new modes, result lists %d", budget, got, len(res.Profiled))
		}
		if res.Stop != "budget" && res.Stop != "converged" {
			t.Errorf("stop = %q", res.Stop)
		}
		if !res.Found {
			t.Errorf("budget %d: no answer at all, though profiles exist", budget)
		}
	}
}

func TestGMDMarginAvoidsEdgeViolations(t *testing.T) {
	pt := benchtest.EdgePair(t)
	b := plan.Budgets{RateRPS: 5, LatencyMS: 1000, PowerMW: 20000}
	model, _ := plan.NewModel(b, pt.Batches)
	violations := map[string]int{}
	const runs = 200
	for seed := range uint64(runs) {
		for _, g := range []struct {
			name string
			o    GMDOptions
		}{{"margin", GMDOptions{}}, {"no margin", GMDOptions{Margin: -1}}} {
			prof, _ := truthprof.NewPairProfiler(pt, 0.03, rand.New(rand.NewPCG(seed, 7)))
			p := problemOf(pt)
			p.Budgets, p.NoiseRel = b, 0.03
			res, err := NewGMD(g.o).Search(context.Background(), p, prof)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Found || !res.Feasible {
				continue
			}
			if e, ok := pt.Score(model, res.Choice.Mode, res.Choice.Batch, res.Choice.MicroBatch); !ok || !e.Feasible {
				violations[g.name]++
			}
		}
	}
	t.Logf("violations in %d searches: %v", runs, violations)
	if violations["margin"] > runs*4/100 {
		t.Errorf("with the margin, %d of %d noisy searches claimed a choice that violates the true budget (want ≤ 4%%)", violations["margin"], runs)
	}
	// The crafted case must be able to fail: without a margin, noise causes many more.
	if violations["no margin"] < 4*max(violations["margin"], 2) {
		t.Errorf("without a margin %d violations, with it %d: the edge case does not exercise the noise", violations["no margin"], violations["margin"])
	}
}

func TestGMDStart(t *testing.T) {
	pt, names, presets := benchtest.SmallPair(t)
	idxOf := func(m powermode.Mode) powermode.Index { i, _ := pt.Space.Index(pt.Space.Snap(m)); return i }
	for _, tc := range []struct {
		powerW float64
		want   int // preset number
	}{{5, 0}, {names0W(t, names, 0), 0}, {names0W(t, names, 1) + 0.5, 1}, {names0W(t, names, 2), 2}, {500, 2}} {
		p := smallProblem(pt, names, presets, plan.Budgets{RateRPS: 5, LatencyMS: 300, PowerMW: tc.powerW * 1000})
		if got := gmdStart(p); got != idxOf(presets[tc.want]) {
			t.Errorf("budget %g W: start %v, want preset %s %v", tc.powerW, pt.Space.Mode(got), names[tc.want], presets[tc.want])
		}
	}
	// Without names the start is the median preset by level (MAXN excluded).
	p := smallProblem(pt, nil, presets, plan.Budgets{RateRPS: 5, LatencyMS: 300, PowerMW: 20000})
	if got := gmdStart(p); got != idxOf(presets[1]) {
		t.Errorf("unnamed presets: start %v, want %v", pt.Space.Mode(got), presets[1])
	}
	// Without presets it starts inside the space.
	p.Presets = nil
	if got := gmdStart(p); !pt.Space.ContainsIndex(got) {
		t.Errorf("no presets: start %v is not in the space", got)
	}
}

// names0W reads the wattage of preset i's name (MODE_25W → 25).
func names0W(t *testing.T, names []string, i int) float64 {
	t.Helper()
	var w float64
	if _, err := fmtSscanf(names[i], &w); err != nil {
		t.Fatalf("preset name %q: %v", names[i], err)
	}
	return w
}

func TestGMDCancelled(t *testing.T) {
	pt, names, presets := benchtest.SmallPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	prof, _ := truthprof.NewPairProfiler(pt, 0, nil)
	_, err := NewGMD(GMDOptions{}).Search(ctx, smallProblem(pt, names, presets, plan.Budgets{RateRPS: 5, LatencyMS: 300, PowerMW: 20000}), prof)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestDerate(t *testing.T) {
	b := plan.Budgets{RateRPS: 10, LatencyMS: 200, PowerMW: 30000}
	d := Derate(b, 0.05)
	if d.LatencyMS != 190 || d.PowerMW != 28500 || d.RhoMax != plan.DefaultRhoMax*0.95 || d.Quantile != plan.DefaultQuantile || d.RateRPS != 10 {
		t.Errorf("Derate 5%% = %+v", d)
	}
	if Derate(b, -1) != b.WithDefaults() || Derate(b, 0) != b.WithDefaults() {
		t.Error("a non-positive margin must leave the budgets as they are")
	}
}

// smoothPair builds a 4×6×6×3 table whose times are exactly log-linear in the knobs
// and powers exactly linear in the cores and the squared clocks (what GMD's local model
// assumes), or, with rough, the
// same values multiplied by a ±30% factor that no smooth model predicts.
func smoothPair(t *testing.T, rough bool) *truthprof.PairTruth {
	t.Helper()
	rng := rand.New(rand.NewPCG(9, 9))
	l := benchgen.Small().Board.Levels
	var rows []benchtest.Row
	for _, c := range l.Cores {
		for _, f := range l.CPUKHz {
			for _, g := range l.GPUHz {
				for _, e := range l.EMCHz {
					m := powermode.Mode{Cores: c, CPUKHz: f, GPUHz: g, EMCHz: e}
					tm := 100 * math.Pow(float64(g)/1.3e9, -0.7) * math.Pow(float64(e)/3.2e9, -0.2) * math.Pow(float64(f)/2.2e6, -0.1)
					sq := func(x float64) float64 { return x * x }
					pw := 5000 + 20000*sq(float64(g)/1.3e9) + 6000*sq(float64(f)/2.2e6) + 3000*sq(float64(e)/3.2e9) + 300*float64(c)
					if rough {
						tm *= math.Exp(0.3 * rng.NormFloat64())
						pw *= math.Exp(0.3 * rng.NormFloat64())
					}
					rows = append(rows, benchtest.Row{Mode: m, Role: truth.Train, Batch: 32, TimeMS: tm, PowerMW: pw}, benchtest.Row{Mode: m, Role: truth.Infer, Batch: 1, TimeMS: tm / 10, PowerMW: pw}, benchtest.Row{Mode: m, Role: truth.Infer, Batch: 4, TimeMS: tm / 4, PowerMW: pw})
				}
			}
		}
	}
	return benchtest.PairFromRows(t, rows)
}

func TestSmoothMarginsFollowTheFit(t *testing.T) {
	const sigma = 0.03
	mean := func(rough bool) float64 {
		pt := smoothPair(t, rough)
		prof, _ := truthprof.NewPairProfiler(pt, sigma, rand.New(rand.NewPCG(1, 1)))
		model, _ := plan.NewModel(plan.Budgets{RateRPS: 5, LatencyMS: 500, PowerMW: 30000}, pt.Batches)
		w := &walk{ctx: context.Background(), sp: pt.Space, model: model, prof: prof, budget: 15, penalty: 4, score: map[powermode.Index]float64{}}
		w.top.Cores, w.top.CPUKHz, w.top.GPUHz, w.top.EMCHz = 8, 2.2e6, 1.3e9, 3.199e9
		// 15 modes around the middle of the space, as a walk would leave them.
		rng := rand.New(rand.NewPCG(2, 2))
		for len(w.known) < 15 {
			idx := powermode.Index{1 + rng.IntN(2), 2 + rng.IntN(3), 2 + rng.IntN(3), 1 + rng.IntN(2)}
			if w.isKnown(idx) {
				continue
			}
			if _, err := w.profileAt(idx); err != nil {
				t.Fatal(err)
			}
		}
		_, mT, mP := w.smooth(sigma)
		s := 0.0
		for i := range mT {
			s += mT[i] + mP[i]
		}
		return s / float64(2*len(mT))
	}
	full := DefaultGMDMarginSigmas * sigma
	t.Logf("mean margins: smooth %.4f, rough %.4f, full %.4f", mean(false), mean(true), full)
	if m := mean(false); m > 0.8*full {
		t.Errorf("smooth truth: mean margin %.4f, want well below the full %.4f (neighbours predict each mode)", m, full)
	}
	if m := mean(true); m < 0.85*full {
		t.Errorf("rough truth: mean margin %.4f, want close to the full %.4f (neighbours predict nothing)", m, full)
	}
}

// TestGMDConfirmRepeatsNearTheEdge: the fastest modes that fit draw 96% and 97.5% of
// the power budget, inside the 2σ (6%) margin. One measurement cannot claim them; the
// confirm step measures them again and judges the average of the fresh repeats with a
// margin shrunk by 1/√n. Over 200 seeded searches it must find more throughput than
// the same search without repeats, still rarely violate the true budget, and count
// every repeat against the profile budget.
func TestGMDConfirmRepeatsNearTheEdge(t *testing.T) {
	pt := benchtest.PairFromRows(t, benchtest.EdgeRows([]float64{13500, 17000, 19200, 21500}))
	b := plan.Budgets{RateRPS: 5, LatencyMS: 1000, PowerMW: 20000}
	model, _ := plan.NewModel(b, pt.Batches)
	const runs = 200
	type tally struct {
		sumTheta             float64
		violations, repeated int
	}
	got := map[string]*tally{}
	for seed := range uint64(runs) {
		for _, g := range []struct {
			name string
			o    GMDOptions
		}{
			{"confirm", GMDOptions{FallbackSigmas: []float64{}}},
			{"no repeats", GMDOptions{Confirm: -1, FallbackSigmas: []float64{}}},
		} {
			tl := got[g.name]
			if tl == nil {
				tl = &tally{}
				got[g.name] = tl
			}
			prof, _ := truthprof.NewPairProfiler(pt, 0.03, rand.New(rand.NewPCG(seed, 11)))
			p := problemOf(pt)
			p.Budgets, p.NoiseRel = b, 0.03
			res, err := NewGMD(g.o).Search(context.Background(), p, prof)
			if err != nil {
				t.Fatal(err)
			}
			spent := len(res.Profiled) + len(res.Remeasured)
			if spent > p.MaxProfiles && p.MaxProfiles > 0 || spent > DefaultGMDProfiles || prof.Count() != spent {
				t.Fatalf("%s seed %d: %d profiled + %d repeats, profiler counted %d, budget %d", g.name, seed, len(res.Profiled), len(res.Remeasured), prof.Count(), p.MaxProfiles)
			}
			if len(res.Remeasured) > 0 {
				tl.repeated++
				if g.o.Confirm < 0 {
					t.Fatalf("seed %d: repeats taken with Confirm -1", seed)
				}
			}
			if !res.Found || !res.Feasible {
				continue
			}
			e, ok := pt.Score(model, res.Choice.Mode, res.Choice.Batch, res.Choice.MicroBatch)
			if !ok || !e.Feasible {
				tl.violations++
				continue
			}
			tl.sumTheta += e.ThroughputSPS
		}
	}
	c, n := got["confirm"], got["no repeats"]
	t.Logf("confirm: mean θ %.3f, %d violations, repeats in %d searches; no repeats: mean θ %.3f, %d violations",
		c.sumTheta/runs, c.violations, c.repeated, n.sumTheta/runs, n.violations)
	if c.repeated < runs/4 {
		t.Errorf("repeats taken in %d of %d searches; the candidates at 96%% and 97.5%% of the budget should be remeasured often", c.repeated, runs)
	}
	if c.sumTheta <= 1.02*n.sumTheta {
		t.Errorf("mean true throughput with repeats %.3f, without %.3f: confirming the edge candidates should gain", c.sumTheta/runs, n.sumTheta/runs)
	}
	if c.violations > runs*4/100 {
		t.Errorf("with repeats, %d of %d searches claimed a choice over the true budget (want ≤ 4%%)", c.violations, runs)
	}
}

// TestGMDFallbackMargin: only the slowest mode fits, with 2% to spare, less than the
// full (6%) margin. The walk settles where the budget is missed by little; the retreat
// must then find the mode that fits. Without a fallback GMD reports its choice but does
// not claim it; with the default fallbacks it claims it at a reduced margin (1σ after
// two repeats, or 0.5σ) and says so.
func TestGMDFallbackMargin(t *testing.T) {
	pt := benchtest.PairFromRows(t, benchtest.EdgeRows([]float64{19600, 20400, 21200, 22000}))
	b := plan.Budgets{RateRPS: 5, LatencyMS: 1000, PowerMW: 20000}
	for _, tc := range []struct {
		name     string
		fallback []float64
		feasible bool
	}{{"default fallbacks", nil, true}, {"no fallback", []float64{}, false}} {
		t.Run(tc.name, func(t *testing.T) {
			// Exact measurements, but the problem declares 3% noise: the margin is 6%.
			prof, _ := truthprof.NewPairProfiler(pt, 0, nil)
			p := problemOf(pt)
			p.Budgets, p.NoiseRel = b, 0.03
			res, err := NewGMD(GMDOptions{FallbackSigmas: tc.fallback}).Search(context.Background(), p, prof)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Found || res.Feasible != tc.feasible {
				t.Fatalf("found %v feasible %v (want %v); stop %q", res.Found, res.Feasible, tc.feasible, res.Stop)
			}
			if res.Choice.Mode.GPUHz != 400000000 || res.Choice.Mode.EMCHz != 2133000000 {
				t.Errorf("choice %s, want the 400 MHz GPU with the slow memory clock (the only mode that fits)", res.Choice.Mode)
			}
			if says := strings.Contains(res.Stop, "feasible only with a reduced safety margin"); says != tc.feasible {
				t.Errorf("stop %q: mentions the reduced margin %v, want %v", res.Stop, says, tc.feasible)
			}
		})
	}
}

// TestGMDPowerModelIsConvex: board power rises faster than the clock (dynamic power
// f·V², the voltage rising with f). Fitted to profiles at the lower GPU clocks, GMD's
// local model must predict the power of the higher clocks from below by little: a
// model linear in the clock extrapolates the chord's slope and underestimates them,
// which sends the walk and the global step to modes that are over the power budget.
func TestGMDPowerModelIsConvex(t *testing.T) {
	l := benchgen.Small().Board.Levels
	top := float64(l.GPUHz[len(l.GPUHz)-1])
	powerMW := func(g int64) float64 {
		x := float64(g) / top
		v := 0.6 + 0.4*x // normalised voltage, rising with the clock
		return 6000 + 24000*x*v*v
	}
	var rows []benchtest.Row
	for _, c := range l.Cores {
		for _, f := range l.CPUKHz {
			for _, g := range l.GPUHz {
				for _, e := range l.EMCHz {
					m := powermode.Mode{Cores: c, CPUKHz: f, GPUHz: g, EMCHz: e}
					tm := 100 * top / float64(g)
					pw := powerMW(g) + 200*float64(c) + 1000*float64(f)/2.2e6 + 1000*float64(e)/3.2e9
					rows = append(rows, benchtest.Row{Mode: m, Role: truth.Train, Batch: 32, TimeMS: tm, PowerMW: pw}, benchtest.Row{Mode: m, Role: truth.Infer, Batch: 1, TimeMS: tm / 10, PowerMW: pw})
				}
			}
		}
	}
	pt := benchtest.PairFromRows(t, rows)
	prof, _ := truthprof.NewPairProfiler(pt, 0, nil)
	model, _ := plan.NewModel(plan.Budgets{RateRPS: 5, LatencyMS: 500, PowerMW: 30000}, pt.Batches)
	w := &walk{ctx: context.Background(), sp: pt.Space, model: model, prof: prof, budget: 15, penalty: 4, score: map[powermode.Index]float64{}}
	w.setTop()
	// The lower three GPU levels, and one step of every other knob around the centre.
	centre := powermode.Index{1, 2, 2, 1}
	for _, d := range []powermode.Index{{0, 0, -2, 0}, {0, 0, -1, 0}, {0, 0, 0, 0}, {1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 0, 1}} {
		idx := centre
		for k := range powermode.NumKnobs {
			idx[k] += d[k]
		}
		if _, err := w.profileAt(idx); err != nil {
			t.Fatal(err)
		}
	}
	cur, err := w.profileAt(centre)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := w.fit(centre, powermode.Index{1, 1, 1, 1}, cur)
	if !ok {
		t.Fatal("no fit")
	}
	for gi := 3; gi < len(l.GPUHz); gi++ {
		idx := centre
		idx[2] = gi
		m := pt.Space.Mode(idx)
		want, err := prof.Profile(context.Background(), m)
		if err != nil {
			t.Fatal(err)
		}
		got := f.predict(m, want).Train.PowerMW
		if rel := got/want.Train.PowerMW - 1; rel < -0.03 {
			t.Errorf("GPU %d MHz: predicted %.0f mW, truth %.0f mW (%.1f%%): the model is not convex in the clock", m.GPUHz/1_000_000, got, want.Train.PowerMW, 100*rel)
		}
	}
}

// clockProfiler advances a clock by each profile's and repeat's time (step, or slow for
// the modes in slowModes): a live search's time on the daemon's clock.
type clockProfiler struct {
	inner *truthprof.TruthProfiler
	now   time.Duration
	step  time.Duration
}

func (c *clockProfiler) Profile(ctx context.Context, m powermode.Mode) (plan.ModeProfile, error) {
	c.now += c.step
	return c.inner.Profile(ctx, m)
}

func (c *clockProfiler) Remeasure(ctx context.Context, m powermode.Mode) (plan.ModeProfile, error) {
	c.now += c.step
	return c.inner.Remeasure(ctx, m)
}

func (c *clockProfiler) Known() []plan.ModeProfile { return c.inner.Known() }

// TestGMDStopsAtItsTime: with Problem.TimeLeft GMD starts no profile or repeat that its
// mean time so far would carry past the bound, and still answers from what it measured
// (the controller's search_time_ms: the first plan within a time an operator can wait
// for). Without the bound the same search measures more, so the bound is what stops it.
func TestGMDStopsAtItsTime(t *testing.T) {
	pt, names, presets := benchtest.SmallPair(t)
	b := plan.Budgets{RateRPS: 10, LatencyMS: 300, PowerMW: 26000}
	const step = 10 * time.Second
	run := func(limit time.Duration) (Result, time.Duration) {
		prof, _ := truthprof.NewPairProfiler(pt, 0.03, rand.New(rand.NewPCG(1, 2)))
		cp := &clockProfiler{inner: prof, step: step}
		p := smallProblem(pt, names, presets, b)
		p.NoiseRel = 0.03
		if limit > 0 {
			p.TimeLeft = func() time.Duration { return limit - cp.now }
		}
		res, err := NewGMD(GMDOptions{}).Search(context.Background(), p, cp)
		if err != nil {
			t.Fatal(err)
		}
		return res, cp.now
	}
	free, freeTook := run(0)
	for _, limit := range []time.Duration{45 * time.Second, 75 * time.Second} {
		res, took := run(limit)
		if took > limit {
			t.Errorf("bound %s: the search took %s", limit, took)
		}
		if took < limit-step {
			t.Errorf("bound %s: the search stopped at %s, with time for one more profile", limit, took)
		}
		if !strings.Contains(res.Stop, "time") {
			t.Errorf("bound %s: stop %q does not say the time stopped it", limit, res.Stop)
		}
		if !res.Found {
			t.Errorf("bound %s: no answer from %d profiles", limit, len(res.Profiled))
		}
		if took >= freeTook {
			t.Errorf("bound %s: took %s, as long as the search without a bound (%s, %d profiles)", limit, took, freeTook, len(free.Profiled))
		}
	}
}
