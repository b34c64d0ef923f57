package search

import (
	"errors"
	"fmt"
	"math"

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
		var fresh []plan.ModeProfile
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
		strict := func(mp plan.ModeProfile) float64 {
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
			closest := func(mp plan.ModeProfile) float64 {
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
func (w *walk) replace(fresh []plan.ModeProfile) {
	avg := fresh[0].Clone()
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
