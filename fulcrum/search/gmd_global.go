package search

import (
	"math"
	"slices"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// gmdPredictionSigmas is how much less sure a predicted value is than one measurement,
// in units of the measurement's σ: the fitted model's misfit adds to the noise of the
// measurements it was fitted to (about one σ more; the two add as variances).
const gmdPredictionSigmas = math.Sqrt2

// predictDecider is the decision's test applied to predicted profiles: the same budgets,
// confidence and admission room, with the prediction's larger spread as its noise. GMD's
// own margin stands in for the noise when the problem's rules carry none.
func (w *walk) predictDecider(p Problem) plan.Decider {
	d := p.Rules.For(p.Budgets, p.InferBatches)
	sigma := d.NoiseRel
	if sigma <= 0 {
		sigma = w.margin / DefaultGMDMarginSigmas
	}
	d.NoiseRel = math.Min(gmdPredictionSigmas*sigma, 1)
	if d.Validate() != nil {
		d.Rules = plan.Rules{NoiseRel: d.NoiseRel}
	}
	return d
}

// globalPick fits one model to every profile (weights falling off only slowly with the
// distance from centre, the best-scored mode so far) and returns the unprofiled mode
// whose predicted training throughput times predicted P(every budget met) is highest
// over every mode and inference batch of the space, if that beats floor (in samples/s).
// It is the budget-aware step away from a stalled trust region: it goes where the
// model expects the most throughput the decision will claim, wherever that is.
func (w *walk) globalPick(centre powermode.Index, floor float64) (powermode.Index, float64, bool) {
	cp, err := w.profileAt(centre)
	if err != nil {
		return centre, 0, false
	}
	f, ok := w.fit(centre, w.sp.Dims(), cp)
	if !ok {
		return centre, 0, false
	}
	known := make(map[powermode.Mode]bool, len(w.known))
	for _, mp := range w.known {
		known[mp.Mode] = true
	}
	// θ·P ≤ the training throughput alone, batch/T_train: rank every mode by that bound
	// and score the full predictions (the costly part) only while the bound can still
	// beat the best so far.
	type cand struct {
		idx   powermode.Index
		m     powermode.Mode
		bound float64
	}
	var cs []cand
	for idx, m := range w.sp.All() {
		if _, scored := w.score[idx]; scored || known[m] {
			continue
		}
		// Every configuration's power lies between its training and inference powers:
		// when all of them are predicted far over the budget, P(fit) is nil.
		pf := w.powerFeatures(m)
		low := f.lin(f.powr[0], pf, f.pc)
		for q := 1; q < len(f.powr); q++ {
			low = math.Min(low, f.lin(f.powr[q], pf, f.pc))
		}
		if low > w.pdec.Budgets.PowerMW*(1+5*w.pdec.NoiseRel) {
			continue
		}
		tt := math.Exp(f.lin(f.time[0], w.timeFeatures(m), f.tc))
		cs = append(cs, cand{idx, m, float64(cp.Train.Batch) / (tt / 1000)})
	}
	slices.SortFunc(cs, func(a, b cand) int { return cmpF(b.bound, a.bound) })
	best, bestV, found := centre, floor, false
	const chunk = 64
	for lo := 0; lo < len(cs) && cs[lo].bound > bestV; lo += chunk {
		part := cs[lo:min(lo+chunk, len(cs))]
		preds := make([]plan.ModeProfile, len(part))
		for i, c := range part {
			preds[i] = f.predict(c.m, cp)
		}
		scored, err := w.pdec.ScoreAll(preds)
		if err != nil {
			return centre, 0, false
		}
		// ScoreAll returns the configurations profile by profile, each profile with
		// as many (training turn, batch) configurations as cp.
		nb := len(cp.TrainChoices()) * len(cp.Infer)
		for i, s := range scored {
			if v := s.ThroughputSPS * s.PFeasible; v > bestV {
				best, bestV, found = part[i/nb].idx, v, true
			}
		}
	}
	return best, bestV, found
}

// claimedFloor is the highest training throughput the decision (or, without one, GMD's
// margin) would claim from the profiles so far: 0 when it claims nothing.
func (w *walk) claimedFloor() float64 {
	floor := 0.0
	if w.dec != nil {
		scored, err := w.dec.ScoreAll(w.known)
		if err == nil {
			for _, s := range scored {
				if w.dec.Claims(s) {
					floor = math.Max(floor, s.ThroughputSPS)
				}
			}
			return floor
		}
	}
	for _, mp := range w.known {
		for _, t := range mp.TrainChoices() {
			for _, ip := range mp.Infer {
				if e := w.robustEval(mp, t, ip); e.Feasible {
					floor = math.Max(floor, e.ThroughputSPS)
				}
			}
		}
	}
	return floor
}
