package search

import (
	"math"
	"slices"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// gmdMaxTrades caps the profiles a walk spends on trade probes (trade): a step up
// along a knob that broke the power budget, paid for by stepping the least efficient
// knobs down.
const gmdMaxTrades = 2

// probe is one finite-difference probe of the walk's first phase: the mode a step
// along one knob from the start.
type probe struct {
	knob powermode.Knob
	idx  powermode.Index
	mp   plan.ModeProfile
	up   bool
}

// knobSaving is what stepping a knob down saves, read from its probe.
type knobSaving struct {
	knob      powermode.Knob
	slopeMW   float64 // training power per unit of the knob's power feature
	sampPerMW float64 // training samples/s the knob buys per mW
}

// trade is the walk's diagonal move at the power budget (docs/design.md §3, "Trading
// knobs at the power budget"; issue 31). A probe a step up along knob k that came back
// over the power budget says nothing of what k buys — the live profiler abandons such
// a mode and answers with borrowed times (plan.ModeProfile.Estimated) — and the
// one-knob steps that follow never raise k again: the walk stops at the start's clock
// while the optimum at that budget trades, say, cores and the memory clock down for the
// GPU clock up. For each such k (in the probes' order) trade profiles k one level up
// with the other knobs stepped down, least training throughput per watt first, each by
// as little as brings the power the probes predict under the budget less the margin.
// A try measured over the budget teaches the next one its miss (the next pays that much
// more). At most gmdMaxTrades profiles; it returns the best mode and score seen.
// Each knob's saving is read from its probe: training power linear in the walk's power
// features (cores, squared clocks), its worth in samples/s per watt; knobs whose probe
// was estimated, or moved the power by less than the noise, are not stepped down.
func (w *walk) trade(cur powermode.Index, curP plan.ModeProfile, probes []probe, best powermode.Index, bestS float64) (powermode.Index, float64, error) {
	budget := w.pdec.Budgets.PowerMW
	if budget <= 0 {
		return best, bestS, nil
	}
	pc := w.powerFeatures(curP.Mode)
	thr := func(mp plan.ModeProfile) float64 { return float64(mp.Train.Batch) / mp.Train.TimeMS * 1000 }
	var downs []knobSaving
	for _, pr := range probes {
		if pr.mp.Estimated || cur[pr.knob] == 0 {
			continue
		}
		dP := pr.mp.Train.PowerMW - curP.Train.PowerMW
		df := w.powerFeatures(pr.mp.Mode)[pr.knob] - pc[pr.knob]
		// A power change within the noise says nothing of the knob's cost.
		if df == 0 || dP/df <= 0 || math.Abs(dP) <= w.margin/DefaultGMDMarginSigmas*curP.Train.PowerMW {
			continue
		}
		downs = append(downs, knobSaving{pr.knob, dP / df, (thr(pr.mp) - thr(curP)) / dP})
	}
	slices.SortStableFunc(downs, func(a, b knobSaving) int { return cmpF(a.sampPerMW, b.sampPerMW) })
	spent := 0
	for _, pr := range probes {
		k := pr.knob
		upMW := pr.mp.Train.PowerMW - curP.Train.PowerMW
		dfK := w.powerFeatures(pr.mp.Mode)[k] - pc[k]
		// Over the budget by more than the noise: abandoned, or measured clearly over.
		over := pr.mp.Estimated || pr.mp.Train.PowerMW > budget*(1+w.margin/DefaultGMDMarginSigmas)
		if !pr.up || !over || upMW <= 0 || dfK <= 0 {
			continue
		}
		// k one level up; its power the probe's, scaled along k's power feature (an
		// estimated probe's power is the reading that tripped the guard: a floor).
		hi := cur
		hi[k]++
		hiMW := curP.Train.PowerMW + upMW*(w.powerFeatures(w.sp.Mode(hi))[k]-pc[k])/dfK
		// The knobs whose probe bought no training throughput beyond the noise pay
		// first, a probe's step down each, whatever the power predicted: a knob's
		// saving grows faster down its range than its probe shows (the memory clock's
		// power is not convex in it at the low end).
		for _, fr := range probes {
			d := fr.knob
			if d == k || fr.mp.Estimated || cur[d] == 0 {
				continue
			}
			gain := (thr(fr.mp) - thr(curP)) / thr(curP)
			if !fr.up {
				gain = -gain
			}
			if gain > gmdPredictionSigmas*w.margin/DefaultGMDMarginSigmas {
				continue
			}
			hi[d] = max(0, cur[d]-max(1, abs(fr.idx[d]-cur[d])))
			if i := slices.IndexFunc(downs, func(x knobSaving) bool { return x.knob == d }); i >= 0 {
				hiMW += downs[i].slopeMW * (w.powerFeatures(w.sp.Mode(hi))[d] - pc[d])
			}
		}
		target := budget * (1 - w.margin)
		for spent < gmdMaxTrades {
			c, predMW, ok := w.payDown(hi, hiMW, target, downs, k)
			if !ok {
				break
			}
			spent++
			s, err := w.eval(c)
			if err != nil {
				return best, bestS, err
			}
			if s > bestS {
				best, bestS = c, s
			}
			mp, ok := w.knownAt(c)
			if !ok || mp.Train.PowerMW <= budget {
				break
			}
			target -= mp.Train.PowerMW - predMW
		}
	}
	return best, bestS, nil
}

// payDown steps the knobs of downs (other than k, in order) down from hi, each by as
// little as brings the predicted training power (hiMW at hi) under target, else to its
// lowest level and on to the next knob. It returns the mode reached and its predicted
// power; ok is false when the power cannot be brought under target or the mode is not
// in the space or already known.
func (w *walk) payDown(hi powermode.Index, hiMW, target float64, downs []knobSaving, k powermode.Knob) (powermode.Index, float64, bool) {
	c := hi
	base := w.powerFeatures(w.sp.Mode(hi))
	pred := func(c powermode.Index) float64 {
		f := w.powerFeatures(w.sp.Mode(c))
		v := hiMW
		for _, d := range downs {
			if d.knob != k {
				v += d.slopeMW * (f[d.knob] - base[d.knob])
			}
		}
		return v
	}
	for _, d := range downs {
		if pred(c) <= target {
			break
		}
		if d.knob == k {
			continue
		}
		from := c[d.knob]
		c[d.knob] = 0
		for v := from - 1; v >= 0; v-- {
			t := c
			t[d.knob] = v
			if pred(t) <= target {
				c = t
				break
			}
		}
	}
	if pred(c) > target || !w.sp.ContainsIndex(c) || w.isKnown(c) {
		return c, 0, false
	}
	if _, scored := w.score[c]; scored {
		return c, 0, false
	}
	return c, pred(c), true
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
