package plan

import (
	"math/rand/v2"
	"testing"
)

// With one stream and one training job the multi-workload decision is the pair decision,
// to the bit: the same configuration, probability, claim and count of candidates, on
// random budgets, profiles, repeats and rules.
func TestMultiDecideIsDecider(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 2))
	batches := DefaultInferBatches()
	uni := func(lo, hi float64) float64 { return lo + (hi-lo)*rng.Float64() }
	claimed, micro := map[bool]int{}, map[bool]int{}
	for trial := range 300 {
		b := Budgets{RateRPS: uni(1, 60), LatencyMS: uni(30, 600), PowerMW: uni(8000, 40000)}.WithDefaults()
		r := Rules{NoiseRel: uni(0, 0.08), Confidence: uni(0.5, 0.999), Admission: Admission{MarginMS: uni(0, 10), DevRel: uni(0, 0.1)}}
		mb := MultiBudgets{Streams: []StreamBudget{{Name: "s", RateRPS: b.RateRPS, LatencyMS: b.LatencyMS}}, PowerMW: b.PowerMW, Quantile: b.Quantile, RhoMax: b.RhoMax}
		var pair []ModeProfile
		var multi []MultiProfile
		for k := range 1 + rng.IntN(6) {
			p := ModeProfile{
				Mode:    multiMode(int64(100000000 * (k + 1))),
				Train:   TrainPoint{Batch: 32, TimeMS: uni(5, 300), PowerMW: uni(4000, 45000)},
				Repeats: rng.IntN(4),
			}
			for _, n := range batches[:1+rng.IntN(len(batches))] {
				p.Infer = append(p.Infer, InferPoint{Batch: n, TimeMS: uni(1, 15) * float64(1+n/4), PowerMW: uni(4000, 45000)})
			}
			p.Micro = randomMicro(rng, trial, p.Train)
			pair = append(pair, p)
			mp := MultiProfile{Mode: p.Mode, Train: []TrainPoint{p.Train}, Infer: [][]InferPoint{p.Infer}, Repeats: p.Repeats}
			if p.Micro != nil {
				mp.Micro = [][]TrainPoint{p.Micro}
			}
			multi = append(multi, mp)
		}
		want, err := r.For(b, batches).Decide(pair)
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.ForMulti(mb, batches).Decide(multi)
		if err != nil {
			t.Fatal(err)
		}
		g := got.Best
		if g.Mode != want.Best.Mode || g.Streams[0].Batch != want.Best.Batch || got.PFeasible != want.PFeasible ||
			got.Feasible != want.Feasible || got.Candidates != want.Candidates || got.LatencyAdmMS[0] != want.LatencyAdmMS ||
			g.ObjectiveSPS != want.Best.ThroughputSPS || got.Binding.Constraint != want.Binding {
			t.Fatalf("trial %d:\nmulti %+v\npair  %+v", trial, got, want)
		}
		// Every configuration scored, in the same order and to the bit (live refinement
		// ranks the pair's candidates through MultiDecider.ScoreAll).
		wantAll, err := r.For(b, batches).ScoreAll(pair)
		if err != nil {
			t.Fatal(err)
		}
		gotAll, err := r.ForMulti(mb, batches).ScoreAll(multi)
		if err != nil {
			t.Fatal(err)
		}
		if len(gotAll) != len(wantAll) {
			t.Fatalf("trial %d: ScoreAll scored %d configurations, the pair's %d", trial, len(gotAll), len(wantAll))
		}
		for i, w := range wantAll {
			g := gotAll[i]
			if g.Pair() != w.Eval || g.PFeasible != w.PFeasible || g.ViolationAdm != w.ViolationAdm || g.LatencyAdmMS[0] != w.LatencyAdmMS ||
				g.BindingAdm.Constraint != w.BindingAdm {
				t.Fatalf("trial %d, configuration %d:\nmulti %+v\npair  %+v", trial, i, g, w)
			}
		}
		// The pair's view of the decision is the pair's decision, field for field and in
		// an event's words (the controller plans the pair through MultiDecider).
		if got.Pair() != want || mb.Pair() != b || got.Pair().Explain(mb.Pair()) != want.Explain(b) {
			t.Fatalf("trial %d: pair view\n%+v\nwant %+v", trial, got.Pair(), want)
		}
		if mb := want.Best.MicroBatch; mb != 0 && (len(g.MicroBatches) != 1 || g.MicroBatches[0] != mb) || mb == 0 && g.MicroBatches != nil {
			t.Fatalf("trial %d: micro-batches %v, pair %d", trial, g.MicroBatches, mb)
		}
		micro[want.Best.MicroBatch != 0]++
		claimed[want.Feasible]++
	}
	if claimed[true] < 30 || claimed[false] < 30 {
		t.Fatalf("claimed/not %d/%d: the trials should reach both often", claimed[true], claimed[false])
	}
	if micro[true] < 20 || micro[false] < 20 {
		t.Fatalf("micro-batch/whole decisions %d/%d: the trials should reach both often", micro[true], micro[false])
	}
}

// twoStreams is a mode with a detector (stream "det", batch 1 or 2) and a classifier
// (stream "cls", batch 1), one trainer.
func twoStreams() MultiProfile {
	return MultiProfile{
		Mode:  multiMode(900000000),
		Train: []TrainPoint{{Batch: 32, TimeMS: 60, PowerMW: 30000}},
		Infer: [][]InferPoint{
			{{Batch: 1, TimeMS: 8, PowerMW: 25000}, {Batch: 2, TimeMS: 12, PowerMW: 26000}},
			{{Batch: 1, TimeMS: 20, PowerMW: 22000}},
		},
	}
}

// A second stream's latency exactly on its budget (with the admission room) is claimed
// from one noisy measurement about 1 − Confidence of the time, as the pair's is; the
// first stream, far inside its budget, does not change that.
func TestMultiDecideCalibratedAtTheEdge(t *testing.T) {
	truth := twoStreams()
	truth.Infer[0] = truth.Infer[0][:1]
	adm := Admission{MarginMS: 5, DevRel: 0.06}
	// The classifier's budget is the tighter one (its queue counts its own batches only)
	// before and after it is set to its edge.
	b := MultiBudgets{Streams: []StreamBudget{{Name: "det", RateRPS: 20, LatencyMS: 5000}, {Name: "cls", RateRPS: 5, LatencyMS: 1000}}, PowerMW: 1e6}
	m, err := NewMultiModel(b, []int{1})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := m.Evaluate(truth, []int{1, 1})
	cls := e.Streams[1]
	b.Streams[1].LatencyMS = adm.LatencyMS(1000, cls.FillMS+cls.QueueMS, cls.WaitMS, truth.Infer[1][0].TimeMS)
	const noise, n = 0.03, 20000
	for _, conf := range []float64{0.9, 0.99} {
		d := Rules{NoiseRel: noise, Confidence: conf, Admission: adm}.ForMulti(b, []int{1})
		rng := rand.New(rand.NewPCG(3, 4))
		claims := 0
		for range n {
			p := truth
			p.Train = []TrainPoint{truth.Train[0]}
			p.Train[0].TimeMS *= 1 + noise*rng.NormFloat64()
			p.Infer = [][]InferPoint{{truth.Infer[0][0]}, {truth.Infer[1][0]}}
			for i := range p.Infer {
				p.Infer[i][0].TimeMS *= 1 + noise*rng.NormFloat64()
			}
			dec, err := d.Decide([]MultiProfile{p})
			if err != nil {
				t.Fatal(err)
			}
			if dec.Feasible {
				claims++
			}
		}
		rate := float64(claims) / n
		t.Logf("confidence %g: claimed %.2f%% with the classifier's latency at its edge", conf, 100*rate)
		if rate > (1-conf)*1.3 || rate < (1-conf)*0.5 {
			t.Errorf("confidence %g: claimed %.2f%% of the time, want about %.1f%%", conf, 100*rate, 100*(1-conf))
		}
	}
}

// The decision chooses the batch vector jointly and names the stream that binds: a larger
// detector batch frees GPU time for training but is a longer turn ahead of the
// classifier's requests.
func TestMultiDecideJointAndBinding(t *testing.T) {
	p := MultiProfile{
		Mode:  multiMode(900000000),
		Train: []TrainPoint{{Batch: 32, TimeMS: 10, PowerMW: 30000}},
		Infer: [][]InferPoint{
			{{Batch: 1, TimeMS: 8, PowerMW: 25000}, {Batch: 2, TimeMS: 14, PowerMW: 26000}},
			{{Batch: 1, TimeMS: 20, PowerMW: 22000}},
		},
		Repeats: 4,
	}
	r := Rules{NoiseRel: 0.03, Confidence: 0.99, Admission: Admission{MarginMS: 5, DevRel: 0.06}}
	// The classifier's budget (set below, always under the detector's) is the tighter one
	// throughout, so its queue term is the same in the evaluations and the decisions.
	b := MultiBudgets{Streams: []StreamBudget{{Name: "det", RateRPS: 60, LatencyMS: 400}, {Name: "cls", RateRPS: 5, LatencyMS: 300}}, PowerMW: 40000}
	m, err := NewMultiModel(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	e1, _ := m.Evaluate(p, []int{1, 1})
	e2, _ := m.Evaluate(p, []int{2, 1})
	if e2.ObjectiveSPS <= e1.ObjectiveSPS || e2.Streams[1].WaitMS <= e1.Streams[1].WaitMS {
		t.Fatalf("test premise: detector batch 2 should free training time (%.1f vs %.1f samples/s) and wait longer ahead of the classifier (%v vs %v ms)",
			e2.ObjectiveSPS, e1.ObjectiveSPS, e2.Streams[1].WaitMS, e1.Streams[1].WaitMS)
	}
	lat := func(e MultiEval) float64 {
		return r.Admission.LatencyMS(1000, e.Streams[1].FillMS+e.Streams[1].QueueMS, e.Streams[1].WaitMS, 20)
	}
	decide := func(clsMS float64) MultiDecision {
		t.Helper()
		b.Streams[1].LatencyMS = clsMS
		dec, err := r.ForMulti(b, nil).Decide([]MultiProfile{p})
		if err != nil {
			t.Fatal(err)
		}
		return dec
	}
	// Room for batch 2's longer wait: the detector at batch 2, claimed.
	if dec := decide(lat(e2) + 4); !dec.Feasible || dec.Best.Streams[0].Batch != 2 {
		t.Fatalf("room for both: got batch %v claimed %v, want the detector at batch 2, claimed", dec.Best.Batches(), dec.Feasible)
	}
	// Room for batch 1's wait only: batch 1, although batch 2 trains more.
	if dec := decide(lat(e1) + 3); !dec.Feasible || dec.Best.Streams[0].Batch != 1 || dec.Candidates != 1 {
		t.Fatalf("room for batch 1 only: got batch %v claimed %v (%d candidates), want the detector at batch 1, claimed alone", dec.Best.Batches(), dec.Feasible, dec.Candidates)
	}
	// Too tight for anything: nothing claimed, and the binding names the classifier.
	dec := decide(lat(e1) - 0.5)
	if dec.Feasible || dec.Binding != (MultiBinding{Constraint: ConstraintLatency, Stream: "cls"}) || dec.Best.Binding != dec.Binding {
		t.Fatalf("tight classifier budget: feasible %v binding %+v, want the classifier's latency", dec.Feasible, dec.Binding)
	}
	if dec.PStreams[1] >= dec.PStreams[0] {
		t.Fatalf("P per stream %v: the classifier's should be the lower", dec.PStreams)
	}
	// Bad rules are refused.
	if _, err := (Rules{Confidence: 1.5}).ForMulti(b, nil).Decide([]MultiProfile{p}); err == nil {
		t.Fatal("confidence 1.5 accepted")
	}
}
