// Package units reads the budget quantities operators type, with units, the same way
// in fulcrumctl (budget set) and fulcrumd (--latency, --power): 80ms, 30W, none.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/fulcrum-edge/fulcrum/internal/limits"
)

// LatencyMS reads a Go duration (80ms, 0.08s, 1.5s) as milliseconds, within the budget
// limits (internal/limits). A bare number is refused: ms and s differ by 1000x and both are common.
func LatencyMS(s string) (float64, error) { return LatencyMSOf("--latency", s) }

// LatencyMSOf is LatencyMS with errors naming what the value was given as (a flag,
// a configuration key).
func LatencyMSOf(name, s string) (float64, error) {
	s = strings.TrimSpace(s)
	valid := fmt.Sprintf("valid %g ms to %g ms", limits.MinLatencyMS, limits.MaxLatencyMS)
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		if !(v >= limits.MinLatencyMS) || v > limits.MaxLatencyMS {
			// "e.g. 0ms" used to be suggested here, then refused.
			return 0, fmt.Errorf("%s %s: give a duration with its unit, e.g. 80ms or 0.08s (%s)", name, s, valid)
		}
		return 0, fmt.Errorf("%s %s: give a unit, e.g. %sms or %ss (%s)", name, s, s, s, valid)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want a duration like 80ms or 0.08s (%s)", name, s, valid)
	}
	ms := float64(d) / float64(time.Millisecond)
	if ms < limits.MinLatencyMS || ms > limits.MaxLatencyMS {
		return 0, fmt.Errorf("%s %s is out of range (%s)", name, s, valid)
	}
	return ms, nil
}

// PowerMW reads 30W, 30.5w, 30000mW, a bare number of watts (30), or none / off
// (no power budget). Zero or less is refused (it is not "none"), and so is a bare
// number that only makes sense as milliwatts.
func PowerMW(s string) (float64, error) { return PowerMWOf("--power", s) }

// PowerMWOf is PowerMW with errors naming what the value was given as (a flag, a
// configuration key).
func PowerMWOf(name, s string) (float64, error) {
	s = strings.TrimSpace(s)
	lower := strings.ToLower(s)
	if lower == "none" || lower == "off" {
		return 0, nil
	}
	rangeHint := fmt.Sprintf("valid %g W to %g W, or none", limits.MinPowerMW/1000, limits.MaxPowerMW/1000)
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
		return 0, fmt.Errorf("%s %q: want watts like 30W, 30 or 30000mW (%s)", name, s, rangeHint)
	}
	if v <= 0 {
		// 0 used to remove the budget silently; "none" says that on purpose.
		return 0, fmt.Errorf("%s %s: a power budget must be at least %g W; to remove the power budget give %s none (%s)", name, s, limits.MinPowerMW/1000, name, rangeHint)
	}
	if unit == "W" && num == lower && v > limits.MaxPowerMW/1000 {
		return 0, fmt.Errorf("%s %s: a bare number is watts and %s W is more than any Jetson draws; did you mean %smW (%g W)? (%s)", name, s, s, s, v/1000, rangeHint)
	}
	mw := v * scale
	if mw < limits.MinPowerMW || mw > limits.MaxPowerMW {
		return 0, fmt.Errorf("%s %s (%g W) is out of range (%s)", name, s, mw/1000, rangeHint)
	}
	return mw, nil
}

// FreqHz reads a clock frequency with its unit: 612MHz, 1.7GHz, 204000kHz, 612000000Hz
// (case-insensitive, a space before the unit allowed). A bare number is refused: the
// board's knobs are in kHz (CPU) and Hz (GPU, EMC), so it would be ambiguous.
func FreqHz(flag, s string) (int64, error) {
	lower := strings.ToLower(strings.TrimSpace(s))
	var scale float64
	num := lower
	for _, u := range []struct {
		suffix string
		scale  float64
	}{{"ghz", 1e9}, {"mhz", 1e6}, {"khz", 1e3}, {"hz", 1}} {
		if rest, ok := strings.CutSuffix(lower, u.suffix); ok {
			num, scale = strings.TrimSpace(rest), u.scale
			break
		}
	}
	if scale == 0 {
		return 0, fmt.Errorf("--%s %s: give a unit, e.g. %sMHz or 1.2GHz", flag, s, strings.TrimSpace(s))
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || !(v > 0) || math.IsInf(v, 0) || v*scale > 1e12 {
		return 0, fmt.Errorf("--%s %q: want a frequency like 612MHz or 1.2GHz", flag, s)
	}
	return int64(math.Round(v * scale)), nil
}

// MHz prints a frequency in Hz as MHz with its unit, e.g. "612 MHz", "1728 MHz",
// "204.8 MHz".
func MHz(hz int64) string {
	return strconv.FormatFloat(float64(hz)/1e6, 'f', -1, 64) + " MHz"
}

// Watts prints milliwatts as watts with one decimal and the unit, e.g. "30.0 W".
func Watts(mw float64) string {
	return strconv.FormatFloat(mw/1000, 'f', 1, 64) + " W"
}

// PowerString writes a power budget as PowerMW reads it back: "none" for 0 (no budget),
// otherwise watts with the unit and no rounding ("30W", "12.5W").
func PowerString(mw float64) string {
	if mw == 0 {
		return "none"
	}
	return strconv.FormatFloat(mw/1000, 'f', -1, 64) + "W"
}

// LatencyString writes a latency budget as LatencyMS reads it back: a Go duration
// ("100ms", "42.5ms", "1.5s").
func LatencyString(ms float64) string {
	return time.Duration(math.Round(ms * float64(time.Millisecond))).String()
}
