package plan

import (
	"math"
	"testing"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// The pooled stream's GPU share and power mix are the streams' when every stream serves
// the same batch; its budgets are the total rate and the tightest latency.
func TestPooledPairKeepsShareAndPower(t *testing.T) {
	p := MultiProfile{Mode: powermode.Mode{Cores: 8, CPUKHz: 1000000, GPUHz: 800000000, EMCHz: 2000000000}, Repeats: 2,
		Train: []TrainPoint{{Batch: 32, TimeMS: 120, PowerMW: 30000}},
		Infer: [][]InferPoint{
			{{Batch: 1, TimeMS: 8, PowerMW: 20000}, {Batch: 4, TimeMS: 20, PowerMW: 24000}, {Batch: 8, TimeMS: 35, PowerMW: 26000}},
			{{Batch: 1, TimeMS: 15, PowerMW: 22000}, {Batch: 4, TimeMS: 40, PowerMW: 28000}},
		}}
	mb := MultiBudgets{Streams: []StreamBudget{{Name: "a", RateRPS: 20, LatencyMS: 300}, {Name: "b", RateRPS: 5, LatencyMS: 150}}, PowerMW: 1e6}
	pooled := PooledPair(p, []float64{20, 5})
	if len(pooled.Infer) != 2 || pooled.Infer[0].Batch != 1 || pooled.Infer[1].Batch != 4 || pooled.Repeats != 2 || pooled.Train != p.Train[0] {
		t.Fatalf("pooled %+v: want batches 1 and 4 (the common ones), the training point and the repeats", pooled)
	}
	pb := PooledBudgets(mb)
	if pb.RateRPS != 25 || pb.LatencyMS != 150 || pb.PowerMW != 1e6 {
		t.Fatalf("pooled budgets %+v: want rate 25, latency 150", pb)
	}
	mm, err := NewMultiModel(mb, nil)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := NewModel(pb, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range []int{1, 4} {
		me, err := mm.Evaluate(p, []int{b, b})
		if err != nil {
			t.Fatal(err)
		}
		pe := pm.Evaluate(pooled.Mode, pooled.Train, pooled.Infer[i])
		if math.Abs(me.Rho-pe.Rho) > 1e-12 || math.Abs(me.PowerMW-pe.PowerMW) > 1e-6 || math.Abs(me.ObjectiveSPS-pe.ThroughputSPS) > 1e-9 {
			t.Errorf("batch %d: streams ρ %v power %v θ %v; pooled ρ %v power %v θ %v", b, me.Rho, me.PowerMW, me.ObjectiveSPS, pe.Rho, pe.PowerMW, pe.ThroughputSPS)
		}
	}
}
