package bench

import (
	"fmt"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/truthprof"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
)

// MultiOracle is the exhaustive optimum of model v1 for several workloads over the
// noise-free truth (issue 19): every mode and every vector of batch sizes, one per
// stream, jointly. When nothing meets the budgets the plan is the least-violating
// configuration with Feasible false. Its cost is modes × Π_i |batches_i| evaluations
// (AGX Orin, 7,656 modes, three streams of six batch sizes: 1.65 million), capped per
// mode by plan.MaxMultiCombos.
func MultiOracle(mt *truthprof.MultiTruth, b plan.MultiBudgets) (plan.MultiPlan, error) {
	m, err := plan.NewMultiModel(b, mt.AllBatches())
	if err != nil {
		return plan.MultiPlan{}, fmt.Errorf("multi oracle: %w", err)
	}
	if len(b.Streams) != len(mt.Infers) {
		return plan.MultiPlan{}, fmt.Errorf("multi oracle: %d stream budgets for the %d inference workloads %v: give one per workload, in order", len(b.Streams), len(mt.Infers), mt.Infers)
	}
	pl, err := m.Choose(mt.Profiles())
	if err != nil {
		return plan.MultiPlan{}, fmt.Errorf("multi oracle: %w", err)
	}
	return pl, nil
}
