package search

import (
	"slices"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// freePowerStep is GMD's move off the power ridge (docs/design.md §3, "Freeing power for
// the GPU clock"; issue 31). When latency binds at the current mode — the training turn is
// too long for the admission room — and the power budget caps the GPU clock there (a mode at a
// higher GPU clock and no higher other knob is known over the power budget, or the walk came
// here by this move), one-knob steps and one CPU-clock step at a time walk the ridge of
// the high-core, high-memory-clock corner: every GPU step up is over power, every CPU
// step changes the turn by a few ms. What buys the GPU clock the power budget allows is
// cutting cores and memory clock in large steps. freePowerStep returns the first mode not
// yet profiled among: the GPU clock one level up with half the cores and the EMC level
// below; with half the cores; with half the cores and half the CPU clock; with the EMC
// level below. ok is false when the rule does
// not apply or every candidate is known. The candidates are profiled from the walk's
// budget like any other mode.
func (w *walk) freePowerStep(cur powermode.Index, cameByRidge bool) (powermode.Index, bool) {
	curP, ok := w.knownAt(cur)
	if !ok {
		return cur, false
	}
	e, ok := w.model.BestAtMode(curP)
	if !ok || e.Feasible || e.Binding != plan.ConstraintLatency {
		return cur, false
	}
	dims := w.sp.Dims()
	g := powermode.KnobGPU
	if cur[g]+1 >= dims[g] {
		return cur, false
	}
	if !cameByRidge && !w.gpuCappedByPower(cur) {
		return cur, false
	}
	up := cur
	up[g]++
	half := up
	half[powermode.KnobCores] = halfCoresIndex(w.sp.Levels().Cores, cur[powermode.KnobCores])
	emcDown := up
	emcDown[powermode.KnobEMC] = max(cur[powermode.KnobEMC]-1, 0)
	both := half
	both[powermode.KnobEMC] = emcDown[powermode.KnobEMC]
	slow := half
	slow[powermode.KnobCPU] = halfLevelIndex(w.sp.Levels().CPUKHz, cur[powermode.KnobCPU])
	for _, c := range []powermode.Index{both, half, slow, emcDown} {
		if c == up || !w.sp.ContainsIndex(c) || w.isKnown(c) {
			continue
		}
		return c, true
	}
	return cur, false
}

// gpuCappedByPower reports that a known mode at a higher GPU clock than cur, with each
// other knob at or below cur's level, draws more than the power budget with training
// running (measured so, or abandoned over it by the live profiler's guard): power grows with
// every knob, so cur's other knobs at that GPU clock would draw more still.
func (w *walk) gpuCappedByPower(cur powermode.Index) bool {
	for _, mp := range w.known {
		idx, ok := w.sp.Index(mp.Mode)
		if !ok || idx[powermode.KnobGPU] <= cur[powermode.KnobGPU] {
			continue
		}
		below := true
		for _, k := range []powermode.Knob{powermode.KnobCores, powermode.KnobCPU, powermode.KnobEMC} {
			below = below && idx[k] <= cur[k]
		}
		if !below {
			continue
		}
		if b := w.pdec.Budgets.PowerMW; b > 0 && mp.Train.PowerMW > b {
			return true
		}
	}
	return false
}

// knownAt returns the known profile of the mode at idx, without profiling it.
func (w *walk) knownAt(idx powermode.Index) (plan.ModeProfile, bool) {
	m := w.sp.Mode(idx)
	i := slices.IndexFunc(w.known, func(k plan.ModeProfile) bool { return k.Mode == m })
	if i < 0 {
		return plan.ModeProfile{}, false
	}
	return w.known[i], true
}

// halfCoresIndex is the index of the largest core-count level at most half of the level
// at i (the lowest level when none is), never above i−1 (i itself at the lowest level).
func halfCoresIndex(cores []int, i int) int { return halfLevelIndex(cores, i) }

// halfLevelIndex is the index of the largest of the ascending levels at most half of the
// level at i (the lowest when none is), never above i−1 (i itself at the lowest level).
func halfLevelIndex[T int | int64](levels []T, i int) int {
	if i <= 0 {
		return 0
	}
	out := 0
	for j, v := range levels[:i] {
		if v <= levels[i]/2 {
			out = j
		}
	}
	return out
}

// knownStart is where a walk that inherits profiles starts (a re-search, issue 31): the
// known mode the decision ranks best — the highest training throughput times P(every
// budget met), else the least excess over the admission room — so that a re-search goes
// on from where the last one ended instead of walking from the preset again through
// modes the store answers. ok is false without a decision or known profiles.
func (w *walk) knownStart() (powermode.Index, bool) {
	if w.dec == nil || len(w.known) == 0 {
		return powermode.Index{}, false
	}
	scored, err := w.dec.ScoreAll(w.known)
	if err != nil {
		return powermode.Index{}, false
	}
	var best powermode.Index
	bestV, bestViol, found := 0.0, 0.0, false
	i, j := 0, 0
	for _, sc := range scored {
		for j >= len(w.known[i].TrainChoices())*len(w.known[i].Infer) {
			i, j = i+1, 0
		}
		j++
		idx, ok := w.sp.Index(w.known[i].Mode)
		if !ok {
			continue
		}
		v := sc.ThroughputSPS * sc.PFeasible
		if !found || v > bestV || (v == bestV && sc.ViolationAdm < bestViol) {
			best, bestV, bestViol, found = idx, v, sc.ViolationAdm, true
		}
	}
	return best, found
}
