package sim_test

import (
	"math"
	"slices"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/truth"
)

func preset(t testing.TB, spec *powermode.BoardSpec, name string) powermode.Mode {
	t.Helper()
	for _, p := range spec.NVP.Presets {
		if p.Name == name {
			return spec.PresetMode(p)
		}
	}
	t.Fatalf("no preset %s", name)
	return powermode.Mode{}
}

func TestWorkloadCatalog(t *testing.T) {
	ws := testboard.Workloads(t)
	var train, infer int
	for _, w := range ws {
		switch w.Role {
		case truth.Train:
			train++
		case truth.Infer:
			infer++
			if !slices.Equal(w.Batches, []int{1, 2, 4, 8, 16, 32}) {
				t.Errorf("%s: batches %v, want 1..32 powers of two", w.Name, w.Batches)
			}
		}
		if w.NoiseSigma < 0.015 || w.NoiseSigma > 0.05 {
			t.Errorf("%s: noise sigma %v outside the documented 2-4%% band", w.Name, w.NoiseSigma)
		}
	}
	if train < 5 || infer < 4 {
		t.Errorf("catalog has %d training and %d inference workloads, want ≥5 and ≥4", train, infer)
	}
	if ws["resnet18-train"] == nil || ws["resnet18-train"].Batch != 32 {
		t.Errorf("resnet18-train missing or B_T != 32")
	}
}

// docs/design.md §5 anchors.
func TestCalibrationAnchors(t *testing.T) {
	spec, ws := testboard.Spec(t, testboard.AGXOrin), testboard.Workloads(t)
	h := sim.HardwareFor(spec)
	maxn, m15 := preset(t, spec, "MAXN"), preset(t, spec, "MODE_15W")
	r18 := ws["resnet18-train"]
	if ms := r18.TimeMS(spec, maxn, 32); ms < 80 || ms > 125 {
		t.Errorf("resnet18 b=32 at MAXN: %.1f ms, want ≈100", ms)
	}
	if mw := r18.PowerMW(spec, maxn, 32); mw < 45000 || mw > 55000 {
		t.Errorf("resnet18 b=32 at MAXN: %.0f mW, want 45–55 W", mw)
	}
	for _, w := range ws {
		for _, b := range w.BatchSizes() {
			// GPU-heavy work draws 12–16 W in MODE_15W (resnet18 is checked below);
			// launch-bound or batch-1 work leaves the GPU idle part of the time.
			lo := 8000.0
			if mw := w.PowerMW(spec, m15, b); mw < lo || mw > 16000 {
				t.Errorf("%s b=%d at MODE_15W: %.0f mW, want %.0f–16000", w.Name, b, mw, lo)
			}
			low := powermode.Mode{Cores: 1, CPUKHz: spec.CPU.FreqsKHz[0], GPUHz: spec.GPU.FreqsHz[0], EMCHz: spec.EMC.RatesHz[0]}
			if mw := w.PowerMW(spec, low, b); mw >= 15000 {
				t.Errorf("%s b=%d at the lowest mode: %.0f mW, want < 15 W", w.Name, b, mw)
			}
			if mw := w.PowerMW(spec, maxn, b); mw > 60000 {
				t.Errorf("%s b=%d at MAXN: %.0f mW exceeds the 60 W module limit", w.Name, b, mw)
			}
		}
	}
	if r15 := r18.PowerMW(spec, m15, 32); r15 < 12000 || r15 > 16000 {
		t.Errorf("resnet18 at MODE_15W: %.0f mW, want 12–16 W", r15)
	}
	for _, m := range []powermode.Mode{maxn, m15} {
		if mw := sim.IdlePower(&h, m).TotalMW(); mw < 6000 || mw > 10500 {
			t.Errorf("idle at %s: %.0f mW, want ~7–10 W", m.Human(), mw)
		}
	}
}

// ratio is time at the slower mode over time at the faster one.
func ratio(w *sim.Workload, spec *powermode.BoardSpec, slow, fast powermode.Mode, b int) float64 {
	return w.TimeMS(spec, slow, b) / w.TimeMS(spec, fast, b)
}

func TestWorkloadCharacters(t *testing.T) {
	spec, ws := testboard.Spec(t, testboard.AGXOrin), testboard.Workloads(t)
	maxn := preset(t, spec, "MAXN")
	lowEMC, lowGPU, lowCPU, fewCores := maxn, maxn, maxn, maxn
	lowEMC.EMCHz = 665600000
	lowGPU.GPUHz = 612000000
	lowCPU.CPUKHz = 1113600
	fewCores.Cores = 2
	type sens struct{ emc, gpu, cpu, cores float64 }
	s := map[string]sens{}
	for name, w := range ws {
		b := w.BatchSizes()[0]
		s[name] = sens{ratio(w, spec, lowEMC, maxn, b), ratio(w, spec, lowGPU, maxn, b), ratio(w, spec, lowCPU, maxn, b), ratio(w, spec, fewCores, maxn, b)}
	}
	cases := []struct {
		name, more, less string
		knob             func(sens) float64
	}{
		{"memory-bound cares more about EMC than compute-bound", "bert-small-train", "resnet18-train", func(x sens) float64 { return x.emc }},
		{"compute-bound cares more about GPU clock than launch-bound", "resnet18-train", "lstm-train", func(x sens) float64 { return x.gpu }},
		{"launch-bound cares more about CPU clock than compute-bound", "lstm-train", "resnet18-train", func(x sens) float64 { return x.cpu }},
		{"data-loader-bound starves with few cores", "mobilenetv3-train", "resnet18-train", func(x sens) float64 { return x.cores }},
		{"batch-1 inference is CPU-bound, not GPU-bound", "mobilenetv3-infer", "resnet50-infer", func(x sens) float64 { return x.cpu / x.gpu }},
	}
	for _, c := range cases {
		if a, b := c.knob(s[c.more]), c.knob(s[c.less]); a <= b*1.1 {
			t.Errorf("%s: %s slowdown %.2f, %s %.2f", c.name, c.more, a, c.less, b)
		}
	}
	if x := s["mobilenetv3-train"].cores; x < 2 {
		t.Errorf("mobilenetv3-train on 2 cores only %.2fx slower than on 12: data loading does not starve", x)
	}
	if x := s["bert-base-infer"].emc; x < 1.15 {
		t.Errorf("bert-base-infer b=1 at EMC 665 MHz only %.2fx slower: weight streaming should matter", x)
	}
	// Monotone: every knob raised never slows a workload down.
	space, err := sim.TruthSpace(spec, []int{2, 6, 12})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		b := w.BatchSizes()[len(w.BatchSizes())-1]
		for idx, m := range space.All() {
			for _, n := range space.Neighbours(idx, 1) {
				up := true
				for k := range powermode.NumKnobs {
					up = up && n[k] >= idx[k]
				}
				if up && w.TimeMS(spec, space.Mode(n), b) > w.TimeMS(spec, m, b)*1.000001 {
					t.Fatalf("%s: raising a knob from %s to %s slows it down", w.Name, m, space.Mode(n))
				}
			}
		}
	}
	// Larger inference batches take longer but are cheaper per sample.
	for _, w := range ws {
		if w.Role != truth.Infer {
			continue
		}
		prev := 0.0
		for _, b := range w.Batches {
			ms := w.TimeMS(spec, maxn, b)
			if ms <= prev {
				t.Errorf("%s: b=%d not slower than the previous batch", w.Name, b)
			}
			prev = ms
		}
		if w.TimeMS(spec, maxn, 32)/32 >= w.TimeMS(spec, maxn, 1) {
			t.Errorf("%s: batching does not amortise", w.Name)
		}
	}
}

func TestNoisyMeanAndSpread(t *testing.T) {
	w := testboard.Workloads(t)["resnet18-train"]
	rng := newRand(1)
	const n = 20000
	var sum, sumLog2 float64
	for range n {
		v := w.Noisy(rng, 100)
		sum += v
		sumLog2 += math.Pow(math.Log(v/100), 2)
	}
	if mean := sum / n; math.Abs(mean-100) > 0.2 {
		t.Errorf("noisy mean %.3f, want 100", mean)
	}
	if sd := math.Sqrt(sumLog2 / n); math.Abs(sd-w.NoiseSigma) > 0.003 {
		t.Errorf("noisy log-sd %.4f, want %.3f", sd, w.NoiseSigma)
	}
}

// v1 is docs/design.md §2's model, written here independently of the planner.
type v1Choice struct {
	mode  powermode.Mode
	batch int
	theta float64
	ok    bool
}

// v1Pair holds one (training, inference) pair's table columns as arrays by mode, so
// the many budget configurations scan plain slices.
type v1Pair struct {
	modes     []powermode.Mode
	batches   []int
	bT        int
	tauT, piT []float64   // by mode, seconds and mW
	tauI, piI [][]float64 // by mode, then batch index
}

func newV1Pair(t *testing.T, tab *truth.Table, train, infer string, bT int, batches []int) *v1Pair {
	t.Helper()
	p := &v1Pair{modes: tab.Modes(), batches: batches, bT: bT}
	for _, m := range p.modes {
		tr, ok := tab.Lookup(truth.Key{Workload: train, Role: truth.Train, Mode: m, Batch: bT})
		if !ok {
			t.Fatalf("table lacks %s at %s", train, m)
		}
		p.tauT = append(p.tauT, tr.TimeMS/1e3)
		p.piT = append(p.piT, tr.PowerMW)
		var ti, pi []float64
		for _, b := range batches {
			in, ok := tab.Lookup(truth.Key{Workload: infer, Role: truth.Infer, Mode: m, Batch: b})
			if !ok {
				t.Fatalf("table lacks %s b=%d at %s", infer, b, m)
			}
			ti = append(ti, in.TimeMS/1e3)
			pi = append(pi, in.PowerMW)
		}
		p.tauI = append(p.tauI, ti)
		p.piI = append(p.piI, pi)
	}
	return p
}

func (p *v1Pair) optimum(lambda, latS, powMW float64) v1Choice {
	var best v1Choice
	bestPow := math.Inf(1)
	fill := make([]float64, len(p.batches)) // q=0.99 time to fill a batch of b at rate λ
	for j, b := range p.batches {
		if b > 1 {
			fill[j] = distuv.Gamma{Alpha: float64(b - 1), Beta: lambda}.Quantile(0.99)
		}
	}
	for i, m := range p.modes {
		for j, b := range p.batches {
			rho := lambda * p.tauI[i][j] / float64(b)
			if rho > 0.95 {
				continue
			}
			lat := fill[j] + p.tauT[i] + p.tauI[i][j]
			pow := rho*p.piI[i][j] + (1-rho)*p.piT[i]
			theta := (1 - rho) * float64(p.bT) / p.tauT[i]
			if lat > latS || pow > powMW {
				continue
			}
			if theta > best.theta || (theta == best.theta && pow < bestPow) {
				best, bestPow = v1Choice{m, b, theta, true}, pow
			}
		}
	}
	return best
}

// The point of Fulcrum: under realistic budgets the best mode is neither MAXN nor an
// nvpmodel preset. If this fails the model is too flat.
func TestV1OptimumIsNotAPreset(t *testing.T) {
	spec, ws := testboard.Spec(t, testboard.AGXOrin), testboard.Workloads(t)
	pairs := [][2]string{
		{"resnet18-train", "mobilenetv3-infer"},
		{"bert-small-train", "resnet50-infer"},
		{"lstm-train", "bert-base-infer"},
		{"mobilenetv3-train", "yolov8n-infer"},
	}
	var names []string
	for _, p := range pairs {
		names = append(names, p[0], p[1])
	}
	rows, err := sim.TruthRows(spec, ws, sim.TruthOptions{Workloads: names})
	if err != nil {
		t.Fatal(err)
	}
	tab, err := truth.NewTable(rows)
	if err != nil {
		t.Fatal(err)
	}
	presets := map[powermode.Mode]string{}
	for _, p := range spec.NVP.Presets {
		presets[spec.PresetMode(p)] = p.Name
	}
	var feasible, notPreset int
	for _, p := range pairs {
		pair := newV1Pair(t, tab, p[0], p[1], ws[p[0]].Batch, ws[p[1]].Batches)
		for _, lambda := range []float64{10, 30} {
			for _, latMS := range []float64{50, 100, 200} {
				for _, powW := range []float64{15, 20, 30, 40} {
					best := pair.optimum(lambda, latMS/1e3, powW*1e3)
					if !best.ok {
						continue
					}
					feasible++
					name, isPreset := presets[best.mode]
					if !isPreset {
						notPreset++
					}
					t.Logf("%s+%s λ=%v L=%vms P=%vW: %s b=%d θ=%.1f %s", p[0], p[1], lambda, latMS, powW, best.mode.Human(), best.batch, best.theta, name)
				}
			}
		}
	}
	if feasible < 20 {
		t.Fatalf("only %d of %d configurations feasible: budgets or model implausible", feasible, len(pairs)*24)
	}
	// Launch-bound LSTM never reaches 30 W, so with a loose power budget MAXN is its
	// optimum (as on a real board); the rest must not be a preset.
	if notPreset*3 < feasible*2 {
		t.Errorf("only %d of %d feasible optima differ from every preset (incl. MAXN)", notPreset, feasible)
	}
}

// Issue 32: TruthRows with MicroSplits adds, per training workload and mode, one row per
// micro-batch B_T/k (k dividing B_T) whose time and power are the model's at B_T/k
// samples; inference rows and the whole-minibatch rows are unchanged, and a micro-batch
// turn never costs less per sample than the whole minibatch.
func TestTruthRowsMicroBatches(t *testing.T) {
	spec := testboard.Spec(t, "agx-orin-64gb")
	ws := testboard.Workloads(t)
	base := sim.TruthOptions{Workloads: []string{"lstm-train", "resnet18-train", "resnet50-infer"}, Cores: []int{4, 12}}
	before, err := sim.TruthRows(spec, ws, base)
	if err != nil {
		t.Fatal(err)
	}
	opt := base
	opt.MicroSplits = []int{2, 4, 8}
	rows, err := sim.TruthRows(spec, ws, opt)
	if err != nil {
		t.Fatal(err)
	}
	whole := map[truth.Key]truth.Row{}
	for _, r := range before {
		whole[r.Key()] = r
	}
	micros := map[string]map[int]bool{}
	for _, r := range rows {
		if r.MicroBatch == 0 {
			if whole[r.Key()] != r {
				t.Fatalf("row %+v changed: was %+v", r, whole[r.Key()])
			}
			continue
		}
		w := ws[r.Workload]
		if r.Role != truth.Train || r.Batch != w.Batch || w.Batch%r.MicroBatch != 0 {
			t.Fatalf("micro-batch row %+v", r)
		}
		if want := w.TimeMS(spec, r.Mode, r.MicroBatch); r.TimeMS != want {
			t.Fatalf("%s micro-batch %d at %s: %v ms, want the model's %v", r.Workload, r.MicroBatch, r.Mode, r.TimeMS, want)
		}
		full := whole[truth.Key{Workload: r.Workload, Role: r.Role, Mode: r.Mode, Batch: r.Batch}]
		if perSample := r.TimeMS / float64(r.MicroBatch); perSample < full.TimeMS/float64(full.Batch) {
			t.Fatalf("%s micro-batch %d at %s: %v ms a sample, below the minibatch's %v", r.Workload, r.MicroBatch, r.Mode, perSample, full.TimeMS/float64(full.Batch))
		}
		if micros[r.Workload] == nil {
			micros[r.Workload] = map[int]bool{}
		}
		micros[r.Workload][r.MicroBatch] = true
	}
	// resnet18: B_T 32 → 16, 8, 4; lstm: B_T 20 → 10 and 5 (8 does not divide 20).
	if len(micros["resnet18-train"]) != 3 || !micros["resnet18-train"][4] || len(micros["lstm-train"]) != 2 || !micros["lstm-train"][5] {
		t.Fatalf("micro-batch sizes %v", micros)
	}
	modes := 0
	for _, r := range before {
		if r.Workload == "resnet18-train" {
			modes++
		}
	}
	if added := len(rows) - len(before); added != modes*(3+2) {
		t.Fatalf("%d micro-batch rows over %d modes, want 5 a mode", added, modes)
	}
	if _, err := sim.TruthRows(spec, ws, sim.TruthOptions{MicroSplits: []int{1}}); err == nil {
		t.Fatal("a split of 1 was accepted")
	}
	// The per-turn cost fitted to real PyTorch: every micro-batch turn costs at least
	// 1 + c·(B_T/b − 1) times the minibatch per sample, the whole minibatch is unchanged.
	opt.MicroTurnCostRel = 0.18
	cal, err := sim.TruthRows(spec, ws, opt)
	if err != nil {
		t.Fatal(err)
	}
	raised := 0
	for i, r := range cal {
		if r.MicroBatch == 0 {
			if r != rows[i] {
				t.Fatalf("whole row %+v changed by the turn cost: %+v", rows[i], r)
			}
			continue
		}
		full := whole[truth.Key{Workload: r.Workload, Role: r.Role, Mode: r.Mode, Batch: r.Batch}]
		floor := full.TimeMS * (0.18 + 0.82*float64(r.MicroBatch)/float64(r.Batch))
		if r.TimeMS < floor*(1-1e-12) || r.TimeMS < rows[i].TimeMS {
			t.Fatalf("%+v: below the turn-cost floor %v or the model's %v", r, floor, rows[i].TimeMS)
		}
		if r.TimeMS > rows[i].TimeMS {
			raised++
		}
	}
	if raised == 0 {
		t.Fatal("the turn cost raised no micro-batch turn")
	}
	if _, err := sim.TruthRows(spec, ws, sim.TruthOptions{MicroTurnCostRel: 1}); err == nil {
		t.Fatal("a turn cost of the whole minibatch was accepted")
	}
}
