package search

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// GMD is discrete multi-dimensional gradient descent over the level indices of the four
// knobs (docs/design.md §3; docs/benchmarks.md). It starts at the nvpmodel preset whose nominal
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
func Derate(b plan.Budgets, margin float64) plan.Budgets {
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

// errTimeSpent stops a walk when the search's time (Problem.TimeLeft) is used up; it is
// a spent budget to every phase, which then plans from what is known.
var errTimeSpent = fmt.Errorf("%w: search time spent", errBudgetSpent)

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
	// The walk aims inside the scheduler's admission room, where the decision can claim.
	model, err := plan.NewModel(p.Rules.Admission.Budgets(p.Budgets), p.InferBatches)
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
	w := &walk{ctx: ctx, sp: p.Space, model: model, margin: margin, prof: prof, budget: budget - reserve, penalty: g.opts.Penalty, score: map[powermode.Index]float64{}, reps: map[powermode.Mode]int{}, sums: map[powermode.Mode]plan.ModeProfile{}, timeLeft: p.TimeLeft}
	// The decision that will claim a configuration from these profiles (the daemon's,
	// and the benchmark's judge): confirmation aims at what it can claim. Without a
	// decision noise it claims whatever fits as measured, and repeats cannot change its
	// mind, so confirmation falls back to GMD's own margin.
	if d := p.Rules.For(p.Budgets, p.InferBatches); d.NoiseRel > 0 && d.Validate() == nil {
		w.dec = &d
	}
	w.pdec = w.predictDecider(p)
	w.setTop()
	for _, mp := range prof.Known() {
		if idx, ok := p.Space.Index(mp.Mode); ok {
			w.known = append(w.known, mp)
			w.score[idx] = math.NaN() // scored once θ_ref is known
		}
	}
	start := gmdStart(p)
	if s, ok := w.knownStart(); ok {
		start = s
	}
	stop, err := w.run(start)
	if err != nil && !errors.Is(err, errBudgetSpent) {
		return Result{}, fmt.Errorf("gmd: %w", err)
	}
	smooth := !g.opts.NoSmooth && margin > 0
	if retreated, err := w.retreat(budget, smooth); err != nil {
		return Result{}, fmt.Errorf("gmd: %w", err)
	} else if retreated > 0 {
		stop += fmt.Sprintf("; %d profile(s) spent retreating to where the budgets hold with the margin", retreated)
	}
	if canRepeat && !w.outOfTime() {
		if err := w.confirm(rm, budget, smooth); err != nil {
			return Result{}, fmt.Errorf("gmd: %w", err)
		}
		if len(w.remeasured) > 0 {
			stop += fmt.Sprintf("; %d repeat measurement(s) near the budget edge", len(w.remeasured))
		}
	}
	if w.timedOut && stop != "time" {
		stop += "; search time spent" // in the retreat or the repeats
	}
	res := Result{Profiled: w.profiled, Remeasured: w.remeasured, Stop: stop}
	// On the daemon's decision path (Rules with a noise) the answer is the decision over
	// what was profiled — what the controller and the benchmark will apply — so that GMD
	// never reports a claim the decision would not make.
	if p.Rules.NoiseRel > 0 {
		if d, err := p.Rules.For(p.Budgets, p.InferBatches).Decide(prof.Known()); err == nil {
			res.Found, res.Feasible, res.Choice = true, d.Feasible, d.Best
			if !d.Feasible {
				res.Stop += fmt.Sprintf("; the decision claims nothing (%s least likely to hold)", d.Binding)
			}
			return res, nil
		}
	}
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
		res.Choice, _ = evalAt(model, best.Mode, w.known, best.Batch, best.MicroBatch)
	}
	return res, nil
}

// margins returns the profiles the final choice is made from and, per profile, the
// relative margins for its times and powers: the margin shrinks as 1/√n with the n
// measurements averaged at a mode, and further where smoothing shows the neighbours
// predict the mode well.
func (w *walk) margins(smooth bool) ([]plan.ModeProfile, []float64, []float64) {
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
func (w *walk) best(smooth bool) (plan.Eval, bool) { return w.bestScaled(smooth, 1) }

// bestScaled is best with every margin multiplied by scale.
func (w *walk) bestScaled(smooth bool, scale float64) (plan.Eval, bool) {
	profiles, mT, mP := w.margins(smooth)
	for i := range mT {
		mT[i], mP[i] = mT[i]*scale, mP[i]*scale
	}
	var best plan.Eval
	found := false
	for i, mp := range profiles {
		for _, t := range mp.TrainChoices() {
			for _, ip := range mp.Infer {
				if e := w.robustEvalM(mp, t, ip, mT[i], mP[i]); !found || e.Better(best) {
					best, found = e, true
				}
			}
		}
	}
	return best, found
}

type walk struct {
	ctx      context.Context
	sp       *powermode.Space
	model    *plan.Model // exact budgets
	margin   float64
	prof     Profiler
	budget   int
	penalty  float64
	thetaRef float64
	known    []plan.ModeProfile // one per mode; repeats are averaged in
	dec      *plan.Decider      // the decision over the profiles; nil: none with noise
	pdec     plan.Decider       // the decision's test applied to predictions (predictDecider)
	reps     map[powermode.Mode]int
	sums     map[powermode.Mode]plan.ModeProfile // per remeasured mode, the sum of its fresh repeats
	profiled []powermode.Mode
	// remeasured lists the repeat measurements, in order (a mode once per repeat).
	remeasured []powermode.Mode
	score      map[powermode.Index]float64 // NaN: profiled before θ_ref was set
	top        struct{ Cores, CPUKHz, GPUHz, EMCHz float64 }
	// timeLeft is Problem.TimeLeft (nil: no time bound); took and measured sum the time
	// profiles and repeats took and count them (their mean predicts the next one's);
	// timedOut says the bound stopped a phase.
	timeLeft func() time.Duration
	took     time.Duration
	measured int
	timedOut bool
}

// outOfTime reports that the search's time is spent: nothing is left, or less than the
// mean time a profile or repeat has taken so far (the next one would end past it).
func (w *walk) outOfTime() bool {
	if w.timeLeft == nil {
		return false
	}
	left := w.timeLeft()
	if left <= 0 || w.measured > 0 && left < w.took/time.Duration(w.measured) {
		w.timedOut = true
		return true
	}
	return false
}

// timed runs one profile or repeat, adding its time to the mean outOfTime predicts with.
func (w *walk) timed(f func() (plan.ModeProfile, error)) (plan.ModeProfile, error) {
	if w.timeLeft == nil {
		return f()
	}
	before := w.timeLeft()
	mp, err := f()
	w.took += max(0, before-w.timeLeft())
	w.measured++
	return mp, err
}

// setTop records every knob's top level (the power features' scale).
func (w *walk) setTop() {
	l := w.sp.Levels()
	w.top.Cores, w.top.CPUKHz = float64(slices.Max(l.Cores)), float64(slices.Max(l.CPUKHz))
	w.top.GPUHz, w.top.EMCHz = float64(slices.Max(l.GPUHz)), float64(slices.Max(l.EMCHz))
}

// profileAt returns the profile of the mode at idx, measuring it when it is not known.
func (w *walk) profileAt(idx powermode.Index) (plan.ModeProfile, error) {
	m := w.sp.Mode(idx)
	for _, k := range w.known {
		if k.Mode == m {
			return k, nil
		}
	}
	if len(w.profiled) >= w.budget {
		return plan.ModeProfile{}, errBudgetSpent
	}
	if w.outOfTime() {
		return plan.ModeProfile{}, errTimeSpent
	}
	mp, err := w.timed(func() (plan.ModeProfile, error) { return w.prof.Profile(w.ctx, m) })
	if err != nil {
		return plan.ModeProfile{}, fmt.Errorf("profile %s: %w", m, err)
	}
	w.known = append(w.known, mp)
	w.profiled = append(w.profiled, m)
	return mp, nil
}

// isKnown reports whether the mode at idx has a profile.
func (w *walk) isKnown(idx powermode.Index) bool {
	m := w.sp.Mode(idx)
	return slices.ContainsFunc(w.known, func(k plan.ModeProfile) bool { return k.Mode == m })
}

// robustEval scores (mode, training turn t, batch) with the planner, its feasibility judged with every
// measured time and power raised by the margin (the measurement may be optimistic by
// that much), its throughput as measured. Raising the times rather than shrinking the
// latency budget leaves the batch-fill part of the latency, which is not measured,
// without a margin.
func (w *walk) robustEval(mp plan.ModeProfile, t plan.TrainPoint, ip plan.InferPoint) plan.Eval {
	return w.robustEvalM(mp, t, ip, w.margin, w.margin)
}

// robustEvalM is robustEval with separate margins for times and powers.
func (w *walk) robustEvalM(mp plan.ModeProfile, t plan.TrainPoint, ip plan.InferPoint, marginT, marginP float64) plan.Eval {
	e := w.model.Evaluate(mp.Mode, t, ip)
	if marginT <= 0 && marginP <= 0 {
		return e
	}
	t.TimeMS, t.PowerMW = t.TimeMS*(1+marginT), t.PowerMW*(1+marginP)
	ip.TimeMS, ip.PowerMW = ip.TimeMS*(1+marginT), ip.PowerMW*(1+marginP)
	r := w.model.Evaluate(mp.Mode, t, ip)
	e.Feasible, e.Violation, e.Binding = r.Feasible, r.Violation, r.Binding
	return e
}

// objective is the penalised score of a (measured or predicted) profile: the best over
// inference batch sizes of relative throughput minus the weighted budget excess.
func (w *walk) objective(mp plan.ModeProfile) float64 {
	if w.thetaRef == 0 {
		w.thetaRef = float64(mp.Train.Batch) / (mp.Train.TimeMS / 1000)
	}
	if w.dec != nil {
		return w.objectiveBy(*w.dec, mp)
	}
	s := math.Inf(-1)
	for _, t := range mp.TrainChoices() {
		for _, ip := range mp.Infer {
			e := w.robustEval(mp, t, ip)
			s = math.Max(s, e.ThroughputSPS/w.thetaRef-w.penalty*e.Violation)
		}
	}
	return s
}

// objectiveBy is the objective as decision d sees the profile: the best over inference
// batch sizes of relative throughput times P(every budget met), less the weighted
// excess as measured. The walk then heads for the throughput the decision can claim,
// and still feels the way back from over a budget, where P is nil.
func (w *walk) objectiveBy(d plan.Decider, mp plan.ModeProfile) float64 {
	return w.objectivesBy(d, []plan.ModeProfile{mp})[0]
}

// objectivesBy is objectiveBy for several profiles at once (one decision's set-up).
func (w *walk) objectivesBy(d plan.Decider, mps []plan.ModeProfile) []float64 {
	out := make([]float64, len(mps))
	for i := range out {
		out[i] = math.Inf(-1)
	}
	scored, err := d.ScoreAll(mps)
	if err != nil {
		return out
	}
	// ScoreAll returns the configurations profile by profile, in order: each
	// profile's training turns × its batches.
	i, j := 0, 0
	for _, sc := range scored {
		for j >= len(mps[i].TrainChoices())*len(mps[i].Infer) {
			i, j = i+1, 0
		}
		out[i] = math.Max(out[i], sc.ThroughputSPS/w.thetaRef*sc.PFeasible-w.penalty*sc.ViolationAdm)
		j++
	}
	return out
}

// predObjectives is objective for predicted profiles: their spread is the prediction's.
func (w *walk) predObjectives(mps []plan.ModeProfile) []float64 {
	if w.dec != nil {
		return w.objectivesBy(w.pdec, mps)
	}
	return each(w.objective)(mps)
}

// each lifts an objective of one profile to a slice of them.
func each(f func(plan.ModeProfile) float64) func([]plan.ModeProfile) []float64 {
	return func(mps []plan.ModeProfile) []float64 {
		out := make([]float64, len(mps))
		for i, mp := range mps {
			out[i] = f(mp)
		}
		return out
	}
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

// run walks from start (docs/design.md §3, docs/benchmarks.md):
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
		return w.finish(err)
	}
	// Re-score profiles inherited from the profiler now that θ_ref is set.
	for idx, s := range w.score {
		if math.IsNaN(s) {
			if _, err := w.eval(idx); err != nil {
				return w.finish(err)
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
	if e, _ := w.model.BestAtMode(curP); (!e.Feasible && e.Binding == plan.ConstraintPower) || w.powerUnclaimed(curP) || w.abandonedOverPower(curP) {
		first = -1
	}
	bestIdx, bestS := cur, curS
	var probes []probe
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
		if mp, ok := w.knownAt(n); ok {
			probes = append(probes, probe{knob: k, idx: n, mp: mp, up: n[k] > cur[k]})
		}
	}
	// 1b. A probe up that broke the power budget: the knob up one level, paid for by
	// the least efficient knobs down (trade).
	if bestIdx, bestS, err = w.trade(cur, curP, probes, bestIdx, bestS); err != nil {
		return w.finish(err)
	}
	cur, curS = bestIdx, bestS
	// Start the trust region at the model's predicted best over the whole space, not
	// at a preset: the probes have given the model every knob's slope.
	if g, _, ok := w.globalPick(cur, 0); ok {
		s, err := w.eval(g)
		if err != nil {
			return w.finish(err)
		}
		if s > curS {
			cur, curS = g, s
		}
	}
	// 2–3. Model-guided steps, off the power ridge first where it caps the GPU clock
	// (freePowerStep).
	initial, stalls, ridged := step, 0, false
	for {
		if err := w.ctx.Err(); err != nil {
			return "cancelled", err
		}
		if next, ok := w.freePowerStep(cur, ridged); ok {
			s, err := w.eval(next)
			if err != nil {
				return w.finish(err)
			}
			if s > curS {
				cur, curS, ridged, step = next, s, true, initial
			}
			continue
		}
		next, ok := w.predictBest(cur, step, curS)
		if !ok {
			if !allOne(step, dims) {
				halve(&step)
				continue
			}
			// Converged at the finest scale. While budget is left, take a global
			// step: profile where the model, which now knows more than when the steps
			// first shrank, expects the most claimable throughput anywhere; move there
			// and start a wide trust region again if it really improves. Twice
			// without improvement and the walk has converged.
			if stalls >= 2 || len(w.profiled) >= w.budget {
				return "converged", nil
			}
			g, _, ok := w.globalPick(cur, w.claimedFloor())
			if !ok {
				return "converged", nil
			}
			s, err := w.eval(g)
			if err != nil {
				return w.finish(err)
			}
			if s > curS {
				cur, curS, step, ridged = g, s, initial, false
				continue
			}
			stalls++
			continue
		}
		s, err := w.eval(next)
		if err != nil {
			return w.finish(err)
		}
		if s > curS {
			cur, curS, ridged = next, s, false
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

// finish turns a spent budget into the "budget" stop reason ("time" for the time).
func (w *walk) finish(err error) (string, error) {
	if errors.Is(err, errTimeSpent) {
		return "time", err
	}
	if errors.Is(err, errBudgetSpent) {
		return "budget", err
	}
	return "error", err
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

// config is one configuration at a profiled mode: a training turn and an inference
// point.
type config struct {
	t  plan.TrainPoint
	ip plan.InferPoint
}

// configsOf lists a profile's configurations: every training turn (the minibatch, then
// each micro-batch) with every inference batch, in ScoreAll's order.
func configsOf(mp plan.ModeProfile) []config {
	ts := mp.TrainChoices()
	out := make([]config, 0, len(ts)*len(mp.Infer))
	for _, t := range ts {
		for _, ip := range mp.Infer {
			out = append(out, config{t, ip})
		}
	}
	return out
}

// evalAt evaluates the configuration (mode, batch, training micro-batch: 0 the whole
// minibatch) from the profile of mode among profiles. ok is false when the mode, the
// batch or the micro-batch is not there.
func evalAt(m *plan.Model, mode powermode.Mode, profiles []plan.ModeProfile, batch, micro int) (plan.Eval, bool) {
	for _, p := range profiles {
		if p.Mode != mode {
			continue
		}
		for _, t := range p.TrainChoices() {
			if t.MicroBatch() != micro {
				continue
			}
			for _, ip := range p.Infer {
				if ip.Batch == batch {
					return m.Evaluate(mode, t, ip), true
				}
			}
		}
	}
	return plan.Eval{}, false
}

// powerUnclaimed reports that the decision claims nothing at p's mode and power is what
// keeps its most likely configuration from a claim: the mean fits the power budget, by
// less than the noise allows. Probing up from there measures modes over the budget
// (traced: a re-search from such a start abandoned every probe up and stopped with
// nothing claimed, training paused for the rest of the run), so the walk probes down.
func (w *walk) powerUnclaimed(p plan.ModeProfile) bool {
	if w.dec == nil {
		return false
	}
	scored, err := w.dec.ScoreAll([]plan.ModeProfile{p})
	if err != nil || len(scored) == 0 {
		return false
	}
	best := scored[0]
	for _, s := range scored {
		if w.dec.Claims(s) {
			return false
		}
		if s.PFeasible > best.PFeasible {
			best = s
		}
	}
	return best.BindingAdm == plan.ConstraintPower
}

// abandonedOverPower reports that p is the live profiler's estimate of a mode abandoned
// because the board's power went over the budget there (its powers are the reading that
// broke it). Such an estimate may have no times of its own (nothing known yet at the
// start), so the model cannot say power binds; probing up from it measures modes over the
// budget too (traced: the Orin NX at 10 W, a preset start over the budget, four probes up
// abandoned and the walk stopped "converged" after one profile).
func (w *walk) abandonedOverPower(p plan.ModeProfile) bool {
	b := w.model.Budgets().PowerMW
	return p.Estimated && b > 0 && b < plan.MaxPowerMW && p.Train.PowerMW > b
}
