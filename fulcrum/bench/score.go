package bench

import (
	"slices"

	"gonum.org/v1/gonum/stat"
)

// summarise is a searcher's row of the report: its outcomes counted over the
// configurations the oracle can satisfy (and false claims over the others).
func summarise(name string, outs []Outcome) SearcherStats {
	st := SearcherStats{Name: name}
	var ratios []float64
	var within, viol, none, profiles, unsat, false_ int
	campaignSeen := map[Pair]bool{}
	for _, o := range outs {
		if o.Err != nil {
			st.Errors++
		}
		// A pair learner's campaign counts once per pair.
		if o.Campaign > 0 && !campaignSeen[o.Pair] {
			campaignSeen[o.Pair] = true
			profiles += o.Campaign
		}
		profiles += o.Profiles
		st.MaxProfiles = max(st.MaxProfiles, o.Campaign+o.Profiles)
		switch o.Status {
		case "oracle_infeasible":
			unsat++
			continue
		case "false_claim":
			unsat++
			false_++
			continue
		case "within":
			within++
		case "violation":
			viol++
		default:
			none++
		}
		ratios = append(ratios, o.Ratio)
	}
	st.WithinBudget = within
	if n := float64(len(ratios)); n > 0 {
		st.WithinBudgetPct = 100 * float64(within) / n
		st.ViolationPct = 100 * float64(viol) / n
		st.NoAnswerPct = 100 * float64(none) / n
		st.MeanOptRatio = stat.Mean(ratios, nil)
		slices.Sort(ratios)
		st.P5OptRatio = stat.Quantile(0.05, stat.Empirical, ratios, nil)
	}
	if unsat > 0 {
		st.FalseClaimPct = 100 * float64(false_) / float64(unsat)
	}
	if len(outs) > 0 {
		st.MeanProfiles = float64(profiles) / float64(len(outs))
	}
	return st
}

// oracleRow is the oracle's row over n configurations; at(i) says how many modes the
// oracle scanned for configuration i and whether anything was feasible there.
func oracleRow(n int, at func(i int) (modes int, feasible bool)) SearcherStats {
	st := SearcherStats{Name: "oracle"}
	feasible, modes := 0, 0
	for i := range n {
		m, ok := at(i)
		modes += m
		st.MaxProfiles = max(st.MaxProfiles, m)
		if ok {
			feasible++
		}
	}
	st.WithinBudget = feasible
	if feasible > 0 {
		st.WithinBudgetPct, st.MeanOptRatio, st.P5OptRatio = 100, 1, 1
	}
	if n > 0 {
		st.MeanProfiles = float64(modes) / float64(n)
	}
	return st
}
