package search

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// bruteForce is the oracle written the obvious way: every mode, every batch, Model.Evaluate.
func bruteForce(t *testing.T, pt *PairTruth, b Budgets) (Eval, bool) {
	t.Helper()
	m, err := NewModel(b, pt.Batches)
	if err != nil {
		t.Fatal(err)
	}
	var best Eval
	found := false
	for i := range pt.Len() {
		if e, ok := m.BestAtMode(pt.ProfileAt(i)); ok && (!found || e.Better(best)) {
			best, found = e, true
		}
	}
	return best, found
}

func TestOracleMatchesBruteForce(t *testing.T) {
	pt, _, _ := smallPair(t)
	infeasible := 0
	for _, rate := range []float64{2, 20, 80} {
		for _, l := range []float64{40, 120, 300} {
			for _, pw := range []float64{9000, 16000, 26000, 40000} {
				b := Budgets{RateRPS: rate, LatencyMS: l, PowerMW: pw}
				want, _ := bruteForce(t, pt, b)
				got, err := Oracle(pt, b)
				if err != nil {
					t.Fatal(err)
				}
				if got.Feasible != want.Feasible || got.Choice.Mode != want.Mode || got.Choice.Batch != want.Batch || got.Choice.ThroughputSPS != want.ThroughputSPS {
					t.Errorf("%+v: oracle %v %s b%d θ %.3f, brute force %v %s b%d θ %.3f", b, got.Feasible, got.Choice.Mode, got.Choice.Batch, got.Choice.ThroughputSPS, want.Feasible, want.Mode, want.Batch, want.ThroughputSPS)
				}
				if !got.Feasible {
					infeasible++
				}
			}
		}
	}
	if infeasible == 0 || infeasible == 36 {
		t.Errorf("%d of 36 budget sets infeasible: the sweep should have both kinds", infeasible)
	}
}

func TestBaselines(t *testing.T) {
	pt, names, presets := smallPair(t)
	b := Budgets{RateRPS: 10, LatencyMS: 300, PowerMW: 26000}
	p := smallProblem(pt, names, presets, b)
	ctx := context.Background()
	d := pt.Space.Dims()
	top := pt.Space.Mode(powermode.Index{d[0] - 1, d[1] - 1, d[2] - 1, d[3] - 1})

	prof, _ := NewPairProfiler(pt, 0, nil)
	res, err := MaxNSearcher{}.Search(ctx, p, prof)
	if err != nil || len(res.Profiled) != 1 || res.Profiled[0] != top || res.Choice.Mode != top {
		t.Errorf("maxn: %v profiled %v choice %s, want only %s", err, res.Profiled, res.Choice.Mode, top)
	}
	want, _ := NewModel(b, pt.Batches)
	if e, _ := want.BestAtMode(pt.ProfileAt(pt.Len() - 1)); res.Choice.Batch != e.Batch {
		t.Errorf("maxn batch %d, best at MAXN is %d", res.Choice.Batch, e.Batch)
	}

	prof, _ = NewPairProfiler(pt, 0, nil)
	res, err = PresetSearcher{}.Search(ctx, p, prof)
	if err != nil || len(res.Profiled) != len(presets) || !res.Found {
		t.Fatalf("preset: %v, profiled %v", err, res.Profiled)
	}
	// The preset choice is the best preset by the planner (noise-free here).
	var pp []ModeProfile
	for _, m := range p.Presets {
		i, _ := pt.DenseOf(m)
		pp = append(pp, pt.ProfileAt(i))
	}
	plan, _ := want.Choose(pp)
	if res.Choice.Mode != plan.Best.Mode || res.Feasible != plan.Feasible {
		t.Errorf("preset chose %s (%v), planner over presets %s (%v)", res.Choice.Mode, res.Feasible, plan.Best.Mode, plan.Feasible)
	}
	if _, err := (PresetSearcher{}).Search(ctx, pt.Problem(), prof); err == nil {
		t.Error("preset without presets: no error")
	}

	// random-K: K distinct modes, the same ones for the same seed, others for another.
	draw := func(seed uint64) []powermode.Mode {
		prof, _ := NewPairProfiler(pt, 0, nil)
		q := p
		q.Seed = seed
		res, err := RandomSearcher{K: 15}.Search(ctx, q, prof)
		if err != nil || prof.Count() != 15 || len(res.Profiled) != 15 {
			t.Fatalf("random-15: %v, count %d", err, prof.Count())
		}
		return res.Profiled
	}
	a, a2, c := draw(1), draw(1), draw(2)
	if !slices.Equal(a, a2) || slices.Equal(a, c) {
		t.Errorf("random-15 not reproducible by seed, or not varying with it")
	}
	if u := slices.Compact(slices.SortedFunc(slices.Values(a), func(x, y powermode.Mode) int { return cmpMode(x, y) })); len(u) != 15 {
		t.Errorf("random-15 drew %d distinct modes", len(u))
	}
	// K above the space size takes the whole space.
	small := pairFromRows(t, edgeRows(nil))
	prof, _ = NewPairProfiler(small, 0.01, rand.New(rand.NewPCG(1, 1)))
	q := small.Problem()
	q.Budgets = Budgets{RateRPS: 5, LatencyMS: 1000, PowerMW: 20000}
	if _, err := (RandomSearcher{K: 50}).Search(ctx, q, prof); err != nil || prof.Count() != small.Len() {
		t.Errorf("random-50 on %d modes: %v, profiled %d", small.Len(), err, prof.Count())
	}
}

func cmpMode(a, b powermode.Mode) int {
	switch {
	case a.String() < b.String():
		return -1
	case a.String() > b.String():
		return 1
	}
	return 0
}

// TestMarginOracle: with no margin it is the oracle; on the edge table (the fastest
// fitting mode at 99.5% of the power budget) a 1% margin passes it over for the next
// mode down, and a margin nothing fits with is no answer. It profiles nothing and
// refuses a profiler without the truth.
func TestMarginOracle(t *testing.T) {
	ctx := context.Background()
	pt := edgePair(t)
	p := pt.Problem()
	p.Budgets = Budgets{RateRPS: 5, LatencyMS: 1000, PowerMW: 20000}
	want, err := Oracle(pt, p.Budgets)
	if err != nil {
		t.Fatal(err)
	}
	prof, _ := NewPairProfiler(pt, 0.03, rand.New(rand.NewPCG(1, 1)))
	for _, tc := range []struct {
		margin  float64
		gpuHz   int64
		found   bool
		isExact bool
	}{{0, 0, true, true}, {0.01, 600000000, true, false}, {0.6, 0, false, false}} {
		res, err := MarginOracle{MarginRel: tc.margin}.Search(ctx, p, prof)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case res.Found != tc.found || res.Feasible != tc.found:
			t.Errorf("margin %g: found %v feasible %v, want %v", tc.margin, res.Found, res.Feasible, tc.found)
		case tc.isExact && res.Choice != want.Choice:
			t.Errorf("margin 0: %+v, oracle %+v", res.Choice, want.Choice)
		case tc.gpuHz != 0 && res.Choice.Mode.GPUHz != tc.gpuHz:
			t.Errorf("margin %g: chose %s, want the %d Hz GPU level", tc.margin, res.Choice.Mode, tc.gpuHz)
		}
	}
	if prof.Count() != 0 {
		t.Errorf("the margin oracle profiled %d modes", prof.Count())
	}
	if _, err := (MarginOracle{MarginRel: 0.02}).Search(ctx, p, &countingProfiler{t: t, inner: prof, asked: map[powermode.Mode]int{}}); err == nil || !strings.Contains(err.Error(), "noise-free truth") {
		t.Errorf("without the truth: %v", err)
	}
	if s, err := NewSearcher("oracle-m4.5"); err != nil || s.(Searcher).Name() != "oracle-m4.5" {
		t.Errorf("oracle-m4.5: %v %v", s, err)
	}
	if _, err := NewSearcher("oracle-mx"); err == nil {
		t.Error("oracle-mx: no error")
	}
}
