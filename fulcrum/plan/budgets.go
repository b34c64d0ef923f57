package plan

import (
	"errors"
	"fmt"
	"math"

	"github.com/fulcrum-edge/fulcrum/internal/limits"
)

// Budgets are what the operator asks for (docs/design.md §2). It is the one budgets type from
// fulcrumd's configuration and the control API (which keeps a wire form of its own) to
// the controller and the model.
//
// As the operator's targets (the controller's, the API's), RateRPS 0 means "measure the
// arrival rate" and PowerMW 0 means "no power budget" (ValidateTargets). The model needs
// every field (Validate): the controller fills the measured rate and a no-limit power
// before it plans.
type Budgets struct {
	RateRPS   float64 `json:"rate_rps"`   // λ, inference arrivals per second
	LatencyMS float64 `json:"latency_ms"` // L, on the Quantile of per-request latency
	PowerMW   float64 `json:"power_mw"`   // P, on the moving average of board power
	Quantile  float64 `json:"quantile"`   // q, default 0.99
	RhoMax    float64 `json:"rho_max"`    // cap on the inference share of GPU time, default 0.95
}

// WithDefaults fills a zero Quantile and RhoMax.
func (b Budgets) WithDefaults() Budgets {
	if b.Quantile == 0 {
		b.Quantile = DefaultQuantile
	}
	if b.RhoMax == 0 {
		b.RhoMax = DefaultRhoMax
	}
	return b
}

// The budget fields, as JSON, flags and error messages name them.
const (
	FieldRate     = "rate_rps"
	FieldLatency  = "latency_ms"
	FieldPower    = "power_mw"
	FieldQuantile = "quantile"
	FieldRhoMax   = "rho_max"
)

// The budget limits, written once in internal/limits (a leaf, so that internal/units
// checks against them without importing the planner): the API, the controller, the
// configuration, the CLI and the benchmark all validate through them.
const (
	MinRateRPS   = limits.MinRateRPS
	MaxRateRPS   = limits.MaxRateRPS
	MinLatencyMS = limits.MinLatencyMS
	MaxLatencyMS = limits.MaxLatencyMS
	MinPowerMW   = limits.MinPowerMW
	MaxPowerMW   = limits.MaxPowerMW
	MinQuantile  = limits.MinQuantile
	MaxQuantile  = limits.MaxQuantile
	MinRhoMax    = limits.MinRhoMax
	MaxRhoMax    = limits.MaxRhoMax
)

// The training-weight limits (a training job's share weight among the jobs, default 1).
const (
	MinTrainWeight = limits.MinTrainWeight
	MaxTrainWeight = limits.MaxTrainWeight
)

// Limits returns the valid range of a budget field and the unit hint its error message
// ends with.
func Limits(field string) (lo, hi float64, hint string) {
	switch field {
	case FieldRate:
		return MinRateRPS, MaxRateRPS, " requests per second"
	case FieldLatency:
		return MinLatencyMS, MaxLatencyMS, " milliseconds (a value below 0.1 is probably seconds given as ms)"
	case FieldPower:
		return MinPowerMW, MaxPowerMW, " milliwatts (1 W to 1 kW; a value below 1000 is probably watts given as mW)"
	case FieldQuantile:
		return MinQuantile, MaxQuantile, " (e.g. 0.99 for p99)"
	case FieldRhoMax:
		return MinRhoMax, MaxRhoMax, " (share of GPU time inference may take)"
	}
	return math.Inf(-1), math.Inf(1), ""
}

// RangeError is a budget field out of its range.
type RangeError struct {
	Field  string
	Value  float64
	Lo, Hi float64
	Hint   string
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("%s = %v is out of range: want %g to %g%s", e.Field, e.Value, e.Lo, e.Hi, e.Hint)
}

// CheckField returns a *RangeError when v is outside field's limits (or not a number).
func CheckField(field string, v float64) error {
	lo, hi, hint := Limits(field)
	if math.IsNaN(v) || math.IsInf(v, 0) || v < lo || v > hi {
		return &RangeError{Field: field, Value: v, Lo: lo, Hi: hi, Hint: hint}
	}
	return nil
}

// Validate rejects budgets the model cannot plan for: every field in range, none left
// zero (call WithDefaults first for Quantile and RhoMax). Every message names the
// field and the valid range.
func (b Budgets) Validate() error { return b.validate(false) }

// ValidateTargets is Validate for the operator's targets as the daemon holds them:
// RateRPS 0 (measure the rate), PowerMW 0 (no power budget), Quantile and RhoMax 0 (the
// defaults) are valid there.
func (b Budgets) ValidateTargets() error { return b.validate(true) }

func (b Budgets) validate(targets bool) error {
	var errs []error
	check := func(field string, v float64) {
		if targets && v == 0 && field != FieldLatency {
			return
		}
		if err := CheckField(field, v); err != nil {
			errs = append(errs, err)
		}
	}
	check(FieldRate, b.RateRPS)
	check(FieldLatency, b.LatencyMS)
	check(FieldPower, b.PowerMW)
	check(FieldQuantile, b.Quantile)
	check(FieldRhoMax, b.RhoMax)
	return errors.Join(errs...)
}
