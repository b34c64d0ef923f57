package fulcrum

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// GMD defaults (docs/benchmarks.md shows how they were measured).
const (
	// DefaultGMDProfiles is GMD's profile budget.
	DefaultGMDProfiles = 15
	// DefaultGMDMargin derates the latency, power and GPU-share budgets GMD plans
	// against, so that a choice measured just inside a budget is still inside it when
	// the measurement was a few percent optimistic.
	DefaultGMDMargin = 0.04
	// DefaultGMDPenalty weighs a relative budget excess against relative training
	// throughput in the walk's objective: 1% over a budget costs as much as
	// DefaultGMDPenalty% of throughput.
	DefaultGMDPenalty = 4.0
)

// GMDOptions tune GMD; the zero value takes the defaults.
type GMDOptions struct {
	// MaxProfiles caps new profiles when the problem does not (0: DefaultGMDProfiles).
	MaxProfiles int
	// Margin is the relative derating of the budgets (0: DefaultGMDMargin; negative:
	// plan against the exact budgets).
	Margin float64
	// Penalty is the weight of budget excess in the walk's objective (0: default).
	Penalty float64
}

// GMD is discrete multi-dimensional gradient descent over the level indices of the four
// knobs (DESIGN §3). It starts at the nvpmodel preset whose nominal power is the highest
// within the power budget, probes the neighbours of the current mode along each knob
// with a step that starts at a quarter of the knob's levels and halves when nothing
// improves, and moves along every knob that improves a penalised objective:
//
//	score(m) = max over b of  θ(m,b)/θ_ref − Penalty·violation(m,b)
//
// where violation is the sum of relative excesses over the derated budgets (0 inside
// them) and θ_ref the training throughput alone at the start. A finite penalty lets the
// walk step just outside a budget when that buys throughput and then trade another knob
// down to come back inside (a pure feasible-first walk stalls on the budget edge). The
// answer is the planner's choice over every mode profiled, against the derated budgets.
// GMD is safe for concurrent use: it keeps no state between searches.
type GMD struct {
	opts GMDOptions
}

// NewGMD returns GMD with the given options.
func NewGMD(o GMDOptions) *GMD {
	if o.MaxProfiles <= 0 {
		o.MaxProfiles = DefaultGMDProfiles
	}
	if o.Margin == 0 {
		o.Margin = DefaultGMDMargin
	}
	if o.Margin < 0 {
		o.Margin = 0
	}
	if o.Penalty <= 0 {
		o.Penalty = DefaultGMDPenalty
	}
	return &GMD{opts: o}
}

// Name implements Searcher.
func (g *GMD) Name() string { return "gmd" }

// Derate returns budgets shrunk by a relative margin (latency, power and the GPU-share
// cap), the budgets a noise-aware searcher plans against.
func Derate(b Budgets, margin float64) Budgets {
	b = b.WithDefaults()
	if margin <= 0 {
		return b
	}
	b.LatencyMS *= 1 - margin
	b.PowerMW *= 1 - margin
	b.RhoMax *= 1 - margin
	return b
}

// errBudgetSpent stops a walk when the profile budget is used up.
var errBudgetSpent = errors.New("profile budget spent")

// Search implements Searcher.
func (g *GMD) Search(ctx context.Context, p Problem, prof Profiler) (Result, error) {
	if p.Space == nil || p.Space.Size() == 0 {
		return Result{}, errors.New("gmd: the problem has no search space")
	}
	model, err := NewModel(Derate(p.Budgets, g.opts.Margin), p.InferBatches)
	if err != nil {
		return Result{}, fmt.Errorf("gmd: budgets: %w", err)
	}
	budget := p.MaxProfiles
	if budget <= 0 {
		budget = g.opts.MaxProfiles
	}
	w := &walk{ctx: ctx, sp: p.Space, model: model, prof: prof, budget: budget, penalty: g.opts.Penalty, score: map[powermode.Index]float64{}}
	for _, mp := range prof.Known() {
		if idx, ok := p.Space.Index(mp.Mode); ok {
			w.known = append(w.known, mp)
			w.score[idx] = math.NaN() // scored once θ_ref is known
		}
	}
	stop, err := w.run(gmdStart(p))
	if err != nil && !errors.Is(err, errBudgetSpent) {
		return Result{}, fmt.Errorf("gmd: %w", err)
	}
	res := Result{Profiled: w.profiled, Stop: stop}
	if plan, err := model.Choose(w.known); err == nil {
		res.Found, res.Feasible = true, plan.Feasible
		// Report the choice against the real budgets; it was chosen against derated ones.
		if real, err := NewModel(p.Budgets, p.InferBatches); err == nil {
			if e, ok := evalAt(real, plan.Best.Mode, w.known, plan.Best.Batch); ok {
				res.Choice = e
			}
		} else {
			res.Choice = plan.Best
		}
	}
	return res, nil
}

type walk struct {
	ctx      context.Context
	sp       *powermode.Space
	model    *Model
	prof     Profiler
	budget   int
	penalty  float64
	thetaRef float64
	known    []ModeProfile
	profiled []powermode.Mode
	score    map[powermode.Index]float64 // NaN: profiled before θ_ref was set
}

// eval returns the penalised score of the mode at idx, profiling it when needed.
func (w *walk) eval(idx powermode.Index) (float64, error) {
	if s, ok := w.score[idx]; ok && !math.IsNaN(s) {
		return s, nil
	}
	m := w.sp.Mode(idx)
	var mp ModeProfile
	found := false
	for _, k := range w.known {
		if k.Mode == m {
			mp, found = k, true
			break
		}
	}
	if !found {
		if len(w.profiled) >= w.budget {
			return 0, errBudgetSpent
		}
		var err error
		if mp, err = w.prof.Profile(w.ctx, m); err != nil {
			return 0, fmt.Errorf("profile %s: %w", m, err)
		}
		w.known = append(w.known, mp)
		w.profiled = append(w.profiled, m)
	}
	if w.thetaRef == 0 {
		w.thetaRef = float64(mp.Train.Batch) / (mp.Train.TimeMS / 1000)
	}
	s := math.Inf(-1)
	for _, ip := range mp.Infer {
		e := w.model.Evaluate(m, mp.Train, ip)
		s = math.Max(s, e.ThroughputSPS/w.thetaRef-w.penalty*e.Violation)
	}
	w.score[idx] = s
	return s, nil
}

// neighbour is the member reached from idx by moving delta levels along knob k: the
// clamped target if it is a member, else the nearest member on that line beyond it,
// else the nearest one between idx and it. ok is false when there is none.
func (w *walk) neighbour(idx powermode.Index, k powermode.Knob, delta int) (powermode.Index, bool) {
	n := w.sp.Dims()[k]
	t := min(max(idx[k]+delta, 0), n-1)
	if t == idx[k] {
		return idx, false
	}
	dir := 1
	if delta < 0 {
		dir = -1
	}
	try := func(v int) (powermode.Index, bool) {
		c := idx
		c[k] = v
		return c, w.sp.ContainsIndex(c)
	}
	for v := t; v >= 0 && v < n; v += dir {
		if c, ok := try(v); ok {
			return c, true
		}
	}
	for v := t - dir; v != idx[k]; v -= dir {
		if c, ok := try(v); ok {
			return c, true
		}
	}
	return idx, false
}

// knobOrder probes the knobs that usually matter most for DNN work first, so that a
// walk cut short by the budget has spent it where it counts.
var knobOrder = [...]powermode.Knob{powermode.KnobGPU, powermode.KnobEMC, powermode.KnobCPU, powermode.KnobCores}

func (w *walk) run(start powermode.Index) (string, error) {
	cur := start
	curS, err := w.eval(cur)
	if err != nil {
		return "budget", err
	}
	// Re-score profiles inherited from the profiler now that θ_ref is set.
	for idx, s := range w.score {
		if math.IsNaN(s) {
			if _, err := w.eval(idx); err != nil {
				return "budget", err
			}
		}
	}
	dims := w.sp.Dims()
	var step powermode.Index
	var prefer [powermode.NumKnobs]int
	for k := range powermode.NumKnobs {
		step[k] = max(1, dims[k]/4)
	}
	for {
		if err := w.ctx.Err(); err != nil {
			return "cancelled", err
		}
		// The current mode's state picks the direction to try first: down when over
		// the power budget, up otherwise (more speed).
		e, _ := w.bestEval(cur)
		first := 1
		if !e.Feasible && e.Binding == ConstraintPower {
			first = -1
		}
		type move struct {
			idx powermode.Index
			s   float64
		}
		var moves []move
		for _, k := range knobOrder {
			if dims[k] < 2 {
				continue
			}
			// A knob that improved last time is tried in that direction first.
			dirs := []int{first, -first}
			if prefer[k] != 0 {
				dirs = []int{prefer[k], -prefer[k]}
			}
			for _, d := range dirs {
				n, ok := w.neighbour(cur, k, d*step[k])
				if !ok {
					continue
				}
				s, err := w.eval(n)
				if err != nil {
					return "budget", err
				}
				if s > curS {
					moves = append(moves, move{n, s})
					prefer[k] = d
					break
				}
			}
		}
		if len(moves) == 0 {
			if step == (powermode.Index{1, 1, 1, 1}) || allOne(step, dims) {
				return "converged", nil
			}
			for k := range powermode.NumKnobs {
				step[k] = max(1, step[k]/2)
			}
			continue
		}
		best := slices.MaxFunc(moves, func(a, b move) int { return cmpF(a.s, b.s) })
		if len(moves) > 1 {
			// Move along every improving knob at once.
			comb := cur
			for _, mv := range moves {
				for k := range powermode.NumKnobs {
					if mv.idx[k] != cur[k] {
						comb[k] = mv.idx[k]
					}
				}
			}
			if !w.sp.ContainsIndex(comb) {
				c, _ := w.sp.Index(w.sp.Snap(w.sp.Mode(comb)))
				comb = c
			}
			if s, err := w.eval(comb); err == nil && s > best.s {
				best = move{comb, s}
			} else if err != nil && !errors.Is(err, errBudgetSpent) {
				return "error", err
			}
		}
		cur, curS = best.idx, best.s
	}
}

func allOne(step, dims powermode.Index) bool {
	for k := range powermode.NumKnobs {
		if dims[k] > 1 && step[k] > 1 {
			return false
		}
	}
	return true
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// bestEval is the planner's best configuration at a profiled mode.
func (w *walk) bestEval(idx powermode.Index) (Eval, bool) {
	m := w.sp.Mode(idx)
	for _, k := range w.known {
		if k.Mode == m {
			return w.model.BestAtMode(k)
		}
	}
	return Eval{}, false
}

// evalAt evaluates the configuration (mode, batch) from the profile of mode among
// profiles. ok is false when the mode or the batch is not there.
func evalAt(m *Model, mode powermode.Mode, profiles []ModeProfile, batch int) (Eval, bool) {
	for _, p := range profiles {
		if p.Mode != mode {
			continue
		}
		for _, ip := range p.Infer {
			if ip.Batch == batch {
				return m.Evaluate(mode, p.Train, ip), true
			}
		}
	}
	return Eval{}, false
}

var presetWatts = regexp.MustCompile(`(?i)(\d+(?:\.\d+)?)\s*W\b`)

// gmdStart picks GMD's first mode: among the presets other than MAXN (the top of
// every knob), the one with the highest nominal power (read from its nvpmodel name,
// MODE_30W → 30 W) within the power budget, else the lowest-power one. Without
// readable names it ranks presets by their mean relative level and takes the median.
// Without presets it starts in the middle of every knob.
func gmdStart(p Problem) powermode.Index {
	sp := p.Space
	dims := sp.Dims()
	top := powermode.Index{dims[0] - 1, dims[1] - 1, dims[2] - 1, dims[3] - 1}
	type cand struct {
		idx   powermode.Index
		watts float64 // NaN when unknown
		rank  float64
	}
	var cs []cand
	for i, m := range p.Presets {
		idx, ok := sp.Index(sp.Snap(m))
		if !ok || idx == top {
			continue
		}
		c := cand{idx: idx, watts: math.NaN()}
		for k := range powermode.NumKnobs {
			if dims[k] > 1 {
				c.rank += float64(idx[k]) / float64(dims[k]-1)
			}
		}
		if i < len(p.PresetNames) {
			if sm := presetWatts.FindStringSubmatch(p.PresetNames[i]); sm != nil {
				c.watts, _ = strconv.ParseFloat(sm[1], 64)
			}
		}
		cs = append(cs, c)
	}
	if len(cs) == 0 {
		mid := sp.Mode(powermode.Index{dims[0] / 2, dims[1] / 2, dims[2] / 2, dims[3] / 2})
		idx, _ := sp.Index(sp.Snap(mid))
		return idx
	}
	named := slices.DeleteFunc(slices.Clone(cs), func(c cand) bool { return math.IsNaN(c.watts) })
	if len(named) > 0 {
		slices.SortStableFunc(named, func(a, b cand) int { return cmpF(a.watts, b.watts) })
		pick := named[0]
		for _, c := range named {
			if c.watts*1000 <= p.Budgets.PowerMW {
				pick = c
			}
		}
		return pick.idx
	}
	slices.SortStableFunc(cs, func(a, b cand) int { return cmpF(a.rank, b.rank) })
	return cs[(len(cs)-1)/2].idx
}
