package control

import (
	"slices"
	"strconv"

	"github.com/fulcrum-edge/fulcrum/internal/optcheck"
)

// Validate checks a complete Config, as fulcrumd builds it from its configuration (every
// rule set; MaxProfiles 0 means the searcher's default). Failures are
// *optcheck.FieldError naming the field. New does not call it: programmatic callers
// leave fields zero for the defaults. The searcher name is checked where the searchers
// are listed, not here.
func (c Config) Validate() error {
	var ck optcheck.Checks
	optcheck.Positive(&ck, "Period", c.Period)
	optcheck.Positive(&ck, "PowerSample", c.PowerSample)
	optcheck.Positive(&ck, "PowerWindow", c.PowerWindow)
	optcheck.Positive(&ck, "PowerSettle", c.PowerSettle)
	optcheck.Positive(&ck, "RateTau", c.RateTau)
	optcheck.NonNegative(&ck, "RateLevelTau", c.RateLevelTau)
	optcheck.Positive(&ck, "RateWarmup", c.RateWarmup)
	optcheck.Positive(&ck, "DriftRel", c.DriftRel)
	optcheck.Positive(&ck, "DriftHold", c.DriftHold)
	optcheck.Fraction(&ck, "PlanMargin", c.PlanMargin)
	optcheck.Fraction(&ck, "StepMargin", c.StepMargin)
	optcheck.Fraction(&ck, "StepMarginMin", c.StepMarginMin)
	if c.StepMarginMin > c.StepMargin {
		ck.Fail("StepMarginMin", c.StepMarginMin, "must not exceed step_margin (it is the power step's fallback target, nearer the budget; equal to step_margin: no fallback)")
	}
	optcheck.Fraction(&ck, "Hysteresis", c.Hysteresis)
	optcheck.Positive(&ck, "Hold", c.Hold)
	optcheck.Positive(&ck, "Cooldown", c.Cooldown)
	optcheck.Positive(&ck, "LatencyCooldown", c.LatencyCooldown)
	optcheck.Positive(&ck, "PowerFail", c.PowerFail)
	optcheck.Positive(&ck, "MinLatency", c.MinLatency)
	optcheck.Positive(&ck, "MinProfiles", c.MinProfiles)
	optcheck.NonNegative(&ck, "MaxProfiles", c.MaxProfiles)
	optcheck.Fraction(&ck, "NoiseRel", c.NoiseRel)
	if c.Confidence < 0.5 || c.Confidence >= 1 {
		ck.Fail("Confidence", c.Confidence, "must be a probability from 0.5 to below 1 (0.99: claim a plan when it meets every budget with 99% probability)")
	}
	optcheck.Positive(&ck, "Events", c.Events)
	optcheck.Positive(&ck, "ResearchHold", c.ResearchHold)
	optcheck.Positive(&ck, "ResearchBackoffMax", c.ResearchBackoffMax)
	if !slices.Contains(ExternalPolicies, c.ExternalChange) {
		ck.Fail("ExternalChange", strconv.Quote(c.ExternalChange), "must be stand_down, reapply or adopt (what a clock change made outside fulcrumd, e.g. by jetson_clocks, leads to)")
	}
	// LiveOptions has no Validate of its own (live.go is the statistics' file); the
	// knobs fulcrumd sets are checked here.
	optcheck.Positive(&ck, "Live.Warmup", c.Live.Warmup)
	optcheck.Positive(&ck, "Live.Samples", c.Live.Samples)
	optcheck.Positive(&ck, "Live.MinTime", c.Live.MinTime)
	optcheck.Fraction(&ck, "Live.TargetRSE", c.Live.TargetRSE)
	optcheck.NonNegative(&ck, "Live.MaxSamples", c.Live.MaxSamples)
	optcheck.Positive(&ck, "Refine.Window", c.Refine.Window)
	optcheck.Positive(&ck, "Refine.MinTurns", c.Refine.MinTurns)
	optcheck.Positive(&ck, "Refine.MaxRepeats", c.Refine.MaxRepeats)
	optcheck.Positive(&ck, "Refine.ConfirmWindows", c.Refine.ConfirmWindows)
	optcheck.Fraction(&ck, "Refine.TrialMinP", c.Refine.TrialMinP)
	optcheck.Fraction(&ck, "Refine.NearClaimP", c.Refine.NearClaimP)
	optcheck.Fraction(&ck, "Refine.ProbeHeadroom", c.Refine.ProbeHeadroom)
	optcheck.Positive(&ck, "Refine.TrialGain", c.Refine.TrialGain)
	optcheck.Positive(&ck, "Refine.TrialSteps", c.Refine.TrialSteps)
	optcheck.Positive(&ck, "Refine.TrialMax", c.Refine.TrialMax)
	optcheck.Positive(&ck, "Refine.Backoff", c.Refine.Backoff)
	return ck.Err()
}

// DefaultLiveOptions are live profiling's defaults (the values in LiveOptions' brackets),
// for a configuration that spells every knob out. DefaultConfig leaves Live zero, which
// means the same.
func DefaultLiveOptions() LiveOptions { return LiveOptions{}.withDefaults() }
