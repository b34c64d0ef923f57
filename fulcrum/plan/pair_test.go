package plan

import "testing"

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
