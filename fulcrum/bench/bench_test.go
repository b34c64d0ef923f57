package bench

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/benchgen"
	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/truthprof"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/search"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// Three modes of a hand-checked table (rate 1/s, batch 1 only, latency budget 1 s):
//
//	mode  train τ/π        infer τ/π      ρ      θ = (1−ρ)·32/τ_T   power
//	A     200 ms / 10 W    10 ms / 10 W   0.01   158.4               10 W
//	B     100 ms / 20 W     5 ms / 20 W   0.005  318.4               20 W
//	C     400 ms /  6 W    20 ms /  6 W   0.02    78.4                6 W
//
// Power budgets 5 W (nothing fits: the oracle is infeasible), 15 W (A is optimal),
// 25 W (B is optimal).
var (
	modeA = powermode.Mode{Cores: 4, CPUKHz: 1000000, GPUHz: 500000000, EMCHz: 2133000000}
	modeB = powermode.Mode{Cores: 8, CPUKHz: 2000000, GPUHz: 1000000000, EMCHz: 3199000000}
	modeC = powermode.Mode{Cores: 2, CPUKHz: 500000, GPUHz: 300000000, EMCHz: 665600000}
)

func handTable(t *testing.T) *truth.Table {
	t.Helper()
	var rows []truth.Row
	for _, r := range []struct {
		m              powermode.Mode
		tt, tp, it, ip float64
	}{{modeA, 200, 10000, 10, 10000}, {modeB, 100, 20000, 5, 20000}, {modeC, 400, 6000, 20, 6000}} {
		rows = append(rows,
			truth.Row{Workload: "tr", Role: truth.Train, Mode: r.m, Batch: 32, TimeMS: r.tt, PowerMW: r.tp},
			truth.Row{Workload: "in", Role: truth.Infer, Mode: r.m, Batch: 1, TimeMS: r.it, PowerMW: r.ip})
	}
	tab, err := truth.NewTable(rows)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// fixedSearcher profiles one mode and claims it fits (or answers nothing).
type fixedSearcher struct {
	name string
	mode powermode.Mode
	none bool
}

func (f fixedSearcher) Name() string { return f.name }
func (f fixedSearcher) Search(ctx context.Context, p search.Problem, prof search.Profiler) (search.Result, error) {
	mp, err := prof.Profile(ctx, f.mode)
	if err != nil {
		return search.Result{}, err
	}
	if f.none {
		return search.Result{Profiled: []powermode.Mode{f.mode}}, nil
	}
	m, _ := plan.NewModel(p.Budgets, p.InferBatches)
	e, _ := m.BestAtMode(mp)
	return search.Result{Choice: e, Found: true, Feasible: true, Profiled: []powermode.Mode{f.mode}}, nil
}

// learner profiles A and B once per pair, then confirms with C for every budget set
// and lets the planner choose among the three.
type learner struct{}

func (learner) Name() string { return "learner" }
func (learner) Learn(ctx context.Context, p search.Problem, prof search.Profiler) (search.Answerer, error) {
	if p.Budgets != (plan.Budgets{}) {
		return nil, fmt.Errorf("Learn got budgets %+v, want none", p.Budgets)
	}
	for _, m := range []powermode.Mode{modeA, modeB} {
		if _, err := prof.Profile(ctx, m); err != nil {
			return nil, err
		}
	}
	return learnerAnswer{batches: p.InferBatches}, nil
}

// Search implements search.Searcher (learn, then answer the one configuration): the
// benchmark prefers Learn, as it does for ALS.
func (l learner) Search(ctx context.Context, p search.Problem, prof search.Profiler) (search.Result, error) {
	b := p.Budgets
	p.Budgets = plan.Budgets{}
	a, err := l.Learn(ctx, p, prof)
	if err != nil {
		return search.Result{}, err
	}
	return a.Answer(ctx, b, prof)
}

type learnerAnswer struct{ batches []int }

func (a learnerAnswer) Answer(ctx context.Context, b plan.Budgets, prof search.Profiler) (search.Result, error) {
	if len(prof.Known()) != 2 {
		return search.Result{}, fmt.Errorf("answer sees %d known profiles, want the campaign's 2", len(prof.Known()))
	}
	if _, err := prof.Profile(ctx, modeC); err != nil {
		return search.Result{}, err
	}
	m, err := plan.NewModel(b, a.batches)
	if err != nil {
		return search.Result{}, err
	}
	plan, err := m.Choose(prof.Known())
	if err != nil {
		return search.Result{}, err
	}
	return search.Result{Choice: plan.Best, Found: true, Feasible: plan.Feasible, Profiled: []powermode.Mode{modeC}}, nil
}

func TestBenchHandChecked(t *testing.T) {
	build := func(name string) (search.Searcher, error) {
		switch name {
		case "fast":
			return fixedSearcher{name: name, mode: modeB}, nil
		case "slow":
			return fixedSearcher{name: name, mode: modeA}, nil
		case "shy":
			return fixedSearcher{name: name, mode: modeC, none: true}, nil
		case "learner":
			return learner{}, nil
		}
		return nil, fmt.Errorf("no %s", name)
	}
	rep, err := RunBench(context.Background(), BenchSpec{
		Truth: handTable(t), RatesRPS: []float64{1}, LatenciesMS: []float64{1000}, PowersMW: []float64{5000, 15000, 25000},
		Searchers: []string{"oracle", "fast", "slow", "shy", "learner"}, Noise: 0, Seed: 1, Parallel: 3, Build: build,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.ConfigsTotal != 3 || rep.ConfigsOracleInfeasible != 1 || rep.Pairs != 1 {
		t.Fatalf("configs %d, oracle-infeasible %d, pairs %d; want 3, 1, 1", rep.ConfigsTotal, rep.ConfigsOracleInfeasible, rep.Pairs)
	}
	thetaA, thetaB, thetaC := 0.99*32/0.2, 0.995*32/0.1, 0.98*32/0.4
	want := map[string]SearcherStats{
		"oracle": {WithinBudgetPct: 100, MeanOptRatio: 1, P5OptRatio: 1, MeanProfiles: 3, MaxProfiles: 3},
		// 15 W: B violates, so the decision over {B} withholds it though the searcher
		// claims it; 25 W: B is optimal.
		"fast": {WithinBudgetPct: 50, NoAnswerPct: 50, MeanOptRatio: 0.5, P5OptRatio: 0, MeanProfiles: 1, MaxProfiles: 1},
		// 15 W: A is optimal; 25 W: A fits at θA/θB.
		"slow": {WithinBudgetPct: 100, MeanOptRatio: (1 + thetaA/thetaB) / 2, P5OptRatio: thetaA / thetaB, MeanProfiles: 1, MaxProfiles: 1},
		// shy claims nothing, but the decision over what it profiled claims C, which fits
		// at 15 W (θC/θA) and 25 W (θC/θB).
		"shy": {WithinBudgetPct: 100, MeanOptRatio: (thetaC/thetaA + thetaC/thetaB) / 2, P5OptRatio: thetaC / thetaB, MeanProfiles: 1, MaxProfiles: 1},
		// Campaign of 2 once for the pair + 1 confirming profile per configuration.
		"learner": {WithinBudgetPct: 100, MeanOptRatio: 1, P5OptRatio: 1, MeanProfiles: (2 + 3) / 3.0, MaxProfiles: 3},
	}
	for _, s := range rep.Searchers {
		w := want[s.Name]
		w.Name, w.WallS = s.Name, s.WallS
		if !statsNear(s, w) {
			t.Errorf("%s:\n got %+v\nwant %+v", s.Name, s, w)
		}
	}
}

// TestScoreStatuses checks the scoring of answers the decision claims: a claim the truth
// violates, and a claim where nothing can fit (false_claim_pct, over the unsatisfiable
// configurations; not in the other percentages).
func TestScoreStatuses(t *testing.T) {
	pt, err := truthprofPair(t)
	if err != nil {
		t.Fatal(err)
	}
	cfg := func(powerMW float64) *benchConfig {
		b := plan.Budgets{RateRPS: 1, LatencyMS: 1000, PowerMW: powerMW}.WithDefaults()
		m, _ := plan.NewModel(b, pt.Batches)
		o, _ := Oracle(pt, b)
		return &benchConfig{budgets: b, model: m, oracle: o}
	}
	claim := func(m powermode.Mode) search.Result {
		return search.Result{Choice: plan.Eval{Mode: m, Batch: 1}, Found: true, Feasible: true}
	}
	p := Pair{"tr", "in"}
	outs := []Outcome{
		score(p, pt, cfg(15000), claim(modeB), nil, 1),                                                        // B draws 20 W: violation
		score(p, pt, cfg(15000), claim(modeA), nil, 1),                                                        // A is optimal: within
		score(p, pt, cfg(5000), claim(modeC), nil, 1),                                                         // nothing fits 5 W: false claim
		score(p, pt, cfg(5000), search.Result{Choice: plan.Eval{Mode: modeC, Batch: 1}, Found: true}, nil, 1), // not claimed
	}
	for i, want := range []string{"violation", "within", "false_claim", "oracle_infeasible"} {
		if outs[i].Status != want {
			t.Errorf("outcome %d: status %q, want %q", i, outs[i].Status, want)
		}
	}
	got := summarise("x", outs)
	want := SearcherStats{Name: "x", WithinBudgetPct: 50, ViolationPct: 50, FalseClaimPct: 50, MeanOptRatio: 0.5, P5OptRatio: 0, MeanProfiles: 1, MaxProfiles: 1}
	if !statsNear(got, want) || got.FalseClaimPct != want.FalseClaimPct {
		t.Errorf("summary\n got %+v\nwant %+v", got, want)
	}
}

func statsNear(a, b SearcherStats) bool {
	f := func(x, y float64) bool { return math.Abs(x-y) < 1e-9 }
	return a.Name == b.Name && f(a.WithinBudgetPct, b.WithinBudgetPct) && f(a.ViolationPct, b.ViolationPct) &&
		f(a.NoAnswerPct, b.NoAnswerPct) && f(a.MeanOptRatio, b.MeanOptRatio) && f(a.P5OptRatio, b.P5OptRatio) &&
		f(a.MeanProfiles, b.MeanProfiles) && a.MaxProfiles == b.MaxProfiles && a.Errors == b.Errors
}

func TestBenchDeterministicAcrossParallelism(t *testing.T) {
	v := benchgen.Small()
	tab, err := benchgen.Table(v)
	if err != nil {
		t.Fatal(err)
	}
	names, presets := benchgen.Presets(v)
	run := func(par int) *BenchReport {
		rep, err := RunBench(context.Background(), BenchSpec{
			Truth: tab, RatesRPS: []float64{5, 20}, LatenciesMS: []float64{120, 300}, PowersMW: []float64{16000, 26000},
			Searchers: []string{"gmd", "preset", "random-5", "maxn"}, Noise: 0.03, Seed: 42, Parallel: par,
			Presets: presets, PresetNames: names,
		})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	a, b := run(1), run(4)
	if !reflect.DeepEqual(a.Outcomes, b.Outcomes) {
		t.Error("outcomes differ between 1 and 4 workers")
	}
	for i := range a.Searchers {
		a.Searchers[i].WallS, b.Searchers[i].WallS = 0, 0
	}
	if !reflect.DeepEqual(a.Searchers, b.Searchers) {
		t.Errorf("summaries differ:\n%+v\n%+v", a.Searchers, b.Searchers)
	}
	// A different seed gives different noise, hence (here) different answers somewhere.
	c := func() *BenchReport {
		rep, _ := RunBench(context.Background(), BenchSpec{
			Truth: tab, RatesRPS: []float64{5, 20}, LatenciesMS: []float64{120, 300}, PowersMW: []float64{16000, 26000},
			Searchers: []string{"random-5"}, Noise: 0.03, Seed: 43, Parallel: 2, Presets: presets, PresetNames: names,
		})
		return rep
	}()
	if reflect.DeepEqual(c.Outcomes[0], a.Outcomes[2]) {
		t.Error("random-5 answered identically under another seed")
	}
}

func TestBenchErrors(t *testing.T) {
	tab := handTable(t)
	base := BenchSpec{Truth: tab, RatesRPS: []float64{1}, LatenciesMS: []float64{1000}, PowersMW: []float64{15000}, Searchers: []string{"gmd"}}
	for _, tc := range []struct {
		name string
		edit func(*BenchSpec)
		want string
	}{
		{"unknown searcher", func(s *BenchSpec) { s.Searchers = []string{"magic"} }, "unknown searcher"},
		{"bad random", func(s *BenchSpec) { s.Searchers = []string{"random-0"} }, "random-<K>"},
		{"bad gmd", func(s *BenchSpec) { s.Searchers = []string{"gmd-x3"} }, "gmd followed by"},
		{"bad budget", func(s *BenchSpec) { s.PowersMW = []float64{15} }, "power_mw"},
		{"bad pair", func(s *BenchSpec) { s.Pairs = []Pair{{"tr", "nope"}} }, "no inference workload"},
		{"bad noise", func(s *BenchSpec) { s.Noise = 2 }, "relative standard deviation"},
		{"no rates", func(s *BenchSpec) { s.RatesRPS = nil }, "at least one rate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			tc.edit(&s)
			if _, err := RunBench(context.Background(), s); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := RunBench(ctx, base); err == nil {
		t.Error("cancelled run: no error")
	}
}

// truthprofPair is the hand-checked table's pair.
func truthprofPair(t *testing.T) (*truthprof.PairTruth, error) {
	return truthprof.NewPairTruth(handTable(t), "tr", "in", 0, nil)
}
