package plan

import (
	"math"
	"testing"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Serving alone, by hand: one stream at 10 req/s beside a 100 ms budget and 15 W. At
// mode a (training 80 ms at 14 W; inference batch 1 20 ms at 10 W, batch 2 30 ms at
// 11 W) batch 1 has ρ = 0.2, no fill, no turn ahead and a queue of
// 20/(2·0.8)·ln(0.2/0.01) = 37.45 ms: p99 57.45 ms; its power 0.2·10 + 0.8·10 W (the idle
// share at the least power measured there) = 10 W. Batch 2 adds a fill and a longer
// queue. At mode b (inference 5 ms at 16 W, training 40 ms at 18 W) the streams are faster,
// but the power bound, 16 W, breaks the budget: a serves them best alone.
func TestServeAloneHandComputed(t *testing.T) {
	mm, err := NewMultiModel(MultiBudgets{Streams: []StreamBudget{{Name: "s", RateRPS: 10, LatencyMS: 100}}, PowerMW: 15000}, []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	ma := powermode.Mode{Cores: 4, CPUKHz: 1000000, GPUHz: 600000000, EMCHz: 2000000000}
	mbm := ma
	mbm.GPUHz = 1200000000
	a := MultiProfile{Mode: ma, Train: []TrainPoint{{Batch: 32, TimeMS: 80, PowerMW: 14000}},
		Infer: [][]InferPoint{{{Batch: 1, TimeMS: 20, PowerMW: 10000}, {Batch: 2, TimeMS: 30, PowerMW: 11000}}}}
	b := MultiProfile{Mode: mbm, Train: []TrainPoint{{Batch: 32, TimeMS: 40, PowerMW: 18000}},
		Infer: [][]InferPoint{{{Batch: 1, TimeMS: 5, PowerMW: 16000}}}}
	ea, err := mm.ServeAlone(a)
	if err != nil {
		t.Fatal(err)
	}
	wantLat := 20 + 20/(2*0.8)*math.Log(0.2/0.01)
	if s := ea.Streams[0]; s.Batch != 1 || math.Abs(s.LatencyMS-wantLat) > 1e-9 || s.WaitMS != 0 || s.FillMS != 0 {
		t.Errorf("at a: %+v, want batch 1, p99 %.4f ms, no fill, no turn ahead", s, wantLat)
	}
	if math.Abs(ea.PowerMW-10000) > 1e-9 || !ea.Feasible || ea.ObjectiveSPS != 0 || len(ea.TrainSPS) != 0 {
		t.Errorf("at a: power %.1f mW, feasible %v, training %v %v: want 10 W, within, no training", ea.PowerMW, ea.Feasible, ea.ObjectiveSPS, ea.TrainSPS)
	}
	e2, err := mm.EvaluateAlone(a, []int{2})
	if err != nil {
		t.Fatal(err)
	}
	fill := FillQuantileMS(2, 10, DefaultQuantile)
	if want := fill + 30 + 30/(2*0.85)*math.Log(0.15/0.01); math.Abs(e2.Streams[0].LatencyMS-want) > 1e-9 {
		t.Errorf("batch 2 at a: p99 %.4f ms, want %.4f", e2.Streams[0].LatencyMS, want)
	}
	eb, err := mm.ServeAlone(b)
	if err != nil {
		t.Fatal(err)
	}
	if eb.Feasible || eb.Binding.Constraint != ConstraintPower || eb.PowerMW < 16000-1e-9 {
		t.Errorf("at b: %+v, want over the power budget (16 W bound)", eb)
	}
	if !mm.AloneBetter(ea, eb) || mm.AloneBetter(eb, ea) {
		t.Error("within every budget should serve better than over one, however fast")
	}
	if !mm.AloneBetter(ea, e2) {
		t.Error("of two within, the one with more latency to spare should serve better")
	}
}
