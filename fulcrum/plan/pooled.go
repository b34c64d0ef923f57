package plan

import "slices"

// PooledPair is the pair a pair searcher (GMD, ALS) walks when several inference streams
// share the board (docs/design.md §2, "Searching for several streams"): the first training
// job with one pooled stream standing for all of them at the given rates. At a batch size
// b every stream profiles, the pooled stream's time is the rate-weighted mean of the
// streams' times, so at the total rate Λ = Σλ_i its GPU share Λ·τ̄(b)/b is Σρ_i when every
// stream serves b; its power is the streams' share-weighted mean, so the power mix is
// theirs too. Repeats carry over. rates has one rate per stream; b sizes not profiled
// for every stream are left out.
func PooledPair(p MultiProfile, rates []float64) ModeProfile {
	out := ModeProfile{Mode: p.Mode, Repeats: p.Repeats}
	if len(p.Train) > 0 {
		out.Train = p.Train[0]
	}
	if len(p.Infer) == 0 || len(rates) != len(p.Infer) {
		return out
	}
	total := 0.0
	for _, r := range rates {
		total += r
	}
	if !(total > 0) {
		return out
	}
	for _, ip := range p.Infer[0] {
		b := ip.Batch
		var tw, pw float64 // Σ λ_i τ_i(b), Σ λ_i τ_i(b) π_i(b)
		all := true
		for i, pts := range p.Infer {
			j := slices.IndexFunc(pts, func(x InferPoint) bool { return x.Batch == b })
			if j < 0 {
				all = false
				break
			}
			tw += rates[i] * pts[j].TimeMS
			pw += rates[i] * pts[j].TimeMS * pts[j].PowerMW
		}
		if !all || !(tw > 0) {
			continue
		}
		out.Infer = append(out.Infer, InferPoint{Batch: b, TimeMS: tw / total, PowerMW: pw / tw})
	}
	return out
}

// PooledBudgets are the budgets of PooledPair's pair: the total rate, the tightest
// stream's latency budget, and the shared power budget, quantile and GPU-share cap.
func PooledBudgets(b MultiBudgets) Budgets {
	out := Budgets{PowerMW: b.PowerMW, Quantile: b.Quantile, RhoMax: b.RhoMax}
	for i, s := range b.Streams {
		out.RateRPS += s.RateRPS
		if i == 0 || s.LatencyMS < out.LatencyMS {
			out.LatencyMS = s.LatencyMS
		}
	}
	return out.WithDefaults()
}
