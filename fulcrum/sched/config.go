package sched

import "github.com/fulcrum-edge/fulcrum/internal/optcheck"

// Validate checks a complete Config, as fulcrumd builds it from its configuration (every
// knob set; zero only where 0 means "off"). Failures are *optcheck.FieldError naming the
// field. New does not call it: programmatic callers leave fields zero for the defaults.
func (c Config) Validate() error {
	var ck optcheck.Checks
	optcheck.Positive(&ck, "LatencyBudget", c.LatencyBudget)
	optcheck.Positive(&ck, "DefaultTrain", c.DefaultTrain)
	optcheck.Positive(&ck, "DefaultInfer", c.DefaultInfer)
	if !(c.EWMAAlpha > 0 && c.EWMAAlpha <= 1) {
		ck.Fail("EWMAAlpha", c.EWMAAlpha, "must be in (0,1]")
	}
	optcheck.Positive(&ck, "OverrunFactor", c.OverrunFactor)
	optcheck.Positive(&ck, "OverrunMin", c.OverrunMin)
	if !(c.HoldFactor >= 1) {
		ck.Fail("HoldFactor", c.HoldFactor, "must be at least 1 (a multiple of the expected turn time)")
	}
	optcheck.Positive(&ck, "HoldMin", c.HoldMin)
	optcheck.NonNegative(&ck, "IdleAdmitArrivals", c.IdleAdmitArrivals)
	optcheck.NonNegative(&ck, "DevK", c.DevK)
	optcheck.NonNegative(&ck, "Margin", c.Margin)
	optcheck.NonNegative(&ck, "Starve", c.Starve)
	optcheck.NonNegative(&ck, "ProfileWait", c.ProfileWait)
	optcheck.Positive(&ck, "Window", c.Window)
	optcheck.Positive(&ck, "WindowSamples", c.WindowSamples)
	optcheck.Positive(&ck, "RecentWindow", c.RecentWindow)
	return ck.Err()
}
