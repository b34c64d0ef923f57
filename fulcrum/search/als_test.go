package search

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/truthprof"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// alsTestTable is a smooth known truth on a 4×6×5×3 grid: times are sums of shares
// bound by the GPU clock, the memory clock and the CPU (clock × cores); power is static
// plus dynamic terms growing faster than linearly with each clock.
func alsTestTable(t testing.TB) *truth.Table {
	t.Helper()
	sp, err := powermode.NewSpace(powermode.Levels{
		Cores:  []int{2, 4, 6, 8},
		CPUKHz: []int64{422400, 729600, 1036800, 1344000, 1651200, 2201600},
		GPUHz:  []int64{306000000, 510000000, 714000000, 918000000, 1300500000},
		EMCHz:  []int64{665600000, 2133000000, 3199000000},
	})
	if err != nil {
		t.Fatal(err)
	}
	var rows []truth.Row
	for _, m := range sp.Modes() {
		g := float64(m.GPUHz) / 1300.5e6
		e := float64(m.EMCHz) / 3199e6
		c := float64(m.CPUKHz) / 2201600 * math.Min(float64(m.Cores)/6, 1)
		powerW := func(act float64) float64 {
			return 6 + 12*act*g*g*(0.6+0.4*g) + 4*e + 6*c*float64(m.Cores)/8
		}
		rows = append(rows, truth.Row{Workload: "resnet", Role: truth.Train, Mode: m, Batch: 32,
			TimeMS: 60 * (0.6/g + 0.25/e + 0.15/c), PowerMW: 1000 * powerW(1)})
		for _, b := range plan.DefaultInferBatches() {
			base := 4 + 1.5*float64(b)
			rows = append(rows, truth.Row{Workload: "yolo", Role: truth.Infer, Mode: m, Batch: b,
				TimeMS: base * (0.5/g + 0.4/e + 0.1/c), PowerMW: 1000 * powerW(0.8)})
		}
	}
	tab, err := truth.NewTable(rows)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// alsTestProfiler is a profiler over alsTestTable's pair, and the pair's truth.
func alsTestProfiler(t testing.TB, noise float64, rng *rand.Rand) (*truthprof.PairTruth, *truthprof.TruthProfiler, error) {
	pt, err := truthprof.NewPairTruth(alsTestTable(t), "resnet", "yolo", 0, nil)
	if err != nil {
		return nil, nil, err
	}
	prof, err := truthprof.NewPairProfiler(pt, noise, rng)
	return pt, prof, err
}

// strictProfiler wraps a profiler and fails the test if a mode is asked for twice or
// a known mode is asked for at all.
type strictProfiler struct {
	t     *testing.T
	inner *truthprof.TruthProfiler
	asked map[powermode.Mode]bool
}

func newStrict(t *testing.T, p *truthprof.TruthProfiler) *strictProfiler {
	s := &strictProfiler{t: t, inner: p, asked: map[powermode.Mode]bool{}}
	for _, mp := range p.Known() {
		s.asked[mp.Mode] = true
	}
	return s
}

func (s *strictProfiler) Profile(ctx context.Context, m powermode.Mode) (plan.ModeProfile, error) {
	if s.asked[m] {
		s.t.Errorf("mode %s profiled again (or was already known)", m)
	}
	s.asked[m] = true
	return s.inner.Profile(ctx, m)
}

func (s *strictProfiler) Known() []plan.ModeProfile { return s.inner.Known() }

// alsTestBudgets returns budgets each met with slack by some configuration of the
// truth: a random mode and batch, latency and power budgets 10–25% above its values.
func alsTestBudgets(pt *truthprof.PairTruth, n int, rng *rand.Rand) []plan.Budgets {
	var out []plan.Budgets
	for len(out) < n {
		rate := []float64{5, 20, 60}[rng.IntN(3)]
		loose, err := plan.NewModel(plan.Budgets{RateRPS: rate, LatencyMS: 1e5, PowerMW: 1e5}, pt.Batches)
		if err != nil {
			panic(err)
		}
		i := rng.IntN(pt.Len())
		e, ok := loose.BestAtMode(pt.ProfileAt(i))
		if !ok || e.Rho > 0.8 {
			continue
		}
		out = append(out, plan.Budgets{RateRPS: rate, LatencyMS: e.LatencyMS * (1.1 + 0.15*rng.Float64()), PowerMW: e.PowerMW * (1.1 + 0.15*rng.Float64())})
	}
	return out
}

func alsOracle(t *testing.T, pt *truthprof.PairTruth, b plan.Budgets) plan.Eval {
	t.Helper()
	model, err := plan.NewModel(b, pt.Batches)
	if err != nil {
		t.Fatal(err)
	}
	var best plan.Eval
	for i := range pt.Len() {
		if e, ok := model.BestAtMode(pt.ProfileAt(i)); ok && (i == 0 || e.Better(best)) {
			best = e
		}
	}
	return best
}

func learnTestModel(t *testing.T, noise float64, seed uint64, maxProfiles int) (*ALSModel, *truthprof.PairTruth, *truthprof.TruthProfiler) {
	t.Helper()
	pt, prof, err := alsTestProfiler(t, noise, rand.New(rand.NewPCG(seed, 1)))
	if err != nil {
		t.Fatal(err)
	}
	p := problemOf(pt)
	p.Seed, p.MaxProfiles = seed, maxProfiles
	// Decided as the daemon decides at this noise: P(within budgets) ≥ 0.99.
	p.NoiseRel, p.Rules = noise, plan.Rules{NoiseRel: noise}
	m, err := NewALS(ALSOptions{}).LearnModel(context.Background(), p, newStrict(t, prof))
	if err != nil {
		t.Fatal(err)
	}
	if n := prof.Count(); n > maxProfiles || n != len(m.CampaignModes()) {
		t.Fatalf("campaign profiled %d modes (model says %d), want ≤ %d", n, len(m.CampaignModes()), maxProfiles)
	}
	return m, pt, prof
}

func TestALSNearOptimalWithNoiseAndFewConfirms(t *testing.T) {
	m, pt, prof := learnTestModel(t, 0.03, 7, 50)
	budgets := alsTestBudgets(pt, 10, rand.New(rand.NewPCG(99, 0)))
	var sum float64
	for k, b := range budgets {
		fork := prof.Fork(rand.New(rand.NewPCG(uint64(k), 2)))
		res, err := m.Answer(context.Background(), b, newStrict(t, fork))
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Profiled) > m.ConfirmBudget() || fork.Count() != len(res.Profiled) {
			t.Errorf("budget %d: %d confirming profiles listed, %d taken; want ≤ %d and equal", k, len(res.Profiled), fork.Count(), m.ConfirmBudget())
		}
		opt := alsOracle(t, pt, b)
		model, _ := plan.NewModel(b, pt.Batches)
		got, ok := pt.Score(model, res.Choice.Mode, res.Choice.Batch, res.Choice.MicroBatch)
		if !ok || !res.Found {
			t.Fatalf("budget %d: choice %+v not in the truth", k, res.Choice)
		}
		ratio := got.ThroughputSPS / opt.ThroughputSPS
		if !got.Feasible {
			t.Errorf("budget %d %+v: choice %s b%d violates the true budgets (%s): latency %.1f ms, power %.0f mW", k, b, got.Mode, got.Batch, got.Binding, got.LatencyMS, got.PowerMW)
			ratio = 0
		}
		sum += ratio
		t.Logf("budget %d: θ %.1f / optimal %.1f = %.3f, confirms %d (%s)", k, got.ThroughputSPS, opt.ThroughputSPS, ratio, len(res.Profiled), res.Stop)
	}
	if mean := sum / float64(len(budgets)); mean < 0.95 {
		t.Errorf("mean fraction of the optimal throughput %.3f over %d budgets, want ≥ 0.95", mean, len(budgets))
	}
}

func TestALSModelRoundTripsAndAnswersIdentically(t *testing.T) {
	m, pt, prof := learnTestModel(t, 0.03, 11, 20)
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	r, err := UnmarshalALSModel(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.ParetoSet(), m.ParetoSet()) || r.StopReason() != m.StopReason() {
		t.Errorf("restored Pareto set or stop reason differs")
	}
	if !reflect.DeepEqual(r.mu, m.mu) || !reflect.DeepEqual(r.sd, m.sd) || !reflect.DeepEqual(r.noise, m.noise) {
		t.Fatal("restored predictions differ from the learned ones")
	}
	for k, b := range alsTestBudgets(pt, 5, rand.New(rand.NewPCG(5, 5))) {
		r1, err1 := m.Answer(context.Background(), b, prof.Fork(rand.New(rand.NewPCG(uint64(k), 3))))
		r2, err2 := r.Answer(context.Background(), b, prof.Fork(rand.New(rand.NewPCG(uint64(k), 3))))
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if !reflect.DeepEqual(r1, r2) {
			t.Errorf("budget %d: learned answers %+v, restored %+v", k, r1, r2)
		}
	}
	// A second marshal of the restored model is byte-identical.
	again, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(data) {
		t.Error("re-marshalled model differs from the stored one")
	}
}

func TestUnmarshalALSModelRejectsCorruptInput(t *testing.T) {
	m, _, _ := learnTestModel(t, 0, 3, 12)
	good, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(good, &raw); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(map[string]any){
		"version":  func(r map[string]any) { r["version"] = 99 },
		"profiles": func(r map[string]any) { r["profiles"] = []any{} },
		"hyper":    func(r map[string]any) { delete(r["hyper"].(map[string]any), "train_time") },
		"batches":  func(r map[string]any) { r["infer_batches"] = []int{1, 2, 4, 8, 16, 32, 64} },
	} {
		c := map[string]any{}
		for k, v := range raw {
			c[k] = v
		}
		c["hyper"] = map[string]any{}
		for k, v := range raw["hyper"].(map[string]any) {
			c["hyper"].(map[string]any)[k] = v
		}
		mutate(c)
		data, _ := json.Marshal(c)
		if _, err := UnmarshalALSModel(data, nil); err == nil {
			t.Errorf("%s: corrupt model accepted", name)
		}
	}
	if _, err := UnmarshalALSModel([]byte("{"), nil); err == nil {
		t.Error("truncated JSON accepted")
	}
}

func TestALSSearchStaysWithinBudget(t *testing.T) {
	pt, prof, err := alsTestProfiler(t, 0.03, rand.New(rand.NewPCG(4, 4)))
	if err != nil {
		t.Fatal(err)
	}
	p := problemOf(pt)
	p.MaxProfiles = 20
	p.Budgets = alsTestBudgets(pt, 1, rand.New(rand.NewPCG(8, 8)))[0]
	a := NewALS(ALSOptions{})
	var s Searcher = a
	var _ PairLearner = a
	res, err := s.Search(context.Background(), p, newStrict(t, prof))
	if err != nil {
		t.Fatal(err)
	}
	if prof.Count() > 20 || len(res.Profiled) != prof.Count() {
		t.Errorf("profiled %d modes (result lists %d), budget 20", prof.Count(), len(res.Profiled))
	}
	if !res.Found || res.Stop == "" {
		t.Errorf("result %+v: want a choice and a stop reason", res)
	}
}

func TestALSUsesKnownProfilesForFree(t *testing.T) {
	pt, prof, err := alsTestProfiler(t, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := problemOf(pt)
	for i := range 12 {
		if _, err := prof.Profile(context.Background(), pt.ModeAt(i*29%pt.Len())); err != nil {
			t.Fatal(err)
		}
	}
	before := prof.Count()
	p.MaxProfiles = 8
	m, err := NewALS(ALSOptions{}).LearnModel(context.Background(), p, newStrict(t, prof))
	if err != nil {
		t.Fatal(err)
	}
	if got := prof.Count() - before; got > 8 || got != len(m.CampaignModes()) {
		t.Errorf("campaign took %d new profiles (model says %d), budget 8", got, len(m.CampaignModes()))
	}
	if len(m.Profiles()) != prof.Count() {
		t.Errorf("model holds %d profiles, the profiler knows %d", len(m.Profiles()), prof.Count())
	}
}

func TestALSRejectsBadProblems(t *testing.T) {
	pt, prof, err := alsTestProfiler(t, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	good := problemOf(pt)
	for name, mutate := range map[string]func(*Problem){
		"no space":    func(p *Problem) { p.Space = nil },
		"train batch": func(p *Problem) { p.TrainBatch = 0 },
		"batch zero":  func(p *Problem) { p.InferBatches = []int{0, 1} },
	} {
		p := good
		mutate(&p)
		if _, err := NewALS(ALSOptions{}).LearnModel(context.Background(), p, prof); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if prof.Count() != 0 {
		t.Errorf("bad problems cost %d profiles", prof.Count())
	}
}

func TestSeedDesignSpreadsAndIncludesExtremes(t *testing.T) {
	sp, err := powermode.NewSpace(powermode.Levels{Cores: []int{1, 2, 4, 8}, CPUKHz: []int64{1, 2, 3, 4, 5, 6}, GPUHz: []int64{1, 2, 3, 4, 5}, EMCHz: []int64{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	in := newInputs(sp)
	modes := sp.Modes()
	xs := make([][]float64, len(modes))
	for i, m := range modes {
		idx, _ := sp.Index(m)
		xs[i] = in.at(idx)
	}
	got := seedDesign(xs, modes, map[powermode.Mode]bool{}, 10, rand.New(rand.NewPCG(1, 1)))
	if len(got) != 10 {
		t.Fatalf("%d seeds, want 10", len(got))
	}
	first, last := modes[got[0]], modes[got[1]]
	if first != modes[0] || last != modes[len(modes)-1] {
		t.Errorf("first two seeds %s and %s, want the lowest and highest corners", first, last)
	}
	seen := map[int]bool{}
	levels := [powermode.NumKnobs]map[int]bool{{}, {}, {}, {}}
	for _, i := range got {
		if seen[i] {
			t.Errorf("seed %s chosen twice", modes[i])
		}
		seen[i] = true
		idx, _ := sp.Index(modes[i])
		for k := range powermode.NumKnobs {
			levels[k][idx[k]] = true
		}
	}
	// Space filling: every knob sees at least three of its levels.
	for k := range powermode.NumKnobs {
		if len(levels[k]) < 3 {
			t.Errorf("knob %s: seeds use %d levels, want ≥ 3", powermode.Knob(k), len(levels[k]))
		}
	}
}

// BenchmarkALSAnswer times answers from a learned model (the small test space; the
// AGX numbers are in docs/als.md).
func BenchmarkALSAnswer(b *testing.B) {
	pt, prof, err := alsTestProfiler(b, 0.03, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		b.Fatal(err)
	}
	m, err := NewALS(ALSOptions{}).LearnModel(context.Background(), problemOf(pt), prof)
	if err != nil {
		b.Fatal(err)
	}
	budgets := alsTestBudgets(pt, 16, rand.New(rand.NewPCG(2, 2)))
	b.ResetTimer()
	for i := range b.N {
		if _, err := m.Answer(context.Background(), budgets[i%len(budgets)], prof.Fork(rand.New(rand.NewPCG(uint64(i), 0)))); err != nil {
			b.Fatal(err)
		}
	}
}

func TestALSReportsImpossibleBudgetsAsInfeasible(t *testing.T) {
	m, _, prof := learnTestModel(t, 0.03, 5, 12)
	// 1.5 W is below the static power of every mode of the test truth (6 W).
	res, err := m.Answer(context.Background(), plan.Budgets{RateRPS: 10, LatencyMS: 500, PowerMW: 1500}, prof.Fork(rand.New(rand.NewPCG(1, 1))))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Found || res.Feasible || res.Choice.Feasible {
		t.Errorf("impossible budgets: found %v feasible %v (choice feasible %v), want a least-violating choice marked infeasible", res.Found, res.Feasible, res.Choice.Feasible)
	}
	if res.Choice.Binding != plan.ConstraintPower {
		t.Errorf("binding constraint %q, want power", res.Choice.Binding)
	}
	if n := len(res.Profiled) + len(res.Remeasured); n > m.ConfirmBudget() {
		t.Errorf("%d confirming profiles, want ≤ %d", n, m.ConfirmBudget())
	}
}

func TestALSLearnStopsOnCancel(t *testing.T) {
	pt, prof, err := alsTestProfiler(t, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := NewALS(ALSOptions{}).LearnModel(ctx, problemOf(pt), prof); err == nil {
		t.Error("a cancelled campaign returned a model")
	}
}

// TestALSPairProfilesCapped checks issue 15's cap: the campaign plus any one
// configuration's confirming profiles and repeats stay within MaxProfiles, also when the
// campaign spends its whole share and the answers may remeasure.
func TestALSPairProfilesCapped(t *testing.T) {
	for _, total := range []int{0, 20, 50} {
		pt, camp, err := alsTestProfiler(t, 0.03, rand.New(rand.NewPCG(21, 1)))
		if err != nil {
			t.Fatal(err)
		}
		p := problemOf(pt)
		p.Seed, p.MaxProfiles, p.NoiseRel = 21, total, 0.03
		p.Rules = plan.Rules{NoiseRel: 0.03, Admission: plan.Admission{MarginMS: 5, DevRel: 0.06}}
		// Never resolved early: the campaign takes every profile it may.
		ans, err := NewALS(ALSOptions{StopSigma: 1e-9, StableRounds: -1}).Learn(context.Background(), p, camp)
		if err != nil {
			t.Fatal(err)
		}
		limit := total
		if limit == 0 {
			limit = 50
		}
		rng := rand.New(rand.NewPCG(22, 2))
		budgets := alsTestBudgets(pt, 40, rng)
		// Tight ones too: where nothing is claimable the answer must not overspend.
		for _, b := range budgets[:10] {
			budgets = append(budgets, plan.Budgets{RateRPS: b.RateRPS, LatencyMS: b.LatencyMS * 0.8, PowerMW: b.PowerMW * 0.85})
		}
		repeats := 0
		for k, b := range budgets {
			fork := camp.Fork(rand.New(rand.NewPCG(uint64(k), 3)))
			res, err := ans.Answer(context.Background(), b, fork)
			if err != nil {
				t.Fatal(err)
			}
			repeats += len(res.Remeasured)
			if n := camp.Count() + fork.Count(); n > limit {
				t.Errorf("max %d: budget %d: campaign %d + confirmations %d = %d profiles, want ≤ %d", total, k, camp.Count(), fork.Count(), n, limit)
			}
			if fork.Count() != len(res.Profiled)+len(res.Remeasured) {
				t.Errorf("max %d: budget %d: %d profiles taken, result lists %d + %d repeats", total, k, fork.Count(), len(res.Profiled), len(res.Remeasured))
			}
		}
		t.Logf("max %d: campaign %d, %d repeats over %d answers", total, camp.Count(), repeats, len(budgets))
	}
}
