// Package search holds the searchers that choose which power modes to profile (docs/design.md
// §3): the Searcher, Profiler and PairLearner interfaces, GMD (gmd*.go), ALS (als*.go),
// the baselines, and the registry (registry.go), the one place that knows the
// searchers' names.
package search

import (
	"context"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Profiler answers a searcher's requests for profiles. Profiling a mode means
// profiling both workloads there (training at B_T, inference at every batch size).
type Profiler interface {
	// Profile returns the profile at m, measuring it if it is not known yet.
	Profile(ctx context.Context, m powermode.Mode) (plan.ModeProfile, error)
	// Known returns the profiles that are already available (free to use).
	Known() []plan.ModeProfile
}

// Remeasurer is a Profiler that can measure a mode again: a new measurement,
// independent of the earlier ones and counted as a profile like the first. A searcher
// averages repeats to shrink the noise of a candidate that sits just inside a budget,
// where one measurement cannot tell a fit from a near miss. Profile never remeasures;
// only an explicit Remeasure does.
type Remeasurer interface {
	Remeasure(ctx context.Context, m powermode.Mode) (plan.ModeProfile, error)
}

// Problem is what a searcher is asked to solve.
type Problem struct {
	Space        *powermode.Space `json:"-"`
	Train        string           `json:"train"`
	Infer        string           `json:"infer"`
	TrainBatch   int              `json:"train_batch"`
	InferBatches []int            `json:"infer_batches"`
	Budgets      plan.Budgets     `json:"budgets"`
	// Presets are the board's nvpmodel presets snapped into Space (the GMD start and
	// the preset baseline).
	Presets []powermode.Mode `json:"presets"`
	// PresetNames are the nvpmodel names of Presets, in the same order (e.g. MODE_30W),
	// or empty. GMD reads a preset's nominal wattage from its name to pick its start.
	PresetNames []string `json:"preset_names,omitempty"`
	// MaxProfiles caps the new profiles a searcher may take (0: the searcher's default).
	MaxProfiles int `json:"max_profiles"`
	// TimeLeft, when set, says how much of the search's time is left on the caller's
	// clock (the daemon's; virtual in the lifetime bench). GMD starts no profile that
	// its mean profile time so far would carry past it, and plans from what it has
	// (Result.Stop "time"): an operator waits for the first plan, not for the last
	// percent. ALS and the baselines ignore it (a campaign is what ALS keeps). nil: the
	// profiles alone bound the search.
	TimeLeft func() time.Duration `json:"-"`
	// Seed seeds whatever randomness a searcher uses (random baselines, ALS's initial
	// design), so that an answer is reproducible; the benchmark derives one per
	// configuration.
	Seed uint64 `json:"seed"`
	// NoiseRel is the relative standard deviation of a profiled time or power as the
	// profiler knows it (run-to-run spread; 0.03 = 3%), or 0 when unknown. Searchers
	// size their safety margins from it.
	NoiseRel float64 `json:"noise_rel,omitempty"`
	// Rules are the decision rules the answer will be judged by: the daemon and the
	// benchmark both re-decide over the profiles a search took with
	// Rules.For(Budgets, InferBatches) (plan.Decider). A searcher aims its profiles
	// (and repeats) at what that decision can claim.
	Rules plan.Rules `json:"rules"`
}

// Result is a searcher's answer.
type Result struct {
	// Choice is the chosen configuration with its predicted θ, latency and power
	// (as computed from the profiles the searcher saw, not from the truth).
	Choice plan.Eval `json:"choice"`
	// Found is false when the searcher has no configuration to propose at all.
	Found bool `json:"found"`
	// Feasible says whether the choice meets the budgets by the searcher's own data.
	Feasible bool `json:"feasible"`
	// Profiled lists the modes newly profiled for this answer, in order.
	Profiled []powermode.Mode `json:"profiled"`
	// Remeasured lists repeat measurements of modes already profiled (a mode once per
	// repeat), taken to shrink the noise of a candidate near a budget; each is counted
	// like a profile.
	Remeasured []powermode.Mode `json:"remeasured,omitempty"`
	// Stop says why the search stopped.
	Stop string `json:"stop"`
}

// Searcher chooses a configuration for a problem, profiling as few modes as it can.
// Implementations never ask the profiler for a mode they already have a profile of.
type Searcher interface {
	Name() string
	Search(ctx context.Context, p Problem, prof Profiler) (Result, error)
}

// PairLearner is a searcher that learns a workload pair once (an offline campaign, e.g.
// ALS fitting its surrogates and Pareto set) and then answers many budget
// configurations of that pair with few confirming profiles each. The benchmark calls
// Learn once per pair and Answer once per configuration of the pair.
type PairLearner interface {
	Name() string
	// Learn runs the campaign. p has no Budgets (zero value); p.MaxProfiles caps the
	// campaign's profiles (0: the learner's default); p.Seed seeds its randomness.
	Learn(ctx context.Context, p Problem, prof Profiler) (Answerer, error)
}

// Answerer answers budget configurations of the pair it was learned on.
//
// The benchmark calls Answer for the configurations of one pair sequentially, from one
// goroutine (Answerers of different pairs run concurrently). prof knows every profile
// of the campaign (free) and counts each new mode it measures as a confirming profile
// of this configuration; each configuration gets its own prof, so a confirming profile
// taken for one configuration is not visible to the next (results do not depend on
// scheduling). Result.Profiled lists the confirming profiles only.
type Answerer interface {
	// Answer answers the exact budgets b; the Rules of the Problem given to Learn say
	// how the answer will be decided.
	Answer(ctx context.Context, b plan.Budgets, prof Profiler) (Result, error)
}
