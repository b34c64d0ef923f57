package plan

import (
	"math"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol*math.Max(1, math.Abs(b)) }

func TestFillQuantileKnownValues(t *testing.T) {
	for _, tc := range []struct {
		b       int
		rate, q float64
		wantMS  float64
	}{
		{1, 10, 0.99, 0},
		// shape 1 is exponential: -ln(1-q)/λ
		{2, 10, 0.99, 1000 * -math.Log(0.01) / 10},
		{2, 50, 0.5, 1000 * math.Ln2 / 50},
		// Erlang-2 0.99-quantile at rate 1 is 6.638352 (solves 1-e^-x(1+x) = 0.99)
		{3, 1, 0.99, 6638.352},
		// chi-square with 2k dof / 2: Erlang-4 median at rate 1 = 3.672061
		{5, 1, 0.5, 3672.061},
	} {
		got := FillQuantileMS(tc.b, tc.rate, tc.q)
		if !near(got, tc.wantMS, 1e-5) {
			t.Errorf("FillQuantileMS(%d, %g, %g) = %.6f, want %.6f", tc.b, tc.rate, tc.q, got, tc.wantMS)
		}
	}
}

func TestEvaluateHandComputed(t *testing.T) {
	// λ = 20/s, L = 200 ms, P = 30 W. Training: B_T 32 in 100 ms at 40 W.
	// Inference b = 4 in 20 ms at 30 W.
	// ρ = 20 · 0.020 / 4 = 0.1
	// fill = Erlang-3 0.99-quantile at rate 20 = 8.405947/20 s = 420.297 ms
	// queue: ρ 0.1 > 1 − q, batches of 20 ms behind a 100 ms turn: mean 20/(2·0.9) =
	//   11.111 ms, 11.111·ln(10·11.111·(1 − e^(−9))/100) = 1.1693 ms (QueueExcessMS)
	// lat = 420.297 + 100 + 1.169 + 20 = 541.467 ms > 200 → infeasible on latency
	// pow = 0.1·30 + 0.9·40 = 39 W > 30 → also over on power
	// θ = 0.9 · 32 / 0.1 = 288 samples/s
	m, err := NewModel(Budgets{RateRPS: 20, LatencyMS: 200, PowerMW: 30000}, []int{1, 4})
	if err != nil {
		t.Fatal(err)
	}
	mode := powermode.Mode{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000}
	tr := TrainPoint{Batch: 32, TimeMS: 100, PowerMW: 40000}
	e := m.Evaluate(mode, tr, InferPoint{Batch: 4, TimeMS: 20, PowerMW: 30000})
	if !near(e.Rho, 0.1, 1e-12) || !near(e.PowerMW, 39000, 1e-12) || !near(e.ThroughputSPS, 288, 1e-12) {
		t.Errorf("rho %v pow %v θ %v", e.Rho, e.PowerMW, e.ThroughputSPS)
	}
	if !near(e.LatencyMS, 420.2974+120+1.1693, 1e-4) {
		t.Errorf("latency = %v, want ≈541.467", e.LatencyMS)
	}
	if e.Feasible || e.Binding != ConstraintLatency {
		t.Errorf("feasible %v binding %v, want infeasible on latency", e.Feasible, e.Binding)
	}
	if want := (541.4667/200 - 1) + (39.0/30 - 1); !near(e.Violation, want, 1e-4) {
		t.Errorf("violation = %v, want %v", e.Violation, want)
	}
	// b = 1: no fill; lat = 100 + 5 = 105 ms (no queue: 5 ms batches behind a 100 ms turn,
	// 10·(2.778/100)·(1 − e^(−36)) < 1); ρ = 20·0.005 = 0.1; pow = 0.1·20 + 0.9·25 = 24.5 W
	e1 := m.Evaluate(mode, TrainPoint{Batch: 32, TimeMS: 100, PowerMW: 25000}, InferPoint{Batch: 1, TimeMS: 5, PowerMW: 20000})
	if !e1.Feasible || !near(e1.LatencyMS, 105, 1e-12) || !near(e1.PowerMW, 24500, 1e-12) {
		t.Errorf("b=1: %+v", e1)
	}
}

func TestChooseBestAndInfeasible(t *testing.T) {
	m, err := NewModel(Budgets{RateRPS: 10, LatencyMS: 150, PowerMW: 20000}, []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(cores int, tms, tmw float64) ModeProfile {
		return ModeProfile{
			Mode:  powermode.Mode{Cores: cores, CPUKHz: 1, GPUHz: 1, EMCHz: 1},
			Train: TrainPoint{Batch: 32, TimeMS: tms, PowerMW: tmw},
			Infer: []InferPoint{{Batch: 1, TimeMS: 10, PowerMW: tmw}, {Batch: 2, TimeMS: 12, PowerMW: tmw}},
		}
	}
	fast := mk(12, 50, 30000) // over power
	mid := mk(8, 80, 19000)   // feasible, best
	slow := mk(4, 120, 12000) // feasible, slower
	pl, err := m.Choose([]ModeProfile{fast, mid, slow})
	if err != nil {
		t.Fatal(err)
	}
	if !pl.Feasible || pl.Best.Mode.Cores != 8 || pl.Best.Batch != 1 {
		t.Errorf("plan = %+v, want 8 cores b=1", pl)
	}
	pl, _ = m.Choose([]ModeProfile{fast})
	if pl.Feasible || pl.Binding != ConstraintPower {
		t.Errorf("plan = %+v, want infeasible, binding power", pl)
	}
	if s := pl.Explain(m.Budgets()); !strings.Contains(s, "binding constraint is power") {
		t.Errorf("explain: %s", s)
	}
	// With no power budget (MaxPowerMW to the model) a feasible plan's explanation says so
	// instead of "≤ 1000.0 W"; with one it names it.
	feasible := Plan{Best: Eval{Mode: mid.Mode, Batch: 1, PowerMW: 19000, Feasible: true}, Feasible: true}
	open := m.Budgets()
	open.PowerMW = MaxPowerMW
	if s := feasible.Explain(open); !strings.Contains(s, "power 19.0 W (no power budget)") || strings.Contains(s, "1000.0 W") {
		t.Errorf("explain without a power budget: %s", s)
	}
	if s := feasible.Explain(m.Budgets()); !strings.Contains(s, "power 19.0 W ≤ ") {
		t.Errorf("explain with a power budget: %s", s)
	}
	if _, err := m.Choose(nil); err == nil {
		t.Error("Choose(nil): want error")
	}
}

func TestTiesGoToLowerPower(t *testing.T) {
	m, _ := NewModel(Budgets{RateRPS: 1, LatencyMS: 1000, PowerMW: 50000}, []int{1})
	a := ModeProfile{Mode: powermode.Mode{Cores: 1, CPUKHz: 1, GPUHz: 1, EMCHz: 2}, Train: TrainPoint{Batch: 32, TimeMS: 100, PowerMW: 30000}, Infer: []InferPoint{{1, 10, 30000}}}
	b := a
	b.Mode.EMCHz = 1
	b.Train.PowerMW, b.Infer[0].PowerMW = 20000, 20000
	b.Infer = []InferPoint{{1, 10, 20000}}
	pl, _ := m.Choose([]ModeProfile{a, b})
	if pl.Best.Mode != b.Mode {
		t.Errorf("tie went to %v, want the lower-power %v", pl.Best.Mode, b.Mode)
	}
}

func TestBudgetsValidate(t *testing.T) {
	ok := Budgets{RateRPS: 30, LatencyMS: 100, PowerMW: 30000}.WithDefaults()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		mut   func(*Budgets)
		field string
	}{
		{"zero rate", func(b *Budgets) { b.RateRPS = 0 }, "rate_rps"},
		{"negative latency", func(b *Budgets) { b.LatencyMS = -5 }, "latency_ms"},
		{"NaN power", func(b *Budgets) { b.PowerMW = math.NaN() }, "power_mw"},
		{"watts as mW", func(b *Budgets) { b.PowerMW = 30 }, "probably watts"},
		{"seconds as ms", func(b *Budgets) { b.LatencyMS = 0.08 }, "probably seconds"},
		{"quantile 1", func(b *Budgets) { b.Quantile = 1 }, "quantile"},
		{"inf rate", func(b *Budgets) { b.RateRPS = math.Inf(1) }, "rate_rps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := ok
			tc.mut(&b)
			err := b.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("err = %v, want mention of %q", err, tc.field)
			}
			if _, err := NewModel(b, []int{1}); err == nil {
				t.Error("NewModel accepted invalid budgets")
			}
		})
	}
}
