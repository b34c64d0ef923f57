package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
)

func outOfRange(field string, v, lo, hi float64, hint string) *Error {
	return Errorf(http.StatusBadRequest, CodeBadBudget, field,
		"%s = %v is out of range: want %g to %g%s", field, v, lo, hi, hint)
}

// checkRange validates one budget field against plan's limits (the only ones), with
// the API's own wording of the unit hint (it names rate_auto and power 0).
func checkRange(field string, v float64, hint string) *Error {
	var re *plan.RangeError
	if err := plan.CheckField(field, v); errors.As(err, &re) {
		return outOfRange(field, v, re.Lo, re.Hi, hint)
	}
	return nil
}

// Hints after the range in budget errors.
const (
	hintLatency  = " milliseconds"
	hintPower    = " milliwatts, or 0 for no power budget (a value below 1000 is probably watts given as mW)"
	hintRate     = " requests per second, or rate_auto to measure it"
	hintQuantile = " (e.g. 0.99 for p99)"
	hintRho      = " (share of GPU time inference may take)"
)

// Validate checks every budget; the first field out of range is an *Error naming it.
func (b Budgets) Validate() error {
	if e := checkRange("latency_ms", b.LatencyMS, hintLatency); e != nil {
		return e
	}
	if b.PowerMW != 0 {
		if e := checkRange("power_mw", b.PowerMW, hintPower); e != nil {
			return e
		}
	}
	if !b.RateAuto {
		if e := checkRange("rate_rps", b.RateRPS, hintRate); e != nil {
			return e
		}
	}
	if e := checkRange("quantile", b.Quantile, hintQuantile); e != nil {
		return e
	}
	if e := checkRange("rho_max", b.RhoMax, hintRho); e != nil {
		return e
	}
	return nil
}

// Empty reports an update that changes nothing.
func (u BudgetsUpdate) Empty() bool {
	return u.LatencyMS == nil && u.PowerMW == nil && u.RateRPS == nil && u.RateAuto == nil &&
		u.Quantile == nil && u.RhoMax == nil
}

// Apply returns cur with u applied, or an *Error (400 bad_budget) naming the first field
// out of range; cur is never changed.
func (u BudgetsUpdate) Apply(cur Budgets) (Budgets, error) {
	b := cur
	if u.RateRPS != nil && u.RateAuto != nil && *u.RateAuto {
		return cur, Errorf(http.StatusBadRequest, CodeBadBudget, "rate_rps",
			"rate_rps = %v and rate_auto = true contradict each other: set one", *u.RateRPS)
	}
	if u.LatencyMS != nil {
		b.LatencyMS = *u.LatencyMS
		if e := checkRange("latency_ms", b.LatencyMS, hintLatency); e != nil {
			return cur, e
		}
	}
	if u.PowerMW != nil {
		b.PowerMW = *u.PowerMW
		if b.PowerMW != 0 {
			if e := checkRange("power_mw", b.PowerMW, hintPower); e != nil {
				return cur, e
			}
		}
	}
	if u.RateAuto != nil {
		b.RateAuto = *u.RateAuto
		if b.RateAuto {
			b.RateRPS = 0 // the controller reports the measured rate here
		}
		if !b.RateAuto && u.RateRPS == nil {
			return cur, Errorf(http.StatusBadRequest, CodeBadBudget, "rate_auto",
				"rate_auto = false needs rate_rps: give the arrival rate to plan for")
		}
	}
	if u.RateRPS != nil {
		b.RateRPS, b.RateAuto = *u.RateRPS, false
		if e := checkRange("rate_rps", b.RateRPS, hintRate); e != nil {
			return cur, e
		}
	}
	if u.Quantile != nil {
		b.Quantile = *u.Quantile
		if e := checkRange("quantile", b.Quantile, hintQuantile); e != nil {
			return cur, e
		}
	}
	if u.RhoMax != nil {
		b.RhoMax = *u.RhoMax
		if e := checkRange("rho_max", b.RhoMax, hintRho); e != nil {
			return cur, e
		}
	}
	return b, nil
}

// String is a one-line readable form, e.g. "latency 80ms (p99), power 30W, rate auto".
func (b Budgets) String() string {
	power := "none"
	if b.PowerMW > 0 {
		power = fmt.Sprintf("%gW", b.PowerMW/1000)
	}
	rate := fmt.Sprintf("%g req/s", b.RateRPS)
	if b.RateAuto {
		rate = "auto"
		if b.RateRPS > 0 {
			rate = fmt.Sprintf("auto (measured %.3g req/s)", b.RateRPS)
		}
	}
	return fmt.Sprintf("latency %gms (p%g), power %s, rate %s", b.LatencyMS, b.Quantile*100, power, rate)
}

// Plan returns the budgets as the controller holds them: rate 0 where the rate is auto
// (the controller measures it), power 0 for no power budget.
func (b Budgets) Plan() plan.Budgets {
	out := plan.Budgets{LatencyMS: b.LatencyMS, PowerMW: b.PowerMW, Quantile: b.Quantile, RhoMax: b.RhoMax}
	if !b.RateAuto {
		out.RateRPS = b.RateRPS
	}
	return out
}

// BudgetsFrom is the wire form of the controller's budgets b (defaults filled); where
// b's rate is auto (0), RateRPS reports measuredRPS.
func BudgetsFrom(b plan.Budgets, measuredRPS float64) Budgets {
	b = b.WithDefaults()
	out := Budgets{LatencyMS: b.LatencyMS, PowerMW: b.PowerMW, RateRPS: b.RateRPS, RateAuto: b.RateRPS == 0, Quantile: b.Quantile, RhoMax: b.RhoMax}
	if out.RateAuto {
		out.RateRPS = measuredRPS
	}
	return out
}
