// Package units reads the budget quantities operators type, with units, the same way
// in fulcrumctl (budget set) and fulcrumd (--latency, --power): 80ms, 30W, none.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
)

// LatencyMS reads a Go duration (80ms, 0.08s, 1.5s) as milliseconds. A bare number
// is refused: ms and s differ by 1000x and both are common.
func LatencyMS(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return 0, fmt.Errorf("--latency %s: give a unit, e.g. %sms or %ss (valid %g ms to %g ms)", s, s, s, plan.MinLatencyMS, plan.MaxLatencyMS)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("--latency %q: want a duration like 80ms or 0.08s (valid %g ms to %g ms)", s, plan.MinLatencyMS, plan.MaxLatencyMS)
	}
	return float64(d) / float64(time.Millisecond), nil
}

// PowerMW reads 30W, 30.5w, 30000mW, a bare number of watts (30), or none / off
// (no power budget). Zero or less is refused (it is not "none"), and so is a bare
// number that only makes sense as milliwatts.
func PowerMW(s string) (float64, error) {
	s = strings.TrimSpace(s)
	lower := strings.ToLower(s)
	if lower == "none" || lower == "off" {
		return 0, nil
	}
	rangeHint := fmt.Sprintf("valid %g W to %g W, or none", plan.MinPowerMW/1000, plan.MaxPowerMW/1000)
	num, scale, unit := lower, 1000.0, "W"
	switch {
	case strings.HasSuffix(lower, "mw"):
		num, scale, unit = strings.TrimSuffix(lower, "mw"), 1, "mW"
	case strings.HasSuffix(lower, "kw"):
		num, scale, unit = strings.TrimSuffix(lower, "kw"), 1e6, "kW"
	case strings.HasSuffix(lower, "w"):
		num = strings.TrimSuffix(lower, "w")
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("--power %q: want watts like 30W, 30 or 30000mW (%s)", s, rangeHint)
	}
	if v <= 0 {
		// 0 used to remove the budget silently; "none" says that on purpose.
		return 0, fmt.Errorf("--power %s: a power budget must be at least %g W; to remove the power budget give --power none (%s)", s, plan.MinPowerMW/1000, rangeHint)
	}
	if unit == "W" && num == lower && v >= 1000 {
		return 0, fmt.Errorf("--power %s: a bare number is watts and %s W is more than any Jetson draws; did you mean %smW (%g W)? (%s)", s, s, s, v/1000, rangeHint)
	}
	return v * scale, nil
}
