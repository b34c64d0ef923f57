package bench

import (
	"errors"
	"fmt"
	"slices"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/truthprof"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
)

// MultiOracle is the exhaustive optimum of model v1 for several workloads over the
// noise-free truth (issue 19): every mode, every vector of batch sizes, one per
// stream, and every training micro-batch the truth has (issue 32), jointly. When nothing meets the budgets the plan is the least-violating
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

// MultiMarginOracle is MarginOracle for several streams: the truth's best configuration
// (ranked by the true objective) among those that still meet every budget with every time
// and power raised by marginRel and every stream's latency kept inside the admission room.
// It is the ceiling of any decision that keeps that margin and room. found is false when
// nothing fits so.
//
// Modes are visited best first by their unrestricted best (BestAtMode, what MultiOracle
// computes): once a mode's best cannot beat the answer so far, no later mode can, so only
// the first few modes pay for the batch vectors under the margin.
func MultiMarginOracle(mt *truthprof.MultiTruth, b plan.MultiBudgets, marginRel float64, adm plan.Admission) (best plan.MultiEval, found bool, err error) {
	m, err := plan.NewMultiModel(b, mt.AllBatches())
	if err != nil {
		return best, false, fmt.Errorf("multi margin oracle: %w", err)
	}
	if len(b.Streams) != len(mt.Infers) {
		return best, false, fmt.Errorf("multi margin oracle: %d stream budgets for the %d inference workloads %v", len(b.Streams), len(mt.Infers), mt.Infers)
	}
	profiles := mt.Profiles()
	type bound struct {
		i int
		e plan.MultiEval
	}
	bounds := make([]bound, len(profiles))
	for i, p := range profiles {
		e, err := m.BestAtMode(p)
		if err != nil {
			return best, false, fmt.Errorf("multi margin oracle: %w", err)
		}
		bounds[i] = bound{i, e}
	}
	slices.SortStableFunc(bounds, func(x, y bound) int {
		switch {
		case x.e.Better(y.e):
			return -1
		case y.e.Better(x.e):
			return 1
		}
		return 0
	})
	up := 1 + marginRel
	lim := m.Budgets().Streams
	for _, bd := range bounds {
		if found && !bd.e.Better(best) {
			break
		}
		p := profiles[bd.i]
		raised := raise(p, up)
		var ferr error
		err := eachMicroVector(p, func(micro []int) error {
			return m.EachBatchVector(p, func(batches []int) {
				if ferr != nil {
					return
				}
				e, err := m.EvaluateMicro(p, batches, micro)
				if err != nil {
					ferr = err
					return
				}
				if found && !e.Better(best) {
					return
				}
				r, err := m.EvaluateMicro(raised, batches, micro)
				if err != nil {
					ferr = err
					return
				}
				if !r.Feasible {
					return
				}
				for i, s := range r.Streams {
					if adm.LatencyMS(lim[i].LatencyMS, s.FillMS+s.QueueMS, s.WaitMS, s.LatencyMS-s.FillMS-s.QueueMS-s.WaitMS) > lim[i].LatencyMS {
						return
					}
				}
				best, found = e, true
				best.MicroBatches = slices.Clone(e.MicroBatches)
			})
		})
		if err = errors.Join(err, ferr); err != nil {
			return best, false, fmt.Errorf("multi margin oracle: %w", err)
		}
	}
	return best, found, nil
}

// raise is p with every time and power multiplied by up, its micro-batch turns included.
func raise(p plan.MultiProfile, up float64) plan.MultiProfile {
	rt := func(t plan.TrainPoint) plan.TrainPoint {
		t.TimeMS, t.PowerMW = t.TimeMS*up, t.PowerMW*up
		return t
	}
	raised := plan.MultiProfile{Mode: p.Mode, Train: make([]plan.TrainPoint, len(p.Train)), Infer: make([][]plan.InferPoint, len(p.Infer))}
	for j, t := range p.Train {
		raised.Train[j] = rt(t)
	}
	for i, pts := range p.Infer {
		raised.Infer[i] = make([]plan.InferPoint, len(pts))
		for j, ip := range pts {
			raised.Infer[i][j] = plan.InferPoint{Batch: ip.Batch, TimeMS: ip.TimeMS * up, PowerMW: ip.PowerMW * up}
		}
	}
	if p.Micro != nil {
		raised.Micro = make([][]plan.TrainPoint, len(p.Micro))
		for j, pts := range p.Micro {
			for _, t := range pts {
				raised.Micro[j] = append(raised.Micro[j], rt(t))
			}
		}
	}
	return raised
}

// eachMicroVector calls f with every vector of training micro-batch sizes at p (one per
// job, 0 the whole minibatch; each job's plan.MultiProfile.TrainChoices), whole
// minibatches first, so that without micro-batch turns f runs once with zeros. f must
// not keep the slice.
func eachMicroVector(p plan.MultiProfile, f func(micro []int) error) error {
	micro := make([]int, len(p.Train))
	return plan.EachTrainVector(p, func(train []plan.TrainPoint) error {
		for j, t := range train {
			micro[j] = t.MicroBatch()
		}
		return f(micro)
	})
}
