package search

import (
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Issue 32: ALS's confirmation planner predicts a micro-batch turn at an unprofiled mode
// as the minibatch's prediction times the median ratio the profiles show; sizes that do
// not divide the minibatch are ignored, and without micro-batch points there are none
// (the planner is today's).
func TestALSMicroTurns(t *testing.T) {
	mk := func(g int64, tt, pt float64, micro ...plan.TrainPoint) plan.ModeProfile {
		return plan.ModeProfile{Mode: powermode.Mode{Cores: 8, CPUKHz: 2000000, GPUHz: g, EMCHz: 3199000000},
			Train: plan.TrainPoint{Batch: 32, TimeMS: tt, PowerMW: pt}, Micro: micro}
	}
	known := []plan.ModeProfile{
		mk(1, 100, 40000, plan.TrainPoint{Batch: 8, TimeMS: 30, PowerMW: 36000}, plan.TrainPoint{Batch: 5, TimeMS: 1, PowerMW: 1}),
		mk(2, 200, 20000, plan.TrainPoint{Batch: 8, TimeMS: 70, PowerMW: 20000}),
		mk(3, 100, 30000, plan.TrainPoint{Batch: 8, TimeMS: 40, PowerMW: 27000}),
	}
	got := microTurns(known)
	if len(got) != 1 || got[0].samples != 8 || got[0].timeRel != 0.35 || got[0].powRel != 0.9 {
		t.Fatalf("micro turns %+v, want one of 8 samples at the median ratios 0.35 and 0.9", got)
	}
	if tp, ok := microAt(known[1], 8); !ok || tp.TimeMS != 70 || tp.Minibatch != 32 {
		t.Fatalf("measured turn %+v %v", tp, ok)
	}
	if got := microTurns([]plan.ModeProfile{mk(1, 100, 40000)}); len(got) != 0 {
		t.Fatalf("micro turns without micro-batch points: %+v", got)
	}
	cp := claimParams{bud: plan.Budgets{RateRPS: 10, LatencyMS: 60, PowerMW: 50000}.WithDefaults(), trainBatch: 32}
	if a, b := cp.throughput(1, 100, 5), cp.throughputOf(32, 1, 100, 5); a != b {
		t.Fatalf("throughput %v, throughputOf the minibatch %v", a, b)
	}
	if got, want := cp.throughputOf(8, 1, 30, 5), (1-0.05)*8/0.030; got != want {
		t.Fatalf("micro-batch throughput %v, want %v", got, want)
	}
}
