// Package budgettext is the one way budgets are written for people: fulcrumctl budget
// get (through the control API's wire types) and the controller's events use the same
// words. It imports only the standard library, so the wire types stay a leaf.
package budgettext

import "fmt"

// Shared is the shared budgets, e.g. "latency 80ms (p99), power 30W, rate auto".
// powerMW 0 is no power budget; with rateAuto, rateRPS is the measured rate (0: none yet).
func Shared(latencyMS, quantile, powerMW, rateRPS float64, rateAuto bool) string {
	power := "none"
	if powerMW > 0 {
		power = fmt.Sprintf("%gW", powerMW/1000)
	}
	rate := fmt.Sprintf("%g req/s", rateRPS)
	if rateAuto {
		rate = "auto"
		if rateRPS > 0 {
			rate = fmt.Sprintf("auto (measured %.3g req/s)", rateRPS)
		}
	}
	return fmt.Sprintf("latency %gms (p%g), power %s, rate %s", latencyMS, quantile*100, power, rate)
}

// Stream is one workload's own budgets: "latency 50ms, shared rate", "training weight
// 2", "shared" (zero fields are the shared ones).
func Stream(latencyMS, rateRPS, trainWeight float64) string {
	if latencyMS == 0 && rateRPS == 0 {
		if trainWeight == 0 {
			return "shared"
		}
		return fmt.Sprintf("training weight %g", trainWeight)
	}
	l, r := "shared latency", "shared rate"
	if latencyMS > 0 {
		l = fmt.Sprintf("latency %gms", latencyMS)
	}
	if rateRPS > 0 {
		r = fmt.Sprintf("rate %g req/s", rateRPS)
	}
	out := l + ", " + r
	if trainWeight > 0 {
		out += fmt.Sprintf(", training weight %g", trainWeight)
	}
	return out
}
