package search

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

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
	if w.dec != nil {
		return w.confirmForDecision(rm, total)
	}
	tried := map[powermode.Mode]bool{}
	for {
		left := total - len(w.profiled) - len(w.remeasured)
		if left < 2 {
			return nil
		}
		profiles, mT, mP := w.margins(smooth)
		var best, cand plan.Eval
		need := 0
		haveBest, haveCand := false, false
		for i, mp := range profiles {
			for _, t := range mp.TrainChoices() {
				for _, ip := range mp.Infer {
					if e := w.robustEvalM(mp, t, ip, mT[i], mP[i]); e.Feasible && (!haveBest || e.Better(best)) {
						best, haveBest = e, true
					}
				}
			}
		}
		for i, mp := range profiles {
			if tried[mp.Mode] || w.repeats(mp.Mode) > 1 {
				continue
			}
			for _, cfg := range configsOf(mp) {
				t, ip := cfg.t, cfg.ip
				e := w.model.Evaluate(mp.Mode, t, ip)
				if !e.Feasible || (haveCand && !e.Better(cand)) || (haveBest && !e.Better(best)) {
					continue
				}
				// The largest fraction of the margin at which it still fits (bisection).
				lo, hi := 0.0, 1.0
				for range 20 {
					mid := (lo + hi) / 2
					if w.robustEvalM(mp, t, ip, mid*mT[i], mid*mP[i]).Feasible {
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
		if done, err := w.repeat(rm, cand.Mode, need); done || err != nil {
			return err
		}
	}
}

// repeat measures m again k times (fewer when the search's time runs out), counts each
// repeat and makes m's known profile the mean of the fresh ones (replace). done says the
// time ran out: the repeats stop there.
func (w *walk) repeat(rm Remeasurer, m powermode.Mode, k int) (done bool, err error) {
	var fresh []plan.ModeProfile
	for range k {
		if w.outOfTime() {
			break
		}
		mp, err := w.timed(func() (plan.ModeProfile, error) { return rm.Remeasure(w.ctx, m) })
		if err != nil {
			return false, fmt.Errorf("remeasure %s: %w", m, err)
		}
		w.remeasured = append(w.remeasured, m)
		fresh = append(fresh, mp)
	}
	w.replace(fresh)
	return w.timedOut, nil
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
		strict := func(mp plan.ModeProfile) float64 {
			s := math.Inf(-1)
			for _, cfg := range configsOf(mp) {
				if e := w.robustEvalM(mp, cfg.t, cfg.ip, 1.5*w.margin, 1.5*w.margin); e.Feasible {
					s = math.Max(s, e.ThroughputSPS/w.thetaRef)
				}
			}
			return s
		}
		next, ok := w.predictBestBy(cur, step, math.Inf(-1), each(strict))
		if !ok {
			// No mode near the best-scored one is predicted to fit: go from the
			// profiled mode that comes closest to fitting towards the mode predicted to
			// come closer still (least violation with the margin; throughput breaks
			// ties), rather than stop with profiles unspent and nothing to claim.
			closest := func(mp plan.ModeProfile) float64 {
				s := math.Inf(-1)
				for _, cfg := range configsOf(mp) {
					e := w.robustEvalM(mp, cfg.t, cfg.ip, w.margin, w.margin)
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
			if next, ok = w.predictBestBy(cur, step, math.Inf(-1), each(strict)); !ok {
				if next, ok = w.predictBestBy(cur, step, math.Inf(-1), each(closest)); !ok {
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

// replace pools fresh measurements of a mode with its earlier repeats and sets its
// known profile to their mean (Repeats: how many), leaving out the first measurement,
// as the profilers store them (control.LiveProfiler.Remeasure, truthprof): the first
// measurement was what made the mode worth confirming, so it keeps its optimism.
func (w *walk) replace(fresh []plan.ModeProfile) {
	if len(fresh) == 0 {
		return
	}
	m := fresh[0].Mode
	sum := w.sums[m]
	for _, mp := range fresh {
		plan.AddRepeat(&sum, mp)
	}
	w.sums[m] = sum
	avg := plan.RepeatMean(sum)
	for i := range w.known {
		if w.known[i].Mode == m {
			w.known[i] = avg
			w.reps[m] = sum.Repeats
			return
		}
	}
}

// confirmForDecision spends what is left of the profile budget on repeat measurements
// aimed at the decision (plan.Decider) that will claim a configuration from these
// profiles: among the configurations that fit as measured but that it does not claim
// yet (P(every budget met) below its confidence), the one with the highest training
// throughput above the best it already claims, whose measured values would be claimed
// with σ/√n after the fewest repeats the budget still affords, is measured again that
// many times. Its known profile becomes the mean of the fresh repeats alone (what the
// profilers store), so a candidate that only looked good drops out, and one that
// really fits becomes claimable. Repeats continue until no candidate or budget is left.
func (w *walk) confirmForDecision(rm Remeasurer, total int) error {
	for {
		left := total - len(w.profiled) - len(w.remeasured)
		if left < 1 {
			return nil
		}
		cand, k, ok, err := w.confirmCandidate(left)
		if err != nil {
			return err
		}
		if !ok {
			// Nothing a repeat would turn into a claim: spend the profile where the
			// model expects more claimable throughput than the decision has now.
			if took, err := w.globalStep(); err != nil || !took {
				return err
			}
			continue
		}
		if done, err := w.repeat(rm, cand, k); done || err != nil {
			return err
		}
	}
}

// confirmCandidate returns the mode to measure again for the decision and how many
// times (at most left), or ok false when no repeat would let the decision claim more
// throughput than it claims now.
func (w *walk) confirmCandidate(left int) (powermode.Mode, int, bool, error) {
	scored, err := w.dec.ScoreAll(w.known)
	if err != nil {
		return powermode.Mode{}, 0, false, fmt.Errorf("decide: %w", err)
	}
	floor := 0.0
	for _, s := range scored {
		if w.dec.Claims(s) {
			floor = math.Max(floor, s.ThroughputSPS)
		}
	}
	byMode := map[powermode.Mode]plan.ModeProfile{}
	for _, mp := range w.known {
		byMode[mp.Mode] = mp
	}
	var best powermode.Mode
	bestK, bestTheta, found := 0, floor, false
	for _, s := range scored {
		if w.dec.Claims(s) || s.ViolationAdm > 0 || s.ThroughputSPS <= bestTheta {
			continue
		}
		mp := byMode[s.Mode]
		// Fresh repeats replace the first measurement: k of them on a mode measured
		// once leave a mean of k; on a mode already repeated r times, of r + k.
		have := 0
		if n := w.repeats(mp.Mode); n > 1 {
			have = n
		}
		for k := max(1, 2-have); k <= left && have+k <= gmdMaxDecisionRepeats; k++ {
			c := mp.Clone()
			c.Repeats = have + k
			c.Infer = []plan.InferPoint{}
			for _, ip := range mp.Infer {
				if ip.Batch == s.Batch {
					c.Infer = append(c.Infer, ip)
				}
			}
			// The one training turn s runs (micro-batch or whole minibatch).
			c.Micro = slices.DeleteFunc(c.Micro, func(t plan.TrainPoint) bool { return t.Batch != s.MicroBatch })
			rs, err := w.dec.ScoreAll([]plan.ModeProfile{c})
			if err != nil {
				break
			}
			rs = slices.DeleteFunc(rs, func(r plan.Scored) bool { return r.MicroBatch != s.MicroBatch })
			if len(rs) != 1 {
				break
			}
			if w.dec.Claims(rs[0]) {
				best, bestK, bestTheta, found = s.Mode, k, s.ThroughputSPS, true
				break
			}
		}
	}
	return best, bestK, found, nil
}

// globalStep profiles the global pick (globalPick) around the best-scored mode, if one
// beats the throughput the decision claims now. It reports whether it took a profile.
func (w *walk) globalStep() (bool, error) {
	centre, found := powermode.Index{}, false
	best := math.Inf(-1)
	for idx, sc := range w.score {
		if !math.IsNaN(sc) && (sc > best || sc == best && cmpIndex(idx, centre) < 0) {
			centre, best, found = idx, sc, true
		}
	}
	if !found {
		return false, nil
	}
	g, _, ok := w.globalPick(centre, w.claimedFloor())
	if !ok {
		return false, nil
	}
	saved := w.budget
	w.budget = len(w.profiled) + 1
	_, err := w.eval(g)
	w.budget = saved
	if err != nil {
		if errors.Is(err, errBudgetSpent) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}
