package search

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"

	"gonum.org/v1/gonum/mat"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// GMD defaults (docs/benchmarks.md shows how they were measured).
const (
	// DefaultGMDProfiles is GMD's profile budget.
	DefaultGMDProfiles = 15
	// DefaultGMDMarginSigmas sizes GMD's safety margin from the profiling noise: GMD
	// judges feasibility with every measured time and power raised by this many relative
	// standard deviations (Problem.NoiseRel), so that a choice measured just inside a
	// budget is still inside it when the measurement was optimistic.
	DefaultGMDMarginSigmas = 2.0
	// DefaultGMDMargin is the margin when the problem does not say how noisy profiles
	// are: 2σ of a typical 3% run-to-run spread.
	DefaultGMDMargin = 0.06
	// DefaultGMDPenalty weighs a relative budget excess against relative training
	// throughput in the walk's objective: 1% over a budget costs as much as
	// DefaultGMDPenalty% of throughput.
	DefaultGMDPenalty = 4.0
	// DefaultGMDConfirm is how many of GMD's profiles are kept back from the walk to
	// measure again the candidates that sit just inside a budget (see confirm), when
	// the profiler can remeasure.
	DefaultGMDConfirm = 2
	// gmdMaxRepeats caps the measurements averaged at one mode: past it, another repeat
	// shrinks the noise too little to be worth a profile.
	gmdMaxRepeats = 6
)

// DefaultGMDFallbackSigmas are GMD's reduced margins for tight budgets.
func DefaultGMDFallbackSigmas() []float64 { return []float64{1} }

// GMDOptions tune GMD; the zero value takes the defaults.
type GMDOptions struct {
	// MaxProfiles caps new profiles when the problem does not (0: DefaultGMDProfiles).
	MaxProfiles int
	// Margin is the relative amount measured times and powers are raised by when judging
	// feasibility (0: DefaultGMDMarginSigmas × Problem.NoiseRel, or DefaultGMDMargin when
	// that is unknown; negative: none, plan on the measurements as they are).
	Margin float64
	// Penalty is the weight of budget excess in the walk's objective (0: default).
	Penalty float64
	// NoSmooth turns off combining each measurement with its neighbours' prediction
	// for the final choice (see smooth).
	NoSmooth bool
	// Confirm is how many profiles are kept back from the walk to remeasure candidates
	// near a budget's edge, when the profiler is a Remeasurer (0: DefaultGMDConfirm;
	// negative: none). Profiles the walk leaves unused go to the same purpose.
	Confirm int
	// FallbackSigmas are the smaller margins, in standard deviations, tried in order
	// when nothing profiled fits with the full margin (nil: DefaultGMDFallbackSigmas;
	// empty: none). A choice found that way is claimed feasible, and Result.Stop says
	// at which margin.
	FallbackSigmas []float64
}

// GMD is discrete multi-dimensional gradient descent over the level indices of the four
// knobs (DESIGN §3; docs/benchmarks.md). It starts at the nvpmodel preset whose nominal
// power is the highest within the power budget, probes one neighbour along each knob a
// step away (a quarter of the knob's levels), and then repeatedly fits a local model of
// every profiled quantity around the current mode (the gradient estimate), profiles the
// mode of the trust region (± the steps) predicted best by a penalised objective, moves
// there if it improves and halves the steps if not:
//
//	score(m) = max over b of  θ(m,b)/θ_ref − Penalty·violation(m,b)
//
// where violation is the sum of relative excesses over the budgets with the noise
// margin applied (0 inside them) and θ_ref the training throughput alone at the start. A
// finite penalty lets the walk step just outside a budget when that buys throughput and
// then trade another knob down to come back inside (a pure feasible-first walk stalls
// on the budget edge). The answer is the planner's choice over every mode profiled, with
// the margin; Result.Feasible is true only when the choice fits with the margin.
// GMD is safe for concurrent use: it keeps no state between searches.
type GMD struct {
	opts GMDOptions
}

// NewGMD returns GMD with the given options.
func NewGMD(o GMDOptions) *GMD {
	if o.MaxProfiles <= 0 {
		o.MaxProfiles = DefaultGMDProfiles
	}
	if o.Penalty <= 0 {
		o.Penalty = DefaultGMDPenalty
	}
	return &GMD{opts: o}
}

// Name implements Searcher.
func (g *GMD) Name() string { return "gmd" }

// Derate returns budgets shrunk by a relative margin (latency, power and the GPU-share
// cap): budgets to plan against when measurements may be optimistic by that much.
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
	margin := g.opts.Margin
	switch {
	case margin < 0:
		margin = 0
	case margin == 0 && p.NoiseRel > 0:
		margin = DefaultGMDMarginSigmas * p.NoiseRel
	case margin == 0:
		margin = DefaultGMDMargin
	}
	model, err := NewModel(p.Budgets, p.InferBatches)
	if err != nil {
		return Result{}, fmt.Errorf("gmd: budgets: %w", err)
	}
	budget := p.MaxProfiles
	if budget <= 0 {
		budget = g.opts.MaxProfiles
	}
	if budget <= 0 {
		budget = DefaultGMDProfiles
	}
	rm, canRepeat := prof.(Remeasurer)
	canRepeat = canRepeat && margin > 0 && g.opts.Confirm >= 0
	reserve := 0
	if canRepeat {
		reserve = g.opts.Confirm
		if reserve == 0 {
			reserve = DefaultGMDConfirm
		}
		// The walk needs its start and a probe along each knob before it can move.
		reserve = min(reserve, max(0, budget-(1+powermode.NumKnobs)))
	}
	w := &walk{ctx: ctx, sp: p.Space, model: model, margin: margin, prof: prof, budget: budget - reserve, penalty: g.opts.Penalty, score: map[powermode.Index]float64{}, reps: map[powermode.Mode]int{}}
	l := p.Space.Levels()
	w.top.Cores, w.top.CPUKHz = float64(slices.Max(l.Cores)), float64(slices.Max(l.CPUKHz))
	w.top.GPUHz, w.top.EMCHz = float64(slices.Max(l.GPUHz)), float64(slices.Max(l.EMCHz))
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
	smooth := !g.opts.NoSmooth && margin > 0
	if retreated, err := w.retreat(budget, smooth); err != nil {
		return Result{}, fmt.Errorf("gmd: %w", err)
	} else if retreated > 0 {
		stop += fmt.Sprintf("; %d profile(s) spent retreating to where the budgets hold with the margin", retreated)
	}
	if canRepeat {
		if err := w.confirm(rm, budget, smooth); err != nil {
			return Result{}, fmt.Errorf("gmd: %w", err)
		}
		if len(w.remeasured) > 0 {
			stop += fmt.Sprintf("; %d repeat measurement(s) near the budget edge", len(w.remeasured))
		}
	}
	res := Result{Profiled: w.profiled, Remeasured: w.remeasured, Stop: stop}
	// Feasible says the choice fits the budgets with every time and power raised by
	// the margin: a choice that fits only as measured is reported (Choice) but not
	// claimed, since the measurement may be a few percent optimistic.
	best, found := w.best(smooth)
	if found && !best.Feasible && margin > 0 {
		// Tight budgets: rather than give up, claim the best that fits with a smaller
		// margin — more likely than not within budget, and the controller watches the
		// live numbers and steps down if it is not.
		fall := g.opts.FallbackSigmas
		if fall == nil {
			fall = DefaultGMDFallbackSigmas()
		}
		for _, z := range fall {
			if z < 0 || z >= DefaultGMDMarginSigmas {
				continue
			}
			if e, ok := w.bestScaled(smooth, z/DefaultGMDMarginSigmas); ok && e.Feasible {
				best = e
				res.Stop += fmt.Sprintf("; feasible only with a reduced safety margin (%g σ)", z)
				break
			}
		}
	}
	if found {
		res.Found, res.Feasible = true, best.Feasible
		res.Choice, _ = evalAt(model, best.Mode, w.known, best.Batch)
	}
	return res, nil
}

// margins returns the profiles the final choice is made from and, per profile, the
// relative margins for its times and powers: the margin shrinks as 1/√n with the n
// measurements averaged at a mode, and further where smoothing shows the neighbours
// predict the mode well.
func (w *walk) margins(smooth bool) ([]ModeProfile, []float64, []float64) {
	if smooth {
		return w.smooth(w.margin / DefaultGMDMarginSigmas)
	}
	mT, mP := make([]float64, len(w.known)), make([]float64, len(w.known))
	for i, mp := range w.known {
		mT[i] = w.margin / math.Sqrt(float64(w.repeats(mp.Mode)))
		mP[i] = mT[i]
	}
	return w.known, mT, mP
}

// best is the best configuration over the known profiles judged with the margins.
func (w *walk) best(smooth bool) (Eval, bool) { return w.bestScaled(smooth, 1) }

// bestScaled is best with every margin multiplied by scale.
func (w *walk) bestScaled(smooth bool, scale float64) (Eval, bool) {
	profiles, mT, mP := w.margins(smooth)
	for i := range mT {
		mT[i], mP[i] = mT[i]*scale, mP[i]*scale
	}
	var best Eval
	found := false
	for i, mp := range profiles {
		for _, ip := range mp.Infer {
			if e := w.robustEvalM(mp, ip, mT[i], mP[i]); !found || e.Better(best) {
				best, found = e, true
			}
		}
	}
	return best, found
}

// repeats is the number of measurements averaged in the known profile of m.
func (w *walk) repeats(m powermode.Mode) int {
	if n := w.reps[m]; n > 1 {
		return n
	}
	return 1
}

// confirm spends what is left of the profile budget on measuring again the candidate
// that would beat the current choice if its measurement were trusted: the
// highest-throughput configuration that fits the budgets as measured but not with the
// margin, and whose apparent slack the margin would shrink below with the repeats
// still affordable (margin ∝ 1/√n). The candidate is then judged once, on the average
// of the fresh measurements alone: its first measurement was picked for looking good,
// so averaging it in (or judging after every repeat and stopping at the first pass)
// would let optimistic noise through. A candidate that truly fits is confirmed; one
// that only looked feasible drops out. This fights one measurement's noise with more
// measurements rather than with a wider margin, which would give up throughput on
// every configuration near a budget.
func (w *walk) confirm(rm Remeasurer, total int, smooth bool) error {
	tried := map[powermode.Mode]bool{}
	for {
		left := total - len(w.profiled) - len(w.remeasured)
		if left < 2 {
			return nil
		}
		profiles, mT, mP := w.margins(smooth)
		var best, cand Eval
		need := 0
		haveBest, haveCand := false, false
		for i, mp := range profiles {
			for _, ip := range mp.Infer {
				if e := w.robustEvalM(mp, ip, mT[i], mP[i]); e.Feasible && (!haveBest || e.Better(best)) {
					best, haveBest = e, true
				}
			}
		}
		for i, mp := range profiles {
			if tried[mp.Mode] || w.repeats(mp.Mode) > 1 {
				continue
			}
			for _, ip := range mp.Infer {
				e := w.model.Evaluate(mp.Mode, mp.Train, ip)
				if !e.Feasible || (haveCand && !e.Better(cand)) || (haveBest && !e.Better(best)) {
					continue
				}
				// The largest fraction of the margin at which it still fits (bisection).
				lo, hi := 0.0, 1.0
				for range 20 {
					mid := (lo + hi) / 2
					if w.robustEvalM(mp, ip, mid*mT[i], mid*mP[i]).Feasible {
						lo = mid
					} else {
						hi = mid
					}
				}
				if lo <= 0 || lo >= 1 {
					continue // hopeless at any count, or already fits with the margin
				}
				n := int(math.Ceil(1 / (lo * lo)))
				if n > min(gmdMaxRepeats, left) {
					continue
				}
				cand, haveCand, need = e, true, max(n, 2)
			}
		}
		if !haveCand { // need ≤ left: n ≤ left and left ≥ 2
			return nil
		}
		tried[cand.Mode] = true
		var fresh []ModeProfile
		for range need {
			mp, err := rm.Remeasure(w.ctx, cand.Mode)
			if err != nil {
				return fmt.Errorf("remeasure %s: %w", cand.Mode, err)
			}
			w.remeasured = append(w.remeasured, cand.Mode)
			fresh = append(fresh, mp)
		}
		w.replace(fresh)
	}
}

// retreat runs when the walk has found nothing that fits with the margin (its
// penalised objective may settle on a mode just over, or just inside, a budget): while
// profiles are left, it profiles the unprofiled mode near the best-scored one that the
// local model predicts to fit with one and a half margins (a prediction is less sure
// than a measurement) at the highest throughput. It returns the profiles it took.
func (w *walk) retreat(total int, smooth bool) (int, error) {
	taken := 0
	dims := w.sp.Dims()
	for range 3 {
		if e, ok := w.best(smooth); ok && e.Feasible {
			return taken, nil
		}
		if len(w.profiled)+len(w.remeasured) >= total {
			return taken, nil
		}
		var cur powermode.Index
		curS, found := math.Inf(-1), false
		for idx, sc := range w.score {
			if !math.IsNaN(sc) && (sc > curS || sc == curS && cmpIndex(idx, cur) < 0) {
				cur, curS, found = idx, sc, true
			}
		}
		if !found {
			return taken, nil
		}
		var step powermode.Index
		for k := range powermode.NumKnobs {
			step[k] = max(1, (dims[k]+4)/8)
		}
		strict := func(mp ModeProfile) float64 {
			s := math.Inf(-1)
			for _, ip := range mp.Infer {
				if e := w.robustEvalM(mp, ip, 1.5*w.margin, 1.5*w.margin); e.Feasible {
					s = math.Max(s, e.ThroughputSPS/w.thetaRef)
				}
			}
			return s
		}
		next, ok := w.predictBestBy(cur, step, math.Inf(-1), strict)
		if !ok {
			// No mode near the best-scored one is predicted to fit: go from the
			// profiled mode that comes closest to fitting towards the mode predicted to
			// come closer still (least violation with the margin; throughput breaks
			// ties), rather than stop with profiles unspent and nothing to claim.
			closest := func(mp ModeProfile) float64 {
				s := math.Inf(-1)
				for _, ip := range mp.Infer {
					e := w.robustEvalM(mp, ip, w.margin, w.margin)
					s = math.Max(s, -e.Violation+1e-3*e.ThroughputSPS/w.thetaRef)
				}
				return s
			}
			nearS, haveNear := math.Inf(-1), false
			for _, mp := range w.known {
				idx, ok := w.sp.Index(mp.Mode)
				if s := closest(mp); ok && (s > nearS || s == nearS && cmpIndex(idx, cur) < 0) {
					cur, nearS, haveNear = idx, s, true
				}
			}
			if !haveNear {
				return taken, nil
			}
			if next, ok = w.predictBestBy(cur, step, math.Inf(-1), strict); !ok {
				if next, ok = w.predictBestBy(cur, step, math.Inf(-1), closest); !ok {
					return taken, nil
				}
			}
		}
		w.budget = total
		if _, err := w.eval(next); err != nil {
			if errors.Is(err, errBudgetSpent) {
				return taken, nil
			}
			return taken, err
		}
		taken++
	}
	return taken, nil
}

func cmpIndex(a, b powermode.Index) int {
	for k := range powermode.NumKnobs {
		if a[k] != b[k] {
			return a[k] - b[k]
		}
	}
	return 0
}

// replace sets the known profile of a mode to the average of fresh measurements of it
// (which then count as len(fresh) measurements).
func (w *walk) replace(fresh []ModeProfile) {
	avg := cloneProfile(fresh[0])
	n := float64(len(fresh))
	for _, mp := range fresh[1:] {
		avg.Train.TimeMS += mp.Train.TimeMS
		avg.Train.PowerMW += mp.Train.PowerMW
		for j := range avg.Infer {
			avg.Infer[j].TimeMS += mp.Infer[j].TimeMS
			avg.Infer[j].PowerMW += mp.Infer[j].PowerMW
		}
	}
	avg.Train.TimeMS /= n
	avg.Train.PowerMW /= n
	for j := range avg.Infer {
		avg.Infer[j].TimeMS /= n
		avg.Infer[j].PowerMW /= n
	}
	for i := range w.known {
		if w.known[i].Mode == avg.Mode {
			w.known[i] = avg
			w.reps[avg.Mode] = len(fresh)
			return
		}
	}
}

type walk struct {
	ctx      context.Context
	sp       *powermode.Space
	model    *Model // exact budgets
	margin   float64
	prof     Profiler
	budget   int
	penalty  float64
	thetaRef float64
	known    []ModeProfile // one per mode; repeats are averaged in
	reps     map[powermode.Mode]int
	profiled []powermode.Mode
	// remeasured lists the repeat measurements, in order (a mode once per repeat).
	remeasured []powermode.Mode
	score      map[powermode.Index]float64 // NaN: profiled before θ_ref was set
	top        struct{ Cores, CPUKHz, GPUHz, EMCHz float64 }
}

// profileAt returns the profile of the mode at idx, measuring it when it is not known.
func (w *walk) profileAt(idx powermode.Index) (ModeProfile, error) {
	m := w.sp.Mode(idx)
	for _, k := range w.known {
		if k.Mode == m {
			return k, nil
		}
	}
	if len(w.profiled) >= w.budget {
		return ModeProfile{}, errBudgetSpent
	}
	mp, err := w.prof.Profile(w.ctx, m)
	if err != nil {
		return ModeProfile{}, fmt.Errorf("profile %s: %w", m, err)
	}
	w.known = append(w.known, mp)
	w.profiled = append(w.profiled, m)
	return mp, nil
}

// isKnown reports whether the mode at idx has a profile.
func (w *walk) isKnown(idx powermode.Index) bool {
	m := w.sp.Mode(idx)
	return slices.ContainsFunc(w.known, func(k ModeProfile) bool { return k.Mode == m })
}

// robustEval scores (mode, batch) with the planner, its feasibility judged with every
// measured time and power raised by the margin (the measurement may be optimistic by
// that much), its throughput as measured. Raising the times rather than shrinking the
// latency budget leaves the batch-fill part of the latency, which is not measured,
// without a margin.
func (w *walk) robustEval(mp ModeProfile, ip InferPoint) Eval {
	return w.robustEvalM(mp, ip, w.margin, w.margin)
}

// robustEvalM is robustEval with separate margins for times and powers.
func (w *walk) robustEvalM(mp ModeProfile, ip InferPoint, marginT, marginP float64) Eval {
	e := w.model.Evaluate(mp.Mode, mp.Train, ip)
	if marginT <= 0 && marginP <= 0 {
		return e
	}
	t := mp.Train
	t.TimeMS, t.PowerMW = t.TimeMS*(1+marginT), t.PowerMW*(1+marginP)
	ip.TimeMS, ip.PowerMW = ip.TimeMS*(1+marginT), ip.PowerMW*(1+marginP)
	r := w.model.Evaluate(mp.Mode, t, ip)
	e.Feasible, e.Violation, e.Binding = r.Feasible, r.Violation, r.Binding
	return e
}

// objective is the penalised score of a (measured or predicted) profile: the best over
// inference batch sizes of relative throughput minus the weighted budget excess.
func (w *walk) objective(mp ModeProfile) float64 {
	if w.thetaRef == 0 {
		w.thetaRef = float64(mp.Train.Batch) / (mp.Train.TimeMS / 1000)
	}
	s := math.Inf(-1)
	for _, ip := range mp.Infer {
		e := w.robustEval(mp, ip)
		s = math.Max(s, e.ThroughputSPS/w.thetaRef-w.penalty*e.Violation)
	}
	return s
}

// eval returns the penalised score of the mode at idx, profiling it when needed.
func (w *walk) eval(idx powermode.Index) (float64, error) {
	if s, ok := w.score[idx]; ok && !math.IsNaN(s) {
		return s, nil
	}
	mp, err := w.profileAt(idx)
	if err != nil {
		return 0, err
	}
	s := w.objective(mp)
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

// run walks from start (DESIGN §3, docs/benchmarks.md):
//
//  1. Profile the start and one neighbour along each knob, a step away (a quarter of
//     the knob's levels; down first when the start is over the power budget, else up):
//     finite differences that give a first gradient of every profiled quantity.
//  2. Fit, around the current mode, a local log-linear model of every quantity (log
//     time and log power of training and of each inference batch size against the log
//     of each knob's value), weighted towards the current mode; every profile taken
//     so far refines it. This is the gradient estimate.
//  3. Predict the penalised objective at every mode of the trust region, the current
//     mode ± up to two steps along each knob (all four knobs may move at once), and
//     profile the one predicted best. Move there if it really improves; otherwise
//     halve every step (the trust region shrinks). Stop when the steps are 1 and
//     nothing is predicted to improve, or when the profile budget is spent.
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
	for k := range powermode.NumKnobs {
		step[k] = max(1, (dims[k]+2)/4) // a quarter of the levels, rounded
	}
	// 1. Finite differences along each knob.
	curP, _ := w.profileAt(cur)
	first := 1
	if e, _ := w.model.BestAtMode(curP); !e.Feasible && e.Binding == ConstraintPower {
		first = -1
	}
	bestIdx, bestS := cur, curS
	for _, k := range knobOrder {
		if dims[k] < 2 {
			continue
		}
		n, ok := w.neighbour(cur, k, first*step[k])
		if !ok {
			if n, ok = w.neighbour(cur, k, -first*step[k]); !ok {
				continue
			}
		}
		s, err := w.eval(n)
		if err != nil {
			return w.finish(err)
		}
		if s > bestS {
			bestIdx, bestS = n, s
		}
	}
	cur, curS = bestIdx, bestS
	// 2–3. Model-guided steps.
	initial, restarts := step, 0
	for {
		if err := w.ctx.Err(); err != nil {
			return "cancelled", err
		}
		next, ok := w.predictBest(cur, step, curS)
		if !ok {
			if !allOne(step, dims) {
				halve(&step)
				continue
			}
			// Converged at the finest scale. While budget is left, widen the trust
			// region again (twice at most): the model now knows more than when the
			// steps first shrank, and may see a trade it missed.
			if restarts >= 2 || len(w.profiled) >= w.budget {
				return "converged", nil
			}
			restarts++
			step = initial
			continue
		}
		s, err := w.eval(next)
		if err != nil {
			return w.finish(err)
		}
		if s > curS {
			cur, curS = next, s
			continue
		}
		if allOne(step, dims) {
			// The model was wrong at the finest scale; it now knows one more point.
			continue
		}
		halve(&step)
	}
}

func halve(step *powermode.Index) {
	for k := range powermode.NumKnobs {
		step[k] = max(1, step[k]/2)
	}
}

// finish turns a spent budget into the "budget" stop reason.
func (w *walk) finish(err error) (string, error) {
	if errors.Is(err, errBudgetSpent) {
		return "budget", err
	}
	return "error", err
}

// smooth combines every profiled value with the prediction of a local model fitted to
// the other profiles (leave-one-out), weighting each by the inverse of its variance:
// sigma² for a measurement, and for a prediction what the leave-one-out residuals show
// beyond the measurement noise (model misfit included). A mode whose neighbours predict
// it well is then known better than one measurement, and needs a smaller margin; where
// the model fits badly the weight goes back to the measurement and the full margin.
// It returns the combined profiles and, per profile, the margins (DefaultGMDMarginSigmas
// standard deviations) for times and for powers.
func (w *walk) smooth(sigma float64) ([]ModeProfile, []float64, []float64) {
	n := len(w.known)
	out := make([]ModeProfile, n)
	mT, mP := make([]float64, n), make([]float64, n)
	preds := make([]*ModeProfile, n)
	var rT, rP float64
	var nT, nP int
	var step powermode.Index
	for k, d := range w.sp.Dims() {
		step[k] = max(1, (d+2)/4)
	}
	s2 := sigma * sigma
	for i, mp := range w.known {
		out[i] = cloneProfile(mp)
		n := float64(w.repeats(mp.Mode))
		mT[i], mP[i] = DefaultGMDMarginSigmas*sigma/math.Sqrt(n), DefaultGMDMarginSigmas*sigma/math.Sqrt(n)
		idx, ok := w.sp.Index(mp.Mode)
		if !ok {
			continue
		}
		f, ok := w.fitAround(idx, step, mp, true)
		if !ok {
			continue
		}
		pr := f.predict(mp.Mode, mp.Infer)
		preds[i] = &pr
		// Residuals beyond what the (averaged) measurement's own noise explains.
		ex := s2 / n
		d := math.Log(mp.Train.TimeMS / pr.Train.TimeMS)
		rT, nT = rT+d*d-ex, nT+1
		d = mp.Train.PowerMW/pr.Train.PowerMW - 1
		rP, nP = rP+d*d-ex, nP+1
		for j, ip := range mp.Infer {
			d = math.Log(ip.TimeMS / pr.Infer[j].TimeMS)
			rT, nT = rT+d*d-ex, nT+1
			d = ip.PowerMW/pr.Infer[j].PowerMW - 1
			rP, nP = rP+d*d-ex, nP+1
		}
	}
	if nT < 2*nFeat {
		return out, mT, mP
	}
	// What the residuals show beyond the measurement noise, at least a quarter of it:
	// the residual estimate itself is noisy.
	predT := math.Max(rT/float64(nT), s2/4)
	predP := math.Max(rP/float64(nP), s2/4)
	wt, wp := 1/predT, 1/predP
	for i, pr := range preds {
		if pr == nil {
			continue
		}
		// An average of n measurements weighs n times one.
		wm := float64(w.repeats(out[i].Mode)) / s2
		ct, cp := 1/math.Sqrt(wm+wt), 1/math.Sqrt(wm+wp)
		// The blend may raise a value, never lower it below its measurement: a
		// prediction below the measurement may be the model's bias (its misfit is not
		// zero-mean), and a measurement above the truth is already on the safe side.
		blendT := func(meas, pred float64) float64 {
			return math.Max(meas, math.Exp((wm*math.Log(meas)+wt*math.Log(pred))/(wm+wt)))
		}
		blendP := func(meas, pred float64) float64 { return math.Max(meas, (wm*meas+wp*pred)/(wm+wp)) }
		o := &out[i]
		o.Train.TimeMS, o.Train.PowerMW = blendT(o.Train.TimeMS, pr.Train.TimeMS), blendP(o.Train.PowerMW, pr.Train.PowerMW)
		for j := range o.Infer {
			o.Infer[j].TimeMS = blendT(o.Infer[j].TimeMS, pr.Infer[j].TimeMS)
			o.Infer[j].PowerMW = blendP(o.Infer[j].PowerMW, pr.Infer[j].PowerMW)
		}
		mT[i], mP[i] = DefaultGMDMarginSigmas*ct, DefaultGMDMarginSigmas*cp
	}
	return out, mT, mP
}

// Regression features of a mode. Times scale roughly as 1/clock, so log time is fitted
// against the log of each knob; board power is a sum of per-component terms, so power
// is fitted (linearly) against each knob's value relative to its top level.
func (w *walk) timeFeatures(m powermode.Mode) [powermode.NumKnobs]float64 {
	return [powermode.NumKnobs]float64{math.Log(float64(m.Cores)), math.Log(float64(m.CPUKHz)), math.Log(float64(m.GPUHz)), math.Log(float64(m.EMCHz))}
}

func (w *walk) powerFeatures(m powermode.Mode) [powermode.NumKnobs]float64 {
	return [powermode.NumKnobs]float64{float64(m.Cores) / w.top.Cores, float64(m.CPUKHz) / w.top.CPUKHz, float64(m.GPUHz) / w.top.GPUHz, float64(m.EMCHz) / w.top.EMCHz}
}

// localFit is a weighted least-squares fit, around one mode, of every profiled
// quantity: log times and powers, each affine in its features.
type localFit struct {
	w          *walk
	tc, pc     [powermode.NumKnobs]float64 // feature centres (the current mode)
	time, powr [][]float64                 // per quantity: intercept then one slope per knob
	nb         int
}

const nFeat = powermode.NumKnobs + 1

// wls solves the ridge-regularised weighted least squares of ys on xs (rows with a
// leading 1), one coefficient vector per target.
func wls(xs [][nFeat]float64, ys [][]float64, wts []float64) ([][]float64, bool) {
	var ata [nFeat][nFeat]float64
	nq := len(ys[0])
	atb := make([][nFeat]float64, nq)
	for r, x := range xs {
		for i := range nFeat {
			for j := range nFeat {
				ata[i][j] += wts[r] * x[i] * x[j]
			}
			for q := range nq {
				atb[q][i] += wts[r] * x[i] * ys[r][q]
			}
		}
	}
	// A small ridge keeps a knob that has not moved yet (slope unidentified) at zero.
	for i := 1; i < nFeat; i++ {
		ata[i][i] += 1e-4
	}
	a := mat.NewSymDense(nFeat, nil)
	for i := range nFeat {
		for j := i; j < nFeat; j++ {
			a.SetSym(i, j, ata[i][j])
		}
	}
	var ch mat.Cholesky
	if !ch.Factorize(a) {
		return nil, false
	}
	out := make([][]float64, nq)
	for q := range nq {
		var beta mat.VecDense
		if err := ch.SolveVecTo(&beta, mat.NewVecDense(nFeat, atb[q][:])); err != nil {
			return nil, false
		}
		out[q] = slices.Clone(beta.RawVector().Data)
	}
	return out, true
}

// fit builds the local model around cur. Points are weighted by their distance from cur
// in units of the current steps, so the gradient is local but uses every profile.
func (w *walk) fit(cur powermode.Index, step powermode.Index, curP ModeProfile) (*localFit, bool) {
	return w.fitAround(cur, step, curP, false)
}

// fitAround is fit; loo leaves the centre's own profile out and does not anchor the
// model there (a leave-one-out prediction of it).
func (w *walk) fitAround(cur powermode.Index, step powermode.Index, curP ModeProfile, loo bool) (*localFit, bool) {
	f := &localFit{w: w, tc: w.timeFeatures(curP.Mode), pc: w.powerFeatures(curP.Mode), nb: len(curP.Infer)}
	var xt, xp [][nFeat]float64
	var yt, yp [][]float64
	var wts []float64
	for _, mp := range w.known {
		if len(mp.Infer) != f.nb || (loo && mp.Mode == curP.Mode) {
			continue
		}
		idx, ok := w.sp.Index(mp.Mode)
		if !ok {
			continue
		}
		d := 0.0
		for k := range powermode.NumKnobs {
			d += math.Abs(float64(idx[k]-cur[k])) / float64(step[k])
		}
		wts = append(wts, 1/(1+(d/gmdFitScale)*(d/gmdFitScale)))
		t, p := w.timeFeatures(mp.Mode), w.powerFeatures(mp.Mode)
		rt, rp := [nFeat]float64{1}, [nFeat]float64{1}
		for k := range powermode.NumKnobs {
			rt[k+1], rp[k+1] = t[k]-f.tc[k], p[k]-f.pc[k]
		}
		xt, xp = append(xt, rt), append(xp, rp)
		qt := []float64{math.Log(mp.Train.TimeMS)}
		qp := []float64{mp.Train.PowerMW}
		for _, ip := range mp.Infer {
			qt, qp = append(qt, math.Log(ip.TimeMS)), append(qp, ip.PowerMW)
		}
		yt, yp = append(yt, qt), append(yp, qp)
	}
	if len(wts) < 2 || (loo && len(wts) < nFeat+1) {
		return nil, false
	}
	var ok1, ok2 bool
	f.time, ok1 = wls(xt, yt, wts)
	f.powr, ok2 = wls(xp, yp, wts)
	if !ok1 || !ok2 {
		return nil, false
	}
	if loo {
		return f, true
	}
	// Anchor the model at the current mode's measurement (a Taylor expansion around
	// it): the regression estimates the gradient, not the value where we stand, so a
	// small predicted improvement is not lost in the fit's residual there.
	f.time[0][0], f.powr[0][0] = math.Log(curP.Train.TimeMS), curP.Train.PowerMW
	for j, ip := range curP.Infer {
		f.time[1+j][0], f.powr[1+j][0] = math.Log(ip.TimeMS), ip.PowerMW
	}
	return f, true
}

// predict returns the profile the local model expects at mode m.
func (f *localFit) predict(m powermode.Mode, batches []InferPoint) ModeProfile {
	t, p := f.w.timeFeatures(m), f.w.powerFeatures(m)
	lin := func(c []float64, x, ctr [powermode.NumKnobs]float64) float64 {
		v := c[0]
		for k := range powermode.NumKnobs {
			v += c[k+1] * (x[k] - ctr[k])
		}
		return v
	}
	// Power cannot fall below a small floor however far the line is extrapolated.
	pw := func(q int) float64 { return math.Max(lin(f.powr[q], p, f.pc), 100) }
	out := ModeProfile{Mode: m, Train: TrainPoint{TimeMS: math.Exp(lin(f.time[0], t, f.tc)), PowerMW: pw(0)}, Infer: make([]InferPoint, f.nb)}
	for j := range f.nb {
		out.Infer[j] = InferPoint{Batch: batches[j].Batch, TimeMS: math.Exp(lin(f.time[1+j], t, f.tc)), PowerMW: pw(1 + j)}
	}
	return out
}

// gmdFitScale is the distance, in steps summed over knobs, at which a profile's weight
// in the local fit halves.
const gmdFitScale = 2.0

// predictSteps are the multiples of each knob's step in the trust region.
var predictSteps = [...]int{-2, -1, 0, 1, 2}

// predictBest returns the unprofiled mode of the trust region around cur whose predicted
// objective is highest, if it beats floor.
func (w *walk) predictBest(cur, step powermode.Index, floor float64) (powermode.Index, bool) {
	return w.predictBestBy(cur, step, floor, w.objective)
}

// predictBestBy is predictBest with another objective.
func (w *walk) predictBestBy(cur, step powermode.Index, floor float64, objective func(ModeProfile) float64) (powermode.Index, bool) {
	curP, err := w.profileAt(cur)
	if err != nil {
		return cur, false
	}
	f, ok := w.fit(cur, step, curP)
	if !ok {
		return cur, false
	}
	dims := w.sp.Dims()
	best, bestS, found := cur, floor, false
	seen := map[powermode.Index]bool{}
	var off powermode.Index
	var rec func(k int)
	rec = func(k int) {
		if k < powermode.NumKnobs {
			for _, c := range predictSteps {
				if dims[k] < 2 && c != 0 {
					continue
				}
				off[k] = c
				rec(k + 1)
			}
			return
		}
		// Two steps only along one knob: a far jump in several knobs at once lands
		// where the local model knows least, and confounds the next fit.
		far, moved := false, 0
		for j := range powermode.NumKnobs {
			far = far || off[j] < -1 || off[j] > 1
			if off[j] != 0 {
				moved++
			}
		}
		if far && moved > 1 {
			return
		}
		idx := cur
		for j := range powermode.NumKnobs {
			idx[j] = min(max(cur[j]+off[j]*step[j], 0), dims[j]-1)
		}
		if seen[idx] || !w.sp.ContainsIndex(idx) {
			return
		}
		seen[idx] = true
		if _, known := w.score[idx]; known || w.isKnown(idx) {
			return
		}
		pred := f.predict(w.sp.Mode(idx), curP.Infer)
		pred.Train.Batch = curP.Train.Batch
		if s := objective(pred); s > bestS {
			best, bestS, found = idx, s, true
		}
	}
	rec(0)
	return best, found
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
