package plan

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

func decideModes() []ModeProfile {
	m := func(g int64) powermode.Mode {
		return powermode.Mode{Cores: 8, CPUKHz: 2000000, GPUHz: g, EMCHz: 3199000000}
	}
	// Faster modes draw more power; batch 1 and 4.
	var out []ModeProfile
	for i, g := range []int64{400e6, 600e6, 800e6, 1000e6, 1200e6} {
		k := float64(i)
		out = append(out, ModeProfile{Mode: m(g),
			Train: TrainPoint{Batch: 32, TimeMS: 200 / (1 + 0.4*k), PowerMW: 10000 + 5000*k},
			Infer: []InferPoint{{Batch: 1, TimeMS: 10 / (1 + 0.4*k), PowerMW: 9000 + 5000*k}, {Batch: 4, TimeMS: 25 / (1 + 0.4*k), PowerMW: 9500 + 5000*k}}})
	}
	return out
}

// With exact profiles and no admission room the decision is model v1's planner.
func TestDecideExactIsThePlanner(t *testing.T) {
	ps := decideModes()
	for _, pw := range []float64{9000, 16000, 21000, 26000, 40000} {
		for _, lat := range []float64{60, 120, 400} {
			b := Budgets{RateRPS: 10, LatencyMS: lat, PowerMW: pw}.WithDefaults()
			m, _ := NewModel(b, []int{1, 4})
			want, _ := m.Choose(ps)
			got, err := Rules{}.For(b, []int{1, 4}).Decide(ps)
			if err != nil {
				t.Fatal(err)
			}
			if got.Feasible != want.Feasible || (want.Feasible && (got.Best.Mode != want.Best.Mode || got.Best.Batch != want.Best.Batch)) {
				t.Errorf("P %.0f L %.0f: decided %s b%d feasible %v, planner %s b%d feasible %v", pw, lat,
					got.Best.Mode.Human(), got.Best.Batch, got.Feasible, want.Best.Mode.Human(), want.Best.Batch, want.Feasible)
			}
		}
	}
}

// A configuration just inside a budget is claimed only once repeats have made its
// measurement precise enough; P(feasible) rises with the repeats.
func TestDecideRepeatsShrinkTheMargin(t *testing.T) {
	ps := decideModes()[3:4] // one mode: train 90.9 ms, 25 kW-ish
	ps[0].Infer = ps[0].Infer[:1]
	b := Budgets{RateRPS: 10, LatencyMS: 1000, PowerMW: ps[0].Train.PowerMW * 1.03}.WithDefaults() // 3% slack on power
	d := Rules{NoiseRel: 0.03, Confidence: 0.99}.For(b, []int{1})
	var last float64
	for _, n := range []int{1, 4, 16} {
		ps[0].Repeats = n
		dec, err := d.Decide(ps)
		if err != nil {
			t.Fatal(err)
		}
		if dec.PFeasible <= last {
			t.Errorf("%d repeats: P(feasible) %.4f, not above %.4f with fewer", n, dec.PFeasible, last)
		}
		last = dec.PFeasible
		if claim := dec.Feasible; claim != (n >= 16) {
			t.Errorf("%d repeats: claimed %v (P %.4f), want a claim only at 16 (σ 0.75%% → 4σ of slack)", n, claim, dec.PFeasible)
		}
		if !dec.Feasible && dec.Binding != ConstraintPower {
			t.Errorf("%d repeats: binding %q, want power", n, dec.Binding)
		}
	}
}

// The admission room: a configuration that fits model v1's latency but not the room the
// scheduler needs is not claimed, and latency is named.
func TestDecideAdmissionRoom(t *testing.T) {
	ps := decideModes()[:1] // train 200 ms, infer b1 10 ms
	ps[0].Infer = ps[0].Infer[:1]
	b := Budgets{RateRPS: 1, LatencyMS: 215, PowerMW: 100000}.WithDefaults()
	plain, _ := Rules{}.For(b, []int{1}).Decide(ps)
	if !plain.Feasible {
		t.Fatalf("210 ms against 215 ms without room: not claimed")
	}
	d, _ := Rules{Admission: Admission{MarginMS: 5, DevRel: 0.06}}.For(b, []int{1}).Decide(ps)
	if d.Feasible || d.Binding != ConstraintLatency || math.Abs(d.LatencyAdmMS-(5+1.06*210)) > 1e-9 {
		t.Errorf("with 5 ms + 6%% room: claimed %v, binding %q, admission latency %.2f ms (want 227.6)", d.Feasible, d.Binding, d.LatencyAdmMS)
	}
	if !strings.Contains(d.Explain(b), "latency") {
		t.Errorf("explanation %q does not name latency", d.Explain(b))
	}
	// The same room as budgets for searchers: (215 − 5)/1.06.
	if got := (Admission{MarginMS: 5, DevRel: 0.06}).Budgets(b).LatencyMS; math.Abs(got-210/1.06) > 1e-9 {
		t.Errorf("admission budgets latency %.3f, want %.3f", got, 210/1.06)
	}
}

// Calibration: a configuration whose true power sits exactly on the budget is claimed
// from one noisy measurement about 1 − Confidence of the time, and not more.
func TestDecideCalibratedAtTheEdge(t *testing.T) {
	truth := decideModes()[2]
	truth.Infer = truth.Infer[:1]
	b := Budgets{RateRPS: 10, LatencyMS: 10000, PowerMW: 0}.WithDefaults()
	// Power as model v1 mixes it, exactly at the budget.
	m, _ := NewModel(Budgets{RateRPS: 10, LatencyMS: 10000, PowerMW: 1e6}, []int{1})
	b.PowerMW = m.Evaluate(truth.Mode, truth.Train, truth.Infer[0]).PowerMW
	const noise, n = 0.03, 20000
	for _, conf := range []float64{0.9, 0.99} {
		d := Rules{NoiseRel: noise, Confidence: conf}.For(b, []int{1})
		rng := rand.New(rand.NewPCG(1, 2))
		claims := 0
		for range n {
			p := truth.Clone()
			p.Train.TimeMS *= 1 + noise*rng.NormFloat64()
			p.Train.PowerMW *= 1 + noise*rng.NormFloat64()
			p.Infer[0].TimeMS *= 1 + noise*rng.NormFloat64()
			p.Infer[0].PowerMW *= 1 + noise*rng.NormFloat64()
			if dec, _ := d.Decide([]ModeProfile{p}); dec.Feasible {
				claims++
			}
		}
		rate := float64(claims) / n
		t.Logf("confidence %g: claimed %.2f%% at the edge", conf, 100*rate)
		if rate > (1-conf)*1.3 || rate < (1-conf)*0.5 {
			t.Errorf("confidence %g: a configuration exactly on the budget was claimed %.2f%% of the time, want about %.1f%%", conf, 100*rate, 100*(1-conf))
		}
	}
}

func TestDeciderValidate(t *testing.T) {
	b := Budgets{RateRPS: 10, LatencyMS: 100, PowerMW: 20000}
	for _, bad := range []Rules{{Confidence: 1}, {Confidence: -0.1}, {NoiseRel: -1}, {NoiseRel: math.NaN()}, {Admission: Admission{MarginMS: -1}}} {
		if _, err := bad.For(b, []int{1}).Decide(decideModes()); err == nil {
			t.Errorf("rules %+v: decided without an error", bad)
		}
	}
	if _, err := (Rules{}).For(b, []int{1}).Decide(nil); err == nil {
		t.Error("no profiles: decided without an error")
	}
}

// Issue 32: a latency budget shorter than one training minibatch. Model v1 at k = 1 has
// no answer (training paused); with micro-batch points the decision runs the minibatch
// as 4 turns of 8, the admission room counting the 30 ms turn, at the throughput of k
// turns per minibatch; micro-batch 16 (55 ms turns) does not fit the room.
func TestDecideMicroBatchUnderATightBudget(t *testing.T) {
	b := Budgets{RateRPS: 10, LatencyMS: 60, PowerMW: 50000}.WithDefaults()
	r := Rules{NoiseRel: 0.01, Admission: Admission{MarginMS: 5, DevRel: 0.06}}
	p := ModeProfile{
		Mode:  powermode.Mode{Cores: 8, CPUKHz: 2000000, GPUHz: 900000000, EMCHz: 3199000000},
		Train: TrainPoint{Batch: 32, TimeMS: 100, PowerMW: 30000},
		Infer: []InferPoint{{Batch: 1, TimeMS: 5, PowerMW: 25000}},
	}
	whole, err := r.For(b, []int{1}).Decide([]ModeProfile{p})
	if err != nil {
		t.Fatal(err)
	}
	if whole.Feasible || whole.Binding != ConstraintLatency {
		t.Fatalf("k = 1: %+v, want latency-bound and not claimed", whole)
	}
	p.Micro = []TrainPoint{{Batch: 16, TimeMS: 55, PowerMW: 29000}, {Batch: 8, TimeMS: 30, PowerMW: 28000}}
	dec, err := r.For(b, []int{1}).Decide([]ModeProfile{p})
	if err != nil {
		t.Fatal(err)
	}
	if !dec.Feasible || dec.Best.MicroBatch != 8 || dec.Best.Batch != 1 {
		t.Fatalf("with micro-batches: %+v, want micro-batch 8 claimed", dec)
	}
	if want := 5 + 1.06*(30+5); math.Abs(dec.LatencyAdmMS-want) > 1e-9 {
		t.Fatalf("latency with the room %v ms, want %v (the 30 ms turn)", dec.LatencyAdmMS, want)
	}
	if want := (1 - 10*0.005) * 8 / 0.030; math.Abs(dec.Best.ThroughputSPS-want) > 1e-9 {
		t.Fatalf("throughput %v samples/s, want %v: 4 turns of 30 ms per minibatch of 32", dec.Best.ThroughputSPS, want)
	}
	if !strings.Contains(dec.Explain(b), "training micro-batch 8") {
		t.Fatalf("explanation does not say the micro-batch: %s", dec.Explain(b))
	}
	// Model v1 alone (no room) fits the 55 ms turn exactly (0 + 55 + 5 = 60 ms) and its
	// higher throughput wins; a micro-batch that does not divide the minibatch, or is the
	// whole of it, is never chosen.
	p.Micro = append(p.Micro, TrainPoint{Batch: 5, TimeMS: 1, PowerMW: 1}, TrainPoint{Batch: 32, TimeMS: 1, PowerMW: 1})
	m, _ := NewModel(b, []int{1})
	pl, err := m.Choose([]ModeProfile{p})
	if err != nil || pl.Best.MicroBatch != 16 || !pl.Feasible {
		t.Fatalf("planner: %+v %v, want micro-batch 16", pl, err)
	}
}
