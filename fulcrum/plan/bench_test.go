package plan

import (
	"math/rand/v2"
	"testing"
)

// The searchers' inner loops (GMD's candidate scoring, ALS's answer, the oracles) call
// Model.Evaluate and Decider.ScoreAll/Claims over thousands of configurations; the
// benchmark's several-workload decision calls MultiDecider.Decide. These benchmarks
// time them on a fixed set of random profiles (go test -run '^$' -bench . ./fulcrum/plan/).

// benchProfiles are n modes, each with the default inference batches and (odd modes)
// micro-batch points, drawn from a fixed seed.
func benchProfiles(n int) []ModeProfile {
	rng := rand.New(rand.NewPCG(29, 1))
	uni := func(lo, hi float64) float64 { return lo + (hi-lo)*rng.Float64() }
	out := make([]ModeProfile, n)
	for k := range out {
		p := ModeProfile{Mode: multiMode(int64(1000000 * (k + 1))), Train: TrainPoint{Batch: 32, TimeMS: uni(5, 300), PowerMW: uni(4000, 45000)}}
		for _, b := range DefaultInferBatches() {
			p.Infer = append(p.Infer, InferPoint{Batch: b, TimeMS: uni(1, 15) * float64(1+b/4), PowerMW: uni(4000, 45000)})
		}
		p.Micro = randomMicro(rng, k, p.Train)
		out[k] = p
	}
	return out
}

func benchBudgets() Budgets {
	return Budgets{RateRPS: 20, LatencyMS: 150, PowerMW: 25000}.WithDefaults()
}

func benchRules() Rules {
	return Rules{NoiseRel: 0.03, Admission: Admission{MarginMS: 2, DevRel: 0.05}}
}

// BenchmarkModelEvaluate times one pair evaluation (the oracles' and GMD's walk).
func BenchmarkModelEvaluate(b *testing.B) {
	m, err := NewModel(benchBudgets(), DefaultInferBatches())
	if err != nil {
		b.Fatal(err)
	}
	ps := benchProfiles(64)
	b.ReportAllocs()
	b.ResetTimer()
	var sink float64
	for i := range b.N {
		p := ps[i%len(ps)]
		sink += m.Evaluate(p.Mode, p.Train, p.Infer[i%len(p.Infer)]).ThroughputSPS
	}
	_ = sink
}

// BenchmarkDeciderScoreAll times the pair decision's scoring and claims over 200 modes
// (GMD's and ALS's candidate loops): ns/op is per ScoreAll of every configuration.
func BenchmarkDeciderScoreAll(b *testing.B) {
	d := benchRules().For(benchBudgets(), DefaultInferBatches())
	ps := benchProfiles(200)
	b.ReportAllocs()
	b.ResetTimer()
	claimed := 0
	for range b.N {
		all, err := d.ScoreAll(ps)
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range all {
			if d.Claims(s) {
				claimed++
			}
		}
	}
	_ = claimed
}

// BenchmarkMultiDecide times the several-workload decision over 50 modes of two streams
// and two jobs (the benchmark's --streams/--jobs decision).
func BenchmarkMultiDecide(b *testing.B) {
	pair := benchProfiles(100)
	var ps []MultiProfile
	for k := 0; k+1 < len(pair); k += 2 {
		p, q := pair[k], pair[k+1]
		ps = append(ps, MultiProfile{Mode: p.Mode, Train: []TrainPoint{p.Train, q.Train}, Infer: [][]InferPoint{p.Infer, q.Infer}})
	}
	mb := MultiBudgets{Streams: []StreamBudget{{Name: "a", RateRPS: 10, LatencyMS: 150}, {Name: "b", RateRPS: 5, LatencyMS: 300}}, PowerMW: 25000}
	d := benchRules().ForMulti(mb, DefaultInferBatches())
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := d.Decide(ps); err != nil {
			b.Fatal(err)
		}
	}
}
