package plan

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// The pair's view evaluates and scores through the several-workload model and decision
// on arrays on its stack: a configuration costs no allocation, so GMD's and ALS's inner
// loops (Model.Evaluate, Decider.ScoreAll's scoring, the claim and the ranking) pay nothing for there being one
// implementation.
func TestPairViewAllocatesNothing(t *testing.T) {
	b := benchBudgets()
	m, err := NewModel(b, DefaultInferBatches())
	if err != nil {
		t.Fatal(err)
	}
	d := benchRules().For(b, DefaultInferBatches())
	p := benchProfiles(2)[1] // with micro-batch points
	tp, ip := p.TrainChoices()[1], p.Infer[2]
	var e Eval
	var s Scored
	if n := testing.AllocsPerRun(200, func() { e = m.Evaluate(p.Mode, tp, ip) }); n != 0 {
		t.Errorf("Model.Evaluate: %v allocations per call, want 0", n)
	}
	if n := testing.AllocsPerRun(200, func() { s = d.score(m, p, tp, ip) }); n != 0 {
		t.Errorf("Decider.score: %v allocations per call, want 0", n)
	}
	var claimed, above bool
	if n := testing.AllocsPerRun(200, func() { claimed, above = d.Claims(s), d.better(s.rank(), s.rank()) }); n != 0 {
		t.Errorf("Decider.Claims and the ranking: %v allocations per call, want 0", n)
	}
	if above || claimed != (s.PFeasible >= d.confidence()) {
		t.Errorf("claimed %v, ranked above itself %v: want the claim at P ≥ %g and no configuration above itself", claimed, above, d.confidence())
	}
	if e.MicroBatch != tp.Batch || s.Eval != e || !(s.PFeasible >= 0 && s.PFeasible <= 1) {
		t.Fatalf("evaluation %+v, scored %+v: want the micro-batch %d and the same figures", e, s, tp.Batch)
	}
}

// The controller's step rules walk every stored configuration once, for any number of
// streams and jobs (MultiModel.EachEval); for the pair that walk is the pair's own, in
// its order (each training turn, then each batch) and to the bit, so that the pair's
// steps choose what they chose when they walked Model.Evaluate.
func TestEachEvalOfThePairIsModelV1(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 3))
	uni := func(lo, hi float64) float64 { return lo + (hi-lo)*rng.Float64() }
	batches := DefaultInferBatches()
	for trial := range 100 {
		b := Budgets{RateRPS: uni(1, 100), LatencyMS: uni(20, 600), PowerMW: uni(5000, 50000)}
		m, err := NewModel(b, batches)
		if err != nil {
			t.Fatal(err)
		}
		p := ModeProfile{Mode: multiMode(int64(100000000 * (trial + 1))),
			Train: TrainPoint{Batch: []int{8, 16, 32, 64}[rng.IntN(4)], TimeMS: uni(5, 400), PowerMW: uni(4000, 60000)}}
		for _, n := range batches[:1+rng.IntN(len(batches))] {
			p.Infer = append(p.Infer, InferPoint{Batch: n, TimeMS: uni(1, 20) * math.Sqrt(float64(n)), PowerMW: uni(4000, 60000)})
		}
		p.Micro = randomMicro(rng, trial, p.Train)
		var want []Eval
		for _, tp := range p.TrainChoices() {
			for _, ip := range p.Infer {
				want = append(want, m.Evaluate(p.Mode, tp, ip))
			}
		}
		var got []Eval
		if err := m.Multi().EachEval(MultiOf(p), func(e MultiEval, train []TrainPoint) {
			if pe := e.Pair(); pe.MicroBatch != train[0].MicroBatch() {
				t.Fatalf("trial %d: evaluation at micro-batch %d scored with turn %+v", trial, pe.MicroBatch, train[0])
			}
			got = append(got, e.Pair())
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: EachEval of the pair\n%+v\nwant Model.Evaluate's\n%+v", trial, got, want)
		}
	}
}
