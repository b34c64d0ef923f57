package bench

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/truthprof"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/search"
	"github.com/fulcrum-edge/fulcrum/truth"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// The scoring arithmetic against values worked out by hand: the ratio of the sums, the
// mean and p5 of the per-configuration ratios, the broken shares, the apart row.
func TestSummariseLifetimeByHand(t *testing.T) {
	const durS = 100
	outs := []LifeOutcome{
		{IdealSamples: 1000, LifeResult: LifeResult{TrainSamples: 500, LatencyBrokenS: 10, Planned: true, FirstPlanS: 5, ProfilesTaken: 10, SearchS: 4}},
		{IdealSamples: 3000, LifeResult: LifeResult{TrainSamples: 3000, PowerBrokenS: 20, Planned: true, FirstPlanS: 15, ProfilesTaken: 20, SearchS: 6}},
		// No room-keeping configuration: apart, whatever it trained.
		{IdealSamples: 0, LifeResult: LifeResult{TrainSamples: 200, LatencyBrokenS: 50, Planned: true, FirstPlanS: 99, ProfilesTaken: 2}},
		// Never planned, trained nothing, and its run failed.
		{IdealSamples: 1000, Err: errors.New("boom")},
	}
	st := summariseLifetime("x", outs, durS)
	want := LifetimeStats{
		Name:          "x",
		LifetimeRatio: 3500.0 / 5000, // (500+3000+0)/(1000+3000+1000)
		MeanRatio:     0.5,           // (0.5+1+0)/3
		P5Ratio:       0,             // nearest rank of 3 sorted: the first
		TrainSamples:  3500, IdealSamples: 5000,
		LatencyBrokenPct: 100 * 10.0 / 300, PowerBrokenPct: 100 * 20.0 / 300,
		MeanFirstPlanS: 10, MaxFirstPlanS: 15, NoPlan: 1,
		MeanProfiles: 8, MaxProfiles: 20, // (10+20+2+0)/4
		MeanSearchS: 2.5, SearchPct: 2.5, // (4+6)/4 of 100 s
		Apart:  LifetimeApart{Configs: 1, TrainSamples: 200, LatencyBrokenPct: 50},
		Errors: 1,
	}
	if !near(st.LifetimeRatio, want.LifetimeRatio) || !near(st.LatencyBrokenPct, want.LatencyBrokenPct) || !near(st.PowerBrokenPct, want.PowerBrokenPct) {
		t.Fatalf("ratio %v lat %v pow %v, want %v %v %v", st.LifetimeRatio, st.LatencyBrokenPct, st.PowerBrokenPct, want.LifetimeRatio, want.LatencyBrokenPct, want.PowerBrokenPct)
	}
	st.LifetimeRatio, st.LatencyBrokenPct, st.PowerBrokenPct = want.LifetimeRatio, want.LatencyBrokenPct, want.PowerBrokenPct
	if !reflect.DeepEqual(st, want) {
		t.Fatalf("got  %+v\nwant %+v", st, want)
	}

	// p5 over 21 ratios 0, 0.05, …, 1: the nearest rank ⌈0.05·21⌉ = 2, the second smallest.
	outs = nil
	for i := range 21 {
		outs = append(outs, LifeOutcome{IdealSamples: 100, LifeResult: LifeResult{TrainSamples: float64(5 * i)}})
	}
	st = summariseLifetime("y", outs, durS)
	if !near(st.P5Ratio, 0.05) || !near(st.MeanRatio, 0.5) || !near(st.LifetimeRatio, 0.5) || st.NoPlan != 21 {
		t.Fatalf("21 ratios: p5 %v mean %v ratio %v no plan %d, want 0.05 0.5 0.5 21", st.P5Ratio, st.MeanRatio, st.LifetimeRatio, st.NoPlan)
	}
	// The ratio of sums weighs configurations by what they could do; the mean does not.
	st = summariseLifetime("z", []LifeOutcome{
		{IdealSamples: 100, LifeResult: LifeResult{TrainSamples: 100}},
		{IdealSamples: 900, LifeResult: LifeResult{TrainSamples: 0}},
	}, durS)
	if !near(st.LifetimeRatio, 0.1) || !near(st.MeanRatio, 0.5) {
		t.Fatalf("ratio of sums %v (want 0.1), mean %v (want 0.5)", st.LifetimeRatio, st.MeanRatio)
	}
}

func TestPhasesOf(t *testing.T) {
	changes := []LifeChange{
		{At: 45 * time.Minute, PowerMW: 15000},
		{At: 30 * time.Minute, RateFactor: 2},
		{At: 2 * time.Hour, LatencyMS: 50}, // after the end: never reached
	}
	got := phasesOf(time.Hour, 10, 200, 30000, changes)
	want := []lifePhase{
		{lenS: 1800, rate: 10, latMS: 200, powMW: 30000},
		{lenS: 900, rate: 20, latMS: 200, powMW: 30000},
		{lenS: 900, rate: 20, latMS: 200, powMW: 15000},
	}
	if len(got) != len(want) {
		t.Fatalf("phases %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("phase %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if got := phasesOf(time.Hour, 10, 200, 30000, nil); len(got) != 1 || got[0].lenS != 3600 {
		t.Fatalf("no changes: %+v", got)
	}
}

// lifeTable is benchgen's small board with a second inference workload.
func lifeTable(t *testing.T) *truth.Table {
	t.Helper()
	return streamsTable(t)
}

// standIn is a deterministic stand-in for the harness, for testing the sweep and the
// scoring only: its "training" is a fixed fraction of the configuration's power budget
// and depends on the seed, so that a run handed the wrong seed or budgets shows.
type standIn struct {
	mu   sync.Mutex
	runs []LifeRun
	fail string // a method whose runs fail
}

func (s *standIn) run(_ context.Context, r LifeRun) (LifeResult, error) {
	s.mu.Lock()
	s.runs = append(s.runs, r)
	s.mu.Unlock()
	if r.Method == s.fail {
		return LifeResult{TrainSamples: 1e9}, errors.New("stand-in failure")
	}
	return LifeResult{TrainSamples: r.PowerMW/1000*r.Duration.Seconds() + float64(r.Seed%7), Planned: true, FirstPlanS: float64(len(r.Method)), ProfilesTaken: len(r.Infer), SearchS: 1}, nil
}

func lifeSpec(tab *truth.Table, run LifeRunner) LifetimeSpec {
	return LifetimeSpec{Truth: tab, Board: "small", Pairs: []Pair{{"net-train", "net-infer"}, {"net-train", "cls-infer"}},
		RatesRPS: []float64{5, 40}, LatenciesMS: []float64{40, 300}, PowersMW: []float64{9000, 26000},
		Methods: []string{"gmd", "preset", "oracle-m3"}, Duration: time.Hour, Noise: 0.03, Seed: 1,
		Admission: plan.Admission{MarginMS: 5, DevRel: 0.06}, Run: run}
}

// The sweep: every configuration run once per harness method with the same seed across
// methods (common random numbers) and its own across configurations; the denominator is
// the room-keeping optimum (the margin oracle at 0 %) × D; the oracle row is computed,
// not run; results and JSON do not depend on Parallel.
func TestRunLifetimeSweep(t *testing.T) {
	tab := lifeTable(t)
	s1 := &standIn{}
	spec := lifeSpec(tab, s1.run)
	spec.Parallel = 1
	r1, err := RunLifetime(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if r1.Configs != 16 || r1.Sets != 2 || len(s1.runs) != 32 {
		t.Fatalf("%d configurations in %d sets, %d runs; want 16, 2, 32 (gmd and preset; the oracle is not run)", r1.Configs, r1.Sets, len(s1.runs))
	}
	seeds := map[string]map[int64]bool{}
	for _, r := range s1.runs {
		key := r.Train[0] + ":" + r.Infer[0].Workload + "@" + strings.Join([]string{ff(r.Infer[0].RateRPS), ff(r.Infer[0].LatencyMS), ff(r.PowerMW)}, ",")
		if seeds[key] == nil {
			seeds[key] = map[int64]bool{}
		}
		seeds[key][r.Seed] = true
		if r.Duration != time.Hour || r.Board != "small" || r.Noise != 0.03 || r.Truth != tab {
			t.Fatalf("run %+v: not the spec's duration, board, noise or truth", r)
		}
	}
	all := map[int64]bool{}
	for k, s := range seeds {
		if len(s) != 1 {
			t.Fatalf("%s: methods got different seeds %v; want one per configuration", k, s)
		}
		for x := range s {
			all[x] = true
		}
	}
	if len(all) != 16 {
		t.Fatalf("%d distinct seeds over 16 configurations", len(all))
	}

	// Denominators by hand: the margin oracle at 0 % with the room, × 3600 s.
	apart := 0
	for ci, o := range r1.Outcomes[0] {
		pair := spec.Pairs[ci/8]
		pt, err := truthprof.NewPairTruth(tab, pair.Train, pair.Infer, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		rate, lat, pow := spec.RatesRPS[ci/4%2], spec.LatenciesMS[ci/2%2], spec.PowersMW[ci%2]
		b := plan.Budgets{RateRPS: rate, LatencyMS: lat, PowerMW: pow}.WithDefaults()
		res, err := (&MarginOracle{pt: pt, Admission: spec.Admission}).Search(context.Background(), search.Problem{Budgets: b}, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := 0.0
		if res.Feasible {
			want = res.Choice.ThroughputSPS * 3600
		} else {
			apart++
		}
		if !near(o.IdealSamples, want) {
			t.Fatalf("configuration %d (%s): ideal %v, want %v", ci, o.Config, o.IdealSamples, want)
		}
		// The one-shot oracle keeps a 3 % margin: never above the room-keeping optimum,
		// and with no change of budgets it breaks none.
		or := r1.Outcomes[2][ci]
		if or.TrainSamples > o.IdealSamples*(1+1e-12) || or.LatencyBrokenS != 0 || or.PowerBrokenS != 0 || or.ProfilesTaken != 0 {
			t.Fatalf("configuration %d: oracle-m3 %+v over ideal %v or breaking budgets", ci, or, o.IdealSamples)
		}
	}
	if len(r1.Configurations) != 16 {
		t.Fatalf("%d configuration rows, want 16", len(r1.Configurations))
	}
	for ci, row := range r1.Configurations {
		if len(row.Runs) != 3 || row.Runs[2].Method != "oracle-m3" || row.IdealSamples != r1.Outcomes[0][ci].IdealSamples {
			t.Fatalf("row %d: %+v", ci, row)
		}
		if (row.Runs[0].Ratio == nil) != (row.IdealSamples == 0) || (row.Runs[0].Ratio != nil && !near(*row.Runs[0].Ratio, row.Runs[0].TrainSamples/row.IdealSamples)) {
			t.Fatalf("row %d: ratio %v with ideal %v and samples %v; want it absent exactly where the configuration is apart", ci, row.Runs[0].Ratio, row.IdealSamples, row.Runs[0].TrainSamples)
		}
	}
	if apart == 0 || apart == 16 || r1.ConfigsApart != apart {
		t.Fatalf("%d configurations apart (report: %d); the sweep should have some of each", apart, r1.ConfigsApart)
	}
	if r1.Methods[2].Source != "truth" || r1.Methods[0].Source != "harness" || r1.Methods[2].LifetimeRatio <= 0 || r1.Methods[2].LifetimeRatio > 1 {
		t.Fatalf("rows %+v", r1.Methods)
	}

	s2 := &standIn{}
	spec.Run, spec.Parallel = s2.run, 2
	r2, err := RunLifetime(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	j1, _ := json.Marshal(r1)
	j2, _ := json.Marshal(r2)
	if string(j1) != string(j2) {
		t.Fatalf("parallel 1 and 2 differ:\n%s\n%s", j1, j2)
	}
}

func ff(v float64) string { b, _ := json.Marshal(v); return string(b) }

// A power drop halfway: the denominator follows the budgets, and the one-shot oracle,
// holding its t = 0 decision, breaks the lowered power budget where its choice drew more.
func TestRunLifetimePowerDrop(t *testing.T) {
	tab := lifeTable(t)
	spec := lifeSpec(tab, nil)
	spec.Methods = []string{"oracle-m3"}
	spec.PowersMW = []float64{40000}
	spec.Pairs = spec.Pairs[:1]
	base, err := RunLifetime(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	spec.Changes = []LifeChange{{At: 30 * time.Minute, PowerMW: 9000}}
	drop, err := RunLifetime(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	broke := false
	for ci := range drop.Outcomes[0] {
		b, d := base.Outcomes[0][ci], drop.Outcomes[0][ci]
		if d.IdealSamples > b.IdealSamples*(1+1e-12) {
			t.Fatalf("%s: a lower power budget raised the ideal %v → %v", d.Config, b.IdealSamples, d.IdealSamples)
		}
		if d.PowerBrokenS != 0 && d.PowerBrokenS != 1800 {
			t.Fatalf("%s: power broken %v s; the held choice breaks it for the whole second half or not at all", d.Config, d.PowerBrokenS)
		}
		broke = broke || d.PowerBrokenS == 1800
		// The held decision trains as before: samples unchanged.
		if !near(d.TrainSamples, b.TrainSamples) {
			t.Fatalf("%s: held decision trained %v, before the drop %v", d.Config, d.TrainSamples, b.TrainSamples)
		}
	}
	if !broke {
		t.Fatal("no held decision broke a 9 W budget chosen at 40 W")
	}
	if drop.Changes[0].AtS != 1800 {
		t.Fatalf("changes in the report: %+v", drop.Changes)
	}
}

// Failed runs count as no training and are counted; bad specs are refused saying what to give.
func TestRunLifetimeErrors(t *testing.T) {
	tab := lifeTable(t)
	s := &standIn{fail: "preset"}
	spec := lifeSpec(tab, s.run)
	rep, err := RunLifetime(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Methods[1].Errors != 16 || rep.Methods[1].TrainSamples != 0 || rep.Methods[0].Errors != 0 {
		t.Fatalf("rows %+v", rep.Methods)
	}
	for _, tc := range []struct {
		edit func(*LifetimeSpec)
		want string
	}{
		{func(s *LifetimeSpec) { s.Methods = []string{"random-15"} }, "gmd, als or preset"},
		{func(s *LifetimeSpec) { s.Methods = []string{"gmd", "gmd"} }, "twice"},
		{func(s *LifetimeSpec) { s.Duration = 0 }, "e.g. 1h"},
		{func(s *LifetimeSpec) { s.Run = nil }, "no runner"},
		{func(s *LifetimeSpec) { s.Changes = []LifeChange{{At: 0, RateFactor: 2}} }, "positive time"},
		{func(s *LifetimeSpec) { s.Streams = 2 }, "streams and jobs alone"},
	} {
		sp := lifeSpec(tab, s.run)
		tc.edit(&sp)
		if _, err := RunLifetime(context.Background(), sp); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error saying %q", err, tc.want)
		}
	}
}

// Two streams: the denominator is the several-stream margin oracle's training summed over
// the jobs, and every stream of a run carries the configuration's rate and budget.
func TestRunLifetimeStreams(t *testing.T) {
	tab := lifeTable(t)
	s := &standIn{}
	spec := lifeSpec(tab, s.run)
	spec.Pairs, spec.Streams = nil, 2
	rep, err := RunLifetime(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sets != len(combinations(tab.Workloads(truth.Infer), 2))*len(tab.Workloads(truth.Train)) || rep.Streams != 2 {
		t.Fatalf("%d sets, %d streams", rep.Sets, rep.Streams)
	}
	for _, r := range s.runs {
		if len(r.Infer) != 2 || r.Infer[0].RateRPS != r.Infer[1].RateRPS || r.Infer[0].LatencyMS != r.Infer[1].LatencyMS {
			t.Fatalf("run streams %+v", r.Infer)
		}
	}
	first := rep.Outcomes[0][0]
	mt, err := truthprof.NewMultiTruth(tab, []string{tab.Workloads(truth.Train)[0]}, tab.Workloads(truth.Infer)[:2], nil)
	if err != nil {
		t.Fatal(err)
	}
	b := plan.MultiBudgets{PowerMW: spec.PowersMW[0]}
	for _, n := range mt.Infers {
		b.Streams = append(b.Streams, plan.StreamBudget{Name: n, RateRPS: spec.RatesRPS[0], LatencyMS: spec.LatenciesMS[0]})
	}
	e, found, err := MultiMarginOracle(mt, b, 0, spec.Admission)
	if err != nil {
		t.Fatal(err)
	}
	want := 0.0
	if found {
		for _, x := range e.TrainSPS {
			want += x
		}
		want *= 3600
	}
	if !near(first.IdealSamples, want) {
		t.Fatalf("%s: ideal %v, want %v", first.Config, first.IdealSamples, want)
	}
}
