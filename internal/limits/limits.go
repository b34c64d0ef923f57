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

// DefaultLatencyMS is the latency budget L fulcrumd starts with when its configuration
// gives none, and the one a scheduler holds until its controller gives it the
// operator's.
const DefaultLatencyMS float64 = 100

// The training-weight limits (a training job's share weight among the jobs, default 1).
const (
	// MinTrainWeight: a weight of 5e-324 was "above 0" yet starved the job (2 turns in
	// 8 s); 0.01 against the default 1 is already 1 % of training's time.
	MinTrainWeight = 0.01
	// MaxTrainWeight: weights are relative, 1000:1 is already all of the time.
	MaxTrainWeight = 1000
)

// MaxStreams bounds the workloads with targets of their own (latency budget, rate,
// training weight): they are named by any local process, so what is held is bounded.
const MaxStreams = 64
