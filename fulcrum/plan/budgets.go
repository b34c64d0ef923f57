package plan

import (
	"errors"
	"fmt"
	"math"

	"github.com/fulcrum-edge/fulcrum/internal/limits"
)

// Budgets are model v1's input for one inference stream (docs/design.md §2): every
// field set and in range (Validate). What the operator asks for, where the rate and power
// may be left open, is Targets; Targets.Budgets is the one conversion.
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
func (b Budgets) Validate() error {
	var errs []error
	for _, f := range []struct {
		field string
		v     float64
	}{{FieldRate, b.RateRPS}, {FieldLatency, b.LatencyMS}, {FieldPower, b.PowerMW}, {FieldQuantile, b.Quantile}, {FieldRhoMax, b.RhoMax}} {
		if err := CheckField(f.field, f.v); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
