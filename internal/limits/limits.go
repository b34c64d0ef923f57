// Package limits holds the budget limits, the only ones in the code: plan's budgets
// validate through them (plan re-exports them as plan.MinLatencyMS, …) and
// internal/units range-checks what a person types against them, without importing the
// planner. A leaf: it imports nothing.
package limits

// The range of each budget, in the unit its name carries.
const (
	MinRateRPS   float64 = 1e-3
	MaxRateRPS   float64 = 1e5
	MinLatencyMS float64 = 0.1
	MaxLatencyMS float64 = 600000
	MinPowerMW   float64 = 1000
	MaxPowerMW   float64 = 1e6
	MinQuantile  float64 = 0.5
	MaxQuantile  float64 = 0.99999
	MinRhoMax    float64 = 0.05
	MaxRhoMax    float64 = 1
)
