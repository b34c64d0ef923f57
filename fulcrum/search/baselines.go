package search

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// The baselines are honest comparisons for GMD and ALS (docs/design.md §3): what a user gets
// without a searcher. They choose with the plain planner against the exact budgets.

// MaxNSearcher profiles the MAXN mode (the top level of every knob) and picks the best
// inference batch there.
type MaxNSearcher struct{}

// Name implements Searcher.
func (MaxNSearcher) Name() string { return "maxn" }

// Search implements Searcher.
func (s MaxNSearcher) Search(ctx context.Context, p Problem, prof Profiler) (Result, error) {
	modes, err := s.Modes(p)
	if err != nil {
		return Result{}, err
	}
	return profileAndChoose(ctx, "maxn", p, prof, modes, "maxn profiled")
}

// Modes implements ModeLister.
func (MaxNSearcher) Modes(p Problem) ([]powermode.Mode, error) {
	if p.Space == nil {
		return nil, errors.New("maxn: the problem has no search space")
	}
	d := p.Space.Dims()
	return []powermode.Mode{p.Space.Snap(p.Space.Mode(powermode.Index{d[0] - 1, d[1] - 1, d[2] - 1, d[3] - 1}))}, nil
}

// ModeLister is a baseline: a fixed list of modes to profile for a problem (its space,
// presets, seed and profile budget), whatever the profiles say. The benchmark for
// several streams profiles the list itself (fulcrum/bench).
type ModeLister interface {
	Modes(p Problem) ([]powermode.Mode, error)
}

// PresetSearcher profiles each of the board's presets (snapped into the space) and
// lets the planner choose among them: what a careful user does today.
type PresetSearcher struct{}

// Name implements Searcher.
func (PresetSearcher) Name() string { return "preset" }

// Search implements Searcher.
func (s PresetSearcher) Search(ctx context.Context, p Problem, prof Profiler) (Result, error) {
	modes, err := s.Modes(p)
	if err != nil {
		return Result{}, err
	}
	return profileAndChoose(ctx, "preset", p, prof, modes, "all presets profiled")
}

// Modes implements ModeLister.
func (PresetSearcher) Modes(p Problem) ([]powermode.Mode, error) {
	if p.Space == nil {
		return nil, errors.New("preset: the problem has no search space")
	}
	if len(p.Presets) == 0 {
		return nil, errors.New("preset: the problem lists no presets: pass the board's nvpmodel presets")
	}
	modes := make([]powermode.Mode, 0, len(p.Presets))
	for _, m := range p.Presets {
		modes = append(modes, p.Space.Snap(m))
	}
	return modes, nil
}

// RandomSearcher profiles K distinct modes drawn uniformly from the space (seeded by
// Problem.Seed) and lets the planner choose among them.
type RandomSearcher struct{ K int }

// Name implements Searcher.
func (r RandomSearcher) Name() string { return fmt.Sprintf("random-%d", r.K) }

// Search implements Searcher.
func (r RandomSearcher) Search(ctx context.Context, p Problem, prof Profiler) (Result, error) {
	modes, err := r.Modes(p)
	if err != nil {
		return Result{}, err
	}
	return profileAndChoose(ctx, r.Name(), p, prof, modes, "all random modes profiled")
}

// Modes implements ModeLister.
func (r RandomSearcher) Modes(p Problem) ([]powermode.Mode, error) {
	if p.Space == nil {
		return nil, errors.New("random: the problem has no search space")
	}
	if r.K < 1 {
		return nil, fmt.Errorf("random-%d: K must be at least 1", r.K)
	}
	k := min(r.K, p.Space.Size())
	if p.MaxProfiles > 0 {
		k = min(k, p.MaxProfiles)
	}
	rng := rand.New(rand.NewPCG(p.Seed, 0x9e3779b97f4a7c15))
	seen := map[int]bool{}
	var modes []powermode.Mode
	n := p.Space.GridSize()
	// Rejection sampling over the grid: a table's space is a dense enough subset.
	for len(modes) < k {
		o := rng.IntN(n)
		idx := p.Space.FromOrdinal(o)
		if seen[o] || !p.Space.ContainsIndex(idx) {
			continue
		}
		seen[o] = true
		modes = append(modes, p.Space.Mode(idx))
	}
	return modes, nil
}

func profileAndChoose(ctx context.Context, name string, p Problem, prof Profiler, modes []powermode.Mode, stop string) (Result, error) {
	model, err := plan.NewModel(p.Budgets, p.InferBatches)
	if err != nil {
		return Result{}, fmt.Errorf("%s: budgets: %w", name, err)
	}
	have := map[powermode.Mode]bool{}
	for _, k := range prof.Known() {
		have[k.Mode] = true
	}
	var res Result
	var profiles []plan.ModeProfile
	for _, m := range modes {
		mp, err := prof.Profile(ctx, m)
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", name, err)
		}
		if !have[m] {
			have[m] = true
			res.Profiled = append(res.Profiled, m)
			profiles = append(profiles, mp)
		}
	}
	res.Stop = stop
	if pl, err := model.Choose(profiles); err == nil {
		res.Choice, res.Found, res.Feasible = pl.Best, true, pl.Feasible
	}
	return res, nil
}
