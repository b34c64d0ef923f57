package plan

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

func multiMode(g int64) powermode.Mode {
	return powermode.Mode{Cores: 8, CPUKHz: 2000000, GPUHz: g, EMCHz: 3199000000}
}

// randomMicro gives half the trials' profiles training micro-batch points (issue 32):
// each divisor B/2, B/4, B/8 at a per-sample cost 1 to 1.6 times the minibatch's, plus
// points the decision must ignore (the whole minibatch again, a non-divisor).
func randomMicro(rng *rand.Rand, trial int, train TrainPoint) []TrainPoint {
	if trial%2 == 0 {
		return nil
	}
	var out []TrainPoint
	for _, k := range []int{2, 4, 8} {
		if train.Batch%k == 0 {
			out = append(out, TrainPoint{Batch: train.Batch / k, TimeMS: train.TimeMS / float64(k) * (1 + 0.6*rng.Float64()), PowerMW: train.PowerMW * (0.8 + 0.2*rng.Float64())})
		}
	}
	return append(out, TrainPoint{Batch: train.Batch, TimeMS: 1, PowerMW: 1}, TrainPoint{Batch: train.Batch - 1, TimeMS: 1, PowerMW: 1})
}

// With one stream and one job every figure is model v1's, to the bit, on random budgets
// and profiles (equal weights and a single explicit weight alike), training micro-batches
// included.
func TestMultiReducesToModelV1(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 1))
	batches := DefaultInferBatches()
	plans := map[bool]int{} // feasible or not: the trials must reach both
	uni := func(lo, hi float64) float64 { return lo + (hi-lo)*rng.Float64() }
	for trial := range 200 {
		b := Budgets{RateRPS: uni(1, 100), LatencyMS: uni(20, 600), PowerMW: uni(5000, 50000)}
		if trial%3 == 0 {
			b.Quantile, b.RhoMax = uni(0.5, 0.999), uni(0.3, 1)
		}
		mb := MultiBudgets{Streams: []StreamBudget{{Name: "s", RateRPS: b.RateRPS, LatencyMS: b.LatencyMS}}, PowerMW: b.PowerMW, Quantile: b.Quantile, RhoMax: b.RhoMax}
		if trial%2 == 1 {
			mb.TrainWeights = []float64{uni(0.1, 10)}
		}
		m1, err := NewModel(b, batches)
		if err != nil {
			t.Fatal(err)
		}
		mm, err := NewMultiModel(mb, batches)
		if err != nil {
			t.Fatal(err)
		}
		var v1 []ModeProfile
		var multi []MultiProfile
		for k := range 1 + rng.IntN(8) {
			p := ModeProfile{
				Mode:  multiMode(int64(100000000 * (k + 1))),
				Train: TrainPoint{Batch: []int{8, 16, 32, 64}[rng.IntN(4)], TimeMS: uni(5, 400), PowerMW: uni(4000, 60000)},
			}
			for _, n := range batches[:1+rng.IntN(len(batches))] {
				p.Infer = append(p.Infer, InferPoint{Batch: n, TimeMS: uni(1, 20) * math.Sqrt(float64(n)), PowerMW: uni(4000, 60000)})
			}
			p.Micro = randomMicro(rng, trial, p.Train)
			v1 = append(v1, p)
			mp := MultiProfile{Mode: p.Mode, Train: []TrainPoint{p.Train}, Infer: [][]InferPoint{p.Infer}}
			if p.Micro != nil {
				mp.Micro = [][]TrainPoint{p.Micro}
			}
			multi = append(multi, mp)
		}
		for k, p := range v1 {
			for _, tp := range p.TrainChoices() {
				for _, ip := range p.Infer {
					want := m1.Evaluate(p.Mode, tp, ip)
					got, err := mm.EvaluateMicro(multi[k], []int{ip.Batch}, []int{tp.MicroBatch()})
					if err != nil {
						t.Fatal(err)
					}
					sameAsV1(t, got, want)
				}
			}
		}
		want, err := m1.Choose(v1)
		if err != nil {
			t.Fatal(err)
		}
		got, err := mm.Choose(multi)
		if err != nil {
			t.Fatal(err)
		}
		sameAsV1(t, got.Best, want.Best)
		plans[want.Feasible]++
		if got.Feasible != want.Feasible || got.Binding.Constraint != want.Binding {
			t.Fatalf("trial %d: plan feasible %v binding %v, v1 %v %v", trial, got.Feasible, got.Binding, want.Feasible, want.Binding)
		}
	}
	if plans[true] < 20 || plans[false] < 20 {
		t.Fatalf("feasible/infeasible plans %d/%d: the random profiles should reach both often", plans[true], plans[false])
	}
}

func sameAsV1(t *testing.T, got MultiEval, want Eval) {
	t.Helper()
	s := got.Streams[0]
	if got.Mode != want.Mode || s.Batch != want.Batch || got.Rho != want.Rho || s.Rho != want.Rho ||
		s.LatencyMS != want.LatencyMS || got.PowerMW != want.PowerMW ||
		got.TrainSPS[0] != want.ThroughputSPS || got.ObjectiveSPS != want.ThroughputSPS ||
		got.Feasible != want.Feasible || got.Violation != want.Violation || got.Binding.Constraint != want.Binding {
		t.Fatalf("multi %+v\nv1    %+v", got, want)
	}
	if micro := 0; len(got.MicroBatches) > 0 && got.MicroBatches[0] != want.MicroBatch || len(got.MicroBatches) == 0 && want.MicroBatch != micro {
		t.Fatalf("micro-batches %v, v1 %d", got.MicroBatches, want.MicroBatch)
	}
	if got.TrainShares[0] != 1 || got.Binding.Stream != "" && got.Binding.Stream != s.Name {
		t.Fatalf("shares %v binding %+v", got.TrainShares, got.Binding)
	}
}

// Two streams, one job, every number worked by hand.
func TestMultiTwoStreamsHandComputed(t *testing.T) {
	// Stream A: λ 50/s, L 100 ms. Stream B: λ 10/s, L 700 ms. P 35 W, q 0.99, ρ_max 0.95.
	// Training: B_T 32 in 60 ms at 40 W.
	// A: b 1 in 5 ms at 20 W, b 2 in 8 ms at 20 W.  B: b 1 in 20 ms, b 2 in 30 ms, both 25 W.
	// Fill quantiles (b 2 is exponential, −ln 0.01/λ): A 4.60517/50 s = 92.103 ms,
	// B 4.60517/10 s = 460.517 ms.
	//
	// (A1, B2): ρ_A = 50·0.005/1 = 0.25, ρ_B = 10·0.030/2 = 0.15, ρ = 0.40
	//   lat_A = 0 + max(60, 30) + 1.095 + 5 = 66.095 ms ≤ 100 (queue: A's own batches only,
	//     B's budget is laxer — ρ 0.25, 5 ms batches behind a 60 ms turn)
	//   lat_B = 460.517 + max(60, 5) + 24.809 + 30 = 575.326 ms ≤ 700 (queue: both streams'
	//     batches, ρ 0.4, E[S²]/E[S] = (50·5² + 5·30²)/(50·5 + 5·30) = 14.375 ms)
	//   pow = 0.25·20 + 0.15·25 + 0.60·40 = 5 + 3.75 + 24 = 32.75 W ≤ 35
	//   θ = 0.60 · 32 / 0.060 = 320 samples/s
	//   slacks: lat_A −0.35, lat_B −0.2135, pow 32.75/35−1 = −0.0643, ρ −0.579 → binding power
	// (A1, B1): ρ = 0.25 + 0.2 = 0.45, pow 5 + 5 + 22 = 32 W, θ = 0.55·32/0.06 = 293.3
	// (A2, ·): lat_A = 92.103 + 60 + 2.554 + 8 = 162.66 ms > 100 — infeasible.
	// The joint choice is (A1, B2): B batches to give training time, A does not.
	mm, err := NewMultiModel(MultiBudgets{
		Streams: []StreamBudget{{Name: "A", RateRPS: 50, LatencyMS: 100}, {Name: "B", RateRPS: 10, LatencyMS: 700}},
		PowerMW: 35000,
	}, []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	p := MultiProfile{
		Mode:  multiMode(612000000),
		Train: []TrainPoint{{Batch: 32, TimeMS: 60, PowerMW: 40000}},
		Infer: [][]InferPoint{
			{{Batch: 1, TimeMS: 5, PowerMW: 20000}, {Batch: 2, TimeMS: 8, PowerMW: 20000}},
			{{Batch: 1, TimeMS: 20, PowerMW: 25000}, {Batch: 2, TimeMS: 30, PowerMW: 25000}},
		},
	}
	e, err := mm.Evaluate(p, []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	fillB := 1000 * -math.Log(0.01) / 10
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"ρ_A", e.Streams[0].Rho, 0.25}, {"ρ_B", e.Streams[1].Rho, 0.15}, {"ρ", e.Rho, 0.40},
		{"wait_A", e.Streams[0].WaitMS, 60}, {"queue_A", e.Streams[0].QueueMS, QueueExcessMS(0.25, 5, 60, 0.99)},
		{"lat_A", e.Streams[0].LatencyMS, 65 + QueueExcessMS(0.25, 5, 60, 0.99)},
		{"fill_B", e.Streams[1].FillMS, fillB}, {"queue_B", e.Streams[1].QueueMS, QueueExcessMS(0.4, 14.375, 60, 0.99)},
		{"lat_B", e.Streams[1].LatencyMS, fillB + 90 + QueueExcessMS(0.4, 14.375, 60, 0.99)},
		{"pow", e.PowerMW, 32750}, {"θ", e.TrainSPS[0], 320}, {"Θ", e.ObjectiveSPS, 320},
	} {
		if !near(c.got, c.want, 1e-9) {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	if !e.Feasible || e.Violation != 0 || e.Binding != (MultiBinding{Constraint: ConstraintPower}) {
		t.Errorf("feasible %v violation %v binding %+v, want feasible, binding power", e.Feasible, e.Violation, e.Binding)
	}
	a2, err := mm.Evaluate(p, []int{2, 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := 1000*-math.Log(0.01)/50 + 60 + QueueExcessMS(0.2, 8, 60, 0.99) + 8; a2.Feasible || !near(a2.Streams[0].LatencyMS, want, 1e-9) || a2.Binding != (MultiBinding{ConstraintLatency, "A"}) {
		t.Errorf("(A2, B1): lat_A %v (want %v) feasible %v binding %+v, want infeasible on A's latency", a2.Streams[0].LatencyMS, want, a2.Feasible, a2.Binding)
	}
	if want := 162.6575/100 - 1; !near(a2.Violation, want, 1e-5) {
		t.Errorf("(A2, B1): violation %v, want %v", a2.Violation, want)
	}
	pl, err := mm.Choose([]MultiProfile{p})
	if err != nil {
		t.Fatal(err)
	}
	if got := pl.Best.Batches(); !pl.Feasible || got[0] != 1 || got[1] != 2 || !near(pl.Best.ObjectiveSPS, 320, 1e-9) {
		t.Errorf("choice %v feasible %v Θ %v, want (1, 2), feasible, 320", got, pl.Feasible, pl.Best.ObjectiveSPS)
	}
}

// Another stream's batch is a non-preemptible turn: a long batch of B holds up A.
func TestMultiOtherStreamBatchIsATurnAhead(t *testing.T) {
	// Training minibatch 60 ms. B at b 8 takes 150 ms (ρ_B = 10·0.15/8 = 0.1875), at b 1
	// 20 ms (ρ_B = 0.2): b 8 leaves training more time, but A (b 1, 5 ms) then waits up
	// to 150 ms: lat_A = 155 ms > 100 (no queue of A's own 5 ms batches beyond so long a
	// turn). With B at b 1, lat_A = 60 + 1.095 (A's queue, QueueExcessMS) + 5 = 66.095 ms.
	mm, err := NewMultiModel(MultiBudgets{
		Streams: []StreamBudget{{Name: "A", RateRPS: 50, LatencyMS: 100}, {Name: "B", RateRPS: 10, LatencyMS: 5000}},
		PowerMW: 100000,
	}, []int{1, 8})
	if err != nil {
		t.Fatal(err)
	}
	p := MultiProfile{
		Mode:  multiMode(612000000),
		Train: []TrainPoint{{Batch: 32, TimeMS: 60, PowerMW: 30000}},
		Infer: [][]InferPoint{
			{{Batch: 1, TimeMS: 5, PowerMW: 20000}},
			{{Batch: 1, TimeMS: 20, PowerMW: 20000}, {Batch: 8, TimeMS: 150, PowerMW: 20000}},
		},
	}
	long, err := mm.Evaluate(p, []int{1, 8})
	if err != nil {
		t.Fatal(err)
	}
	short, err := mm.Evaluate(p, []int{1, 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := 65 + QueueExcessMS(0.25, 5, 60, 0.99); long.Streams[0].WaitMS != 150 || long.Streams[0].LatencyMS != 155 || !near(short.Streams[0].LatencyMS, want, 1e-12) {
		t.Errorf("lat_A with B at b 8: wait %v lat %v (want 150, 155); with B at b 1: lat %v (want %v)",
			long.Streams[0].WaitMS, long.Streams[0].LatencyMS, short.Streams[0].LatencyMS, want)
	}
	// B's own wait is the training minibatch (longer than A's 5 ms batch).
	if long.Streams[1].WaitMS != 60 {
		t.Errorf("wait_B = %v, want 60", long.Streams[1].WaitMS)
	}
	if long.Feasible || long.Binding != (MultiBinding{ConstraintLatency, "A"}) {
		t.Errorf("B at b 8: feasible %v binding %+v, want infeasible on A's latency", long.Feasible, long.Binding)
	}
	if !(long.TrainSPS[0] > short.TrainSPS[0]) {
		t.Fatalf("test premise: b 8 should leave training more time (%v vs %v)", long.TrainSPS[0], short.TrainSPS[0])
	}
	pl, err := mm.Choose([]MultiProfile{p})
	if err != nil {
		t.Fatal(err)
	}
	if got := pl.Best.Batches(); !pl.Feasible || got[1] != 1 {
		t.Errorf("choice %v feasible %v, want B at b 1 (feasible)", got, pl.Feasible)
	}
}

// Weights are time shares: θ_j = (1−ρ)·s_j·B_j/τ_Tj with s_j = w_j/Σw, training power is
// the s-weighted mix, and Θ is the s-weighted geometric mean.
func TestMultiTrainWeightsSplitThroughput(t *testing.T) {
	// One stream: λ 10, b 1 in 20 ms at 20 W → ρ = 0.2. Jobs: 32 in 100 ms at 40 W, 8 in
	// 50 ms at 30 W. Weights 3:1 → s = 0.75, 0.25.
	//   θ_1 = 0.8·0.75·32/0.1 = 192, θ_2 = 0.8·0.25·8/0.05 = 32
	//   pow = 0.2·20 + 0.8·(0.75·40 + 0.25·30) = 4 + 30 = 34 W
	//   Θ = 192^0.75 · 32^0.25; lat = 0 + max(100, 50) + 11.449 (the queue, QueueExcessMS:
	//   ρ 0.2, 20 ms batches) + 20 = 131.449 ms
	// Equal weights: θ_1 = 0.8·0.5·32/0.1 = 128, θ_2 = 0.8·0.5·8/0.05 = 64, pow = 4 + 0.8·35 = 32 W.
	p := MultiProfile{
		Mode:  multiMode(612000000),
		Train: []TrainPoint{{Batch: 32, TimeMS: 100, PowerMW: 40000}, {Batch: 8, TimeMS: 50, PowerMW: 30000}},
		Infer: [][]InferPoint{{{Batch: 1, TimeMS: 20, PowerMW: 20000}}},
	}
	for _, c := range []struct {
		weights        []float64
		th1, th2, powW float64
		obj            float64
	}{
		{[]float64{3, 1}, 192, 32, 34, math.Pow(192, 0.75) * math.Pow(32, 0.25)},
		{[]float64{6, 2}, 192, 32, 34, math.Pow(192, 0.75) * math.Pow(32, 0.25)},
		{nil, 128, 64, 32, math.Sqrt(128 * 64)},
		{[]float64{1, 1}, 128, 64, 32, math.Sqrt(128 * 64)},
	} {
		mm, err := NewMultiModel(MultiBudgets{Streams: []StreamBudget{{Name: "s", RateRPS: 10, LatencyMS: 200}}, PowerMW: 50000, TrainWeights: c.weights}, []int{1})
		if err != nil {
			t.Fatal(err)
		}
		e, err := mm.Evaluate(p, []int{1})
		if err != nil {
			t.Fatal(err)
		}
		if !near(e.TrainSPS[0], c.th1, 1e-9) || !near(e.TrainSPS[1], c.th2, 1e-9) || !near(e.PowerMW, 1000*c.powW, 1e-9) ||
			!near(e.ObjectiveSPS, c.obj, 1e-9) || !near(e.Streams[0].LatencyMS, 131.44944016, 1e-9) {
			t.Errorf("weights %v: θ %v pow %v Θ %v lat %v, want θ (%v, %v) pow %v W Θ %v lat 131.449",
				c.weights, e.TrainSPS, e.PowerMW, e.ObjectiveSPS, e.Streams[0].LatencyMS, c.th1, c.th2, c.powW, c.obj)
		}
		// The shares hand out exactly the time inference leaves: Σ θ_j·τ_Tj/B_j = 1 − ρ.
		var used float64
		for j, tp := range p.Train {
			used += e.TrainSPS[j] * tp.TimeMS / 1000 / float64(tp.Batch)
		}
		if !near(used, 1-e.Rho, 1e-12) {
			t.Errorf("weights %v: training uses %v of the GPU, want 1−ρ = %v", c.weights, used, 1-e.Rho)
		}
	}
}

func TestMultiValidationNamesTheField(t *testing.T) {
	ok := func() MultiBudgets {
		return MultiBudgets{Streams: []StreamBudget{{Name: "cam", RateRPS: 10, LatencyMS: 100}, {Name: "mic", RateRPS: 5, LatencyMS: 300}}, PowerMW: 20000}
	}
	for _, c := range []struct {
		name string
		edit func(*MultiBudgets)
		want []string
	}{
		{"no streams", func(b *MultiBudgets) { b.Streams = nil }, []string{"streams", "add at least one"}},
		{"rate zero", func(b *MultiBudgets) { b.Streams[1].RateRPS = 0 }, []string{"streams[1]", `"mic"`, "rate_rps", "out of range"}},
		{"latency in seconds", func(b *MultiBudgets) { b.Streams[0].LatencyMS = 0.05 }, []string{"streams[0]", "latency_ms", "seconds given as ms"}},
		{"unnamed", func(b *MultiBudgets) { b.Streams[0].Name = "" }, []string{"streams[0].name", "name every stream"}},
		{"duplicate", func(b *MultiBudgets) { b.Streams[1].Name = "cam" }, []string{"streams[1].name", "streams[0].name", "its own name"}},
		{"power in watts", func(b *MultiBudgets) { b.PowerMW = 20 }, []string{"power_mw", "watts given as mW"}},
		{"rho", func(b *MultiBudgets) { b.RhoMax = 2 }, []string{"rho_max"}},
		{"weight", func(b *MultiBudgets) { b.TrainWeights = []float64{1, -1} }, []string{"train_weights[1]", "positive share"}},
	} {
		b := ok()
		c.edit(&b)
		_, err := NewMultiModel(b, DefaultInferBatches())
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.name, err, w)
			}
		}
	}

	// Profiles that do not fit the budgets.
	b := ok()
	b.TrainWeights = []float64{1, 2}
	mm, err := NewMultiModel(b, []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	good := MultiProfile{
		Mode:  multiMode(612000000),
		Train: []TrainPoint{{Batch: 32, TimeMS: 60, PowerMW: 30000}, {Batch: 16, TimeMS: 40, PowerMW: 30000}},
		Infer: [][]InferPoint{{{Batch: 1, TimeMS: 5, PowerMW: 20000}}, {{Batch: 1, TimeMS: 5, PowerMW: 20000}}},
	}
	if _, err := mm.Evaluate(good, []int{1, 1}); err != nil {
		t.Fatalf("good profile: %v", err)
	}
	for _, c := range []struct {
		name    string
		edit    func(*MultiProfile)
		batches []int
		want    []string
	}{
		{"one stream profiled", func(p *MultiProfile) { p.Infer = p.Infer[:1] }, []int{1}, []string{"infer", "1 streams profiled", "profile every stream"}},
		{"weights and jobs", func(p *MultiProfile) { p.Train = p.Train[:1] }, []int{1, 1}, []string{"train_weights has 2", "one weight per job"}},
		{"no training", func(p *MultiProfile) { p.Train = nil }, []int{1, 1}, []string{"train", "no training job"}},
		{"zero time", func(p *MultiProfile) { p.Infer[1] = []InferPoint{{Batch: 1}} }, []int{1, 1}, []string{"infer[1]", "positive, finite time"}},
		{"batch not profiled", func(*MultiProfile) {}, []int{1, 2}, []string{`"mic"`, "batch 2", "profile it there"}},
		{"batch vector", func(*MultiProfile) {}, []int{1}, []string{"1 batch sizes for 2 streams"}},
	} {
		p := good
		p.Train = append([]TrainPoint(nil), good.Train...)
		p.Infer = [][]InferPoint{append([]InferPoint(nil), good.Infer[0]...), append([]InferPoint(nil), good.Infer[1]...)}
		c.edit(&p)
		_, err := mm.Evaluate(p, c.batches)
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, w := range append(c.want, "mode 8c") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.name, err, w)
			}
		}
	}
	if _, err := mm.Choose(nil); err == nil {
		t.Error("Choose(nil): no error")
	}
}
