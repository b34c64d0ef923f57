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
	pooled := PooledPair(p, []float64{20, 5}, nil)
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

// With two training jobs the pooled job's throughput ranks as the objective Θ (their
// s-weighted geometric mean, up to Π s_j^{s_j}) and its power is their mix.
func TestPooledPairJobs(t *testing.T) {
	p := MultiProfile{Mode: powermode.Mode{Cores: 8, CPUKHz: 1000000, GPUHz: 800000000, EMCHz: 2000000000},
		Train: []TrainPoint{{Batch: 32, TimeMS: 120, PowerMW: 30000}, {Batch: 16, TimeMS: 300, PowerMW: 36000}},
		Infer: [][]InferPoint{{{Batch: 1, TimeMS: 8, PowerMW: 20000}, {Batch: 4, TimeMS: 20, PowerMW: 24000}}}}
	for _, w := range [][]float64{nil, {1, 3}} {
		mb := MultiBudgets{Streams: []StreamBudget{{Name: "a", RateRPS: 20, LatencyMS: 1000}}, PowerMW: 1e6, TrainWeights: w}
		pooled := PooledPair(p, []float64{20}, w)
		mm, err := NewMultiModel(mb, nil)
		if err != nil {
			t.Fatal(err)
		}
		pm, err := NewModel(PooledBudgets(mb), nil)
		if err != nil {
			t.Fatal(err)
		}
		s := []float64{0.5, 0.5}
		if w != nil {
			s = []float64{0.25, 0.75}
		}
		k := math.Pow(s[0], s[0]) * math.Pow(s[1], s[1])
		for i, b := range []int{1, 4} {
			me, err := mm.Evaluate(p, []int{b})
			if err != nil {
				t.Fatal(err)
			}
			pe := pm.Evaluate(pooled.Mode, pooled.Train, pooled.Infer[i])
			if math.Abs(me.ObjectiveSPS-k*pe.ThroughputSPS) > 1e-9 || math.Abs(me.PowerMW-pe.PowerMW) > 1e-6 {
				t.Errorf("weights %v batch %d: Θ %v power %v; pooled θ·Πs^s %v power %v", w, b, me.ObjectiveSPS, me.PowerMW, k*pe.ThroughputSPS, pe.PowerMW)
			}
		}
	}
}
