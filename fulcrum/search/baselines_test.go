package search

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/benchtest"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/truthprof"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

func TestBaselines(t *testing.T) {
	pt, names, presets := benchtest.SmallPair(t)
	b := plan.Budgets{RateRPS: 10, LatencyMS: 300, PowerMW: 26000}
	p := smallProblem(pt, names, presets, b)
	ctx := context.Background()
	d := pt.Space.Dims()
	top := pt.Space.Mode(powermode.Index{d[0] - 1, d[1] - 1, d[2] - 1, d[3] - 1})

	prof, _ := truthprof.NewPairProfiler(pt, 0, nil)
	res, err := MaxNSearcher{}.Search(ctx, p, prof)
	if err != nil || len(res.Profiled) != 1 || res.Profiled[0] != top || res.Choice.Mode != top {
		t.Errorf("maxn: %v profiled %v choice %s, want only %s", err, res.Profiled, res.Choice.Mode, top)
	}
	want, _ := plan.NewModel(b, pt.Batches)
	if e, _ := want.BestAtMode(pt.ProfileAt(pt.Len() - 1)); res.Choice.Batch != e.Batch {
		t.Errorf("maxn batch %d, best at MAXN is %d", res.Choice.Batch, e.Batch)
	}

	prof, _ = truthprof.NewPairProfiler(pt, 0, nil)
	res, err = PresetSearcher{}.Search(ctx, p, prof)
	if err != nil || len(res.Profiled) != len(presets) || !res.Found {
		t.Fatalf("preset: %v, profiled %v", err, res.Profiled)
	}
	// The preset choice is the best preset by the planner (noise-free here).
	var pp []plan.ModeProfile
	for _, m := range p.Presets {
		i, _ := pt.DenseOf(m)
		pp = append(pp, pt.ProfileAt(i))
	}
	pl, _ := want.Choose(pp)
	if res.Choice.Mode != pl.Best.Mode || res.Feasible != pl.Feasible {
		t.Errorf("preset chose %s (%v), planner over presets %s (%v)", res.Choice.Mode, res.Feasible, pl.Best.Mode, pl.Feasible)
	}
	if _, err := (PresetSearcher{}).Search(ctx, problemOf(pt), prof); err == nil {
		t.Error("preset without presets: no error")
	}

	// random-K: K distinct modes, the same ones for the same seed, others for another.
	draw := func(seed uint64) []powermode.Mode {
		prof, _ := truthprof.NewPairProfiler(pt, 0, nil)
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
	small := benchtest.PairFromRows(t, benchtest.EdgeRows(nil))
	prof, _ = truthprof.NewPairProfiler(small, 0.01, rand.New(rand.NewPCG(1, 1)))
	q := problemOf(small)
	q.Budgets = plan.Budgets{RateRPS: 5, LatencyMS: 1000, PowerMW: 20000}
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
