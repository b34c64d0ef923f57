package fulcrum

import (
	"context"
)

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
	Answer(ctx context.Context, b Budgets, prof Profiler) (Result, error)
}
