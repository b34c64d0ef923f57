package search

import (
	"fmt"
	"strconv"
	"strings"
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
	// gmdMaxDecisionRepeats caps the repeats averaged at one mode when confirming for
	// the decision: σ/√n shrinks slowly past it, and the profiles do more elsewhere.
	gmdMaxDecisionRepeats = 8
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

// ParseGMDName reads GMD variants: gmd-m<margin percent>, gmd-p<penalty>, gmd-b<profiles>,
// gmd-c<profiles kept back for repeat measurements> (gmd-c0: none), gmd-f<fallback
// margin in tenths of σ> (gmd-f10: 1σ; gmd-f0: no fallback), gmd-s0 (no smoothing),
// combinable (gmd-m6-p8, gmd-c0-f0).
func ParseGMDName(name string) (GMDOptions, error) {
	var o GMDOptions
	bad := fmt.Errorf("searcher %q: want gmd followed by -m<margin percent>, -p<penalty>, -b<profile budget>, -c<profiles kept for repeats>, -f<fallback margin in tenths of σ> or -s0 (no smoothing), e.g. gmd-m4, gmd-m6-b20 or gmd-c0-f0", name)
	for _, part := range strings.Split(strings.TrimPrefix(name, "gmd-"), "-") {
		if len(part) < 2 {
			return o, bad
		}
		v, err := strconv.ParseFloat(part[1:], 64)
		if err != nil || v < 0 {
			return o, bad
		}
		switch part[0] {
		case 'm':
			if v >= 50 {
				return o, bad
			}
			o.Margin = v / 100
			if v == 0 {
				o.Margin = -1 // exact budgets
			}
		case 'p':
			o.Penalty = v
		case 'b':
			o.MaxProfiles = int(v)
		case 's':
			o.NoSmooth = v == 0
		case 'f':
			o.FallbackSigmas = []float64{v / 10} // f10: 1σ; f0: none
			if v == 0 {
				o.FallbackSigmas = []float64{}
			}
		case 'c':
			o.Confirm = int(v)
			if v == 0 {
				o.Confirm = -1 // no repeat measurements
			}
		default:
			return o, bad
		}
	}
	return o, nil
}
