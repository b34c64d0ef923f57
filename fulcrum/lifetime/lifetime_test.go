package lifetime_test

import (
	"context"
	"encoding/json"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/lifetime"
	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// pair is the real-time end-to-end test's pair (fulcrum/control/e2e): ResNet-18
// training beside ResNet-50 inference at 15 req/s within 400 ms, under 35 W.
func pair(searcher string, d time.Duration, seed int64) lifetime.Scenario {
	return lifetime.Scenario{Board: testboard.AGXOrin, Train: []string{"resnet18-train"},
		Infer:         []lifetime.Stream{{Workload: "resnet50-infer", RateRPS: 15, LatencyMS: 400}},
		PowerBudgetMW: 35000, Searcher: searcher, Duration: d, Seed: seed}
}

func run(t *testing.T, sc lifetime.Scenario) lifetime.Result {
	t.Helper()
	start := time.Now()
	res, err := lifetime.Run(context.Background(), sc)
	if err != nil {
		t.Fatalf("%s for %s (seed %d): %v", sc.Searcher, sc.Duration, sc.Seed, err)
	}
	t.Logf("%s, %s of virtual time, seed %d: %s real; %d events, first plan %.1f s, %d profiles, training %v samples, streams %+v, latency broken %.0f s, power broken %.1f s, searches cost %.0f s of training, training paused %.0f s",
		sc.Searcher, sc.Duration, sc.Seed, time.Since(start).Round(time.Millisecond), len(res.Events), res.FirstPlanS, res.ProfilesTaken,
		res.TrainSamples, res.Streams, res.LatencyBrokenS, res.PowerBrokenS, res.SearchS, res.TrainPausedS)
	return res
}

func eventLog(t *testing.T, evs []control.Event) string {
	t.Helper()
	raw, err := json.Marshal(evs)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// TestSameSeedSameRun: the daemon on virtual time is deterministic for a seed — the
// same event log (times, modes, measured numbers) and the same figures twice, on all
// cores and on one — and another seed gives another run.
func TestSameSeedSameRun(t *testing.T) {
	a := run(t, pair("gmd", 2*time.Minute, 1))
	procs := runtime.GOMAXPROCS(1)
	b := run(t, pair("gmd", 2*time.Minute, 1))
	runtime.GOMAXPROCS(procs)
	c := run(t, pair("gmd", 2*time.Minute, 2))
	if len(a.Events) < 5 {
		t.Fatalf("only %d events in 2 minutes: no search ran?", len(a.Events))
	}
	la, lb := eventLog(t, a.Events), eventLog(t, b.Events)
	if la != lb {
		for i := range min(len(a.Events), len(b.Events)) {
			if !reflect.DeepEqual(a.Events[i], b.Events[i]) {
				t.Fatalf("seed 1 twice: event %d differs:\n%+v\n%+v", i, a.Events[i], b.Events[i])
			}
		}
		t.Fatalf("seed 1 twice: %d and %d events", len(a.Events), len(b.Events))
	}
	a.Events, b.Events = nil, nil
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 1 twice, different results:\n%+v\n%+v", a, b)
	}
	if eventLog(t, c.Events) == la {
		t.Fatal("seeds 1 and 2 gave the same event log: the seed reaches nothing")
	}
}

// TestPairPlansAndHoldsTheBudgets: from an empty store at the default preset, GMD
// searches live, a plan is applied, and from then on the stream's p99 is within its
// budget and the board's power within its own.
func TestPairPlansAndHoldsTheBudgets(t *testing.T) {
	sc := pair("gmd", 5*time.Minute, 1)
	res := run(t, sc)
	if res.FirstPlanS < 0 {
		t.Fatalf("no plan applied in %s", sc.Duration)
	}
	if res.ProfilesTaken == 0 || res.ProfileBatches == 0 {
		t.Fatalf("a plan from an empty store without profiling: %d profile runs, %d profile batches", res.ProfilesTaken, res.ProfileBatches)
	}
	s := res.Streams[0]
	if s.P99AfterPlanMS <= 0 || s.P99AfterPlanMS > sc.Infer[0].LatencyMS {
		t.Errorf("p99 after the plan %.1f ms, budget %.0f ms", s.P99AfterPlanMS, sc.Infer[0].LatencyMS)
	}
	if s.Served < s.Requests*9/10 {
		t.Errorf("served %d of %d requests", s.Served, s.Requests)
	}
	if res.TrainSamples["resnet18-train"] <= 0 {
		t.Errorf("no training: %v", res.TrainSamples)
	}
	if res.MeanPowerMW > sc.PowerBudgetMW {
		t.Errorf("mean power %.0f mW over the %.0f mW budget", res.MeanPowerMW, sc.PowerBudgetMW)
	}
}

// TestPresetHoldsTheDefaultMode: the preset baseline runs no search and changes no
// mode; the workers still train and serve.
func TestPresetHoldsTheDefaultMode(t *testing.T) {
	res := run(t, pair("preset", 2*time.Minute, 1))
	if res.FirstPlanS >= 0 || res.ProfileBatches != 0 || res.SearchS != 0 {
		t.Fatalf("preset planned (%.1f s) or profiled (%d batches, %.0f s)", res.FirstPlanS, res.ProfileBatches, res.SearchS)
	}
	for _, e := range res.Events {
		if e.Kind == control.KindApply || e.Kind == control.KindProfile {
			t.Fatalf("preset: event %s: %s", e.Kind, e.Reason)
		}
	}
	if res.TrainSamples["resnet18-train"] <= 0 || res.Streams[0].Served == 0 {
		t.Fatalf("preset: training %v, served %d", res.TrainSamples, res.Streams[0].Served)
	}
}

// BenchmarkOnePairHour is issue 30's speed target: one pair for an hour of virtual time
// (docs/benchmarks.md "The daemon on virtual time"):
//
//	go test -run '^$' -bench OnePairHour -benchtime 1x ./fulcrum/lifetime/
func BenchmarkOnePairHour(b *testing.B) {
	for b.Loop() {
		start := time.Now()
		res, err := lifetime.Run(context.Background(), pair("gmd", time.Hour, 1))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "real_s/run")
		b.ReportMetric(res.DurationS/time.Since(start).Seconds(), "speedup")
	}
}

// truthOf is the simulator's own ground truth for the pair, over the table's core
// levels, with training times scaled by trainK and every power by powerK.
func truthOf(t *testing.T, trainK, powerK float64) *truth.Table {
	t.Helper()
	spec := testboard.Spec(t, testboard.AGXOrin)
	rows, err := sim.TruthRows(spec, testboard.Workloads(t), sim.TruthOptions{Workloads: []string{"resnet18-train", "resnet50-infer"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		if rows[i].Role == truth.Train {
			rows[i].TimeMS *= trainK
		}
		rows[i].PowerMW *= powerK
	}
	tab, err := truth.NewTable(rows)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// TestTruthTableAnswers: with a truth table the workers' turns and the board's power
// are the table's — twice as slow training there trains about half as much, 1.5× the
// power reads about 1.5× the power — and a search plans on the table's modes only.
func TestTruthTableAnswers(t *testing.T) {
	base := pair("preset", 2*time.Minute, 1)
	base.Truth = truthOf(t, 1, 1)
	slow, hot := base, base
	slow.Truth = truthOf(t, 2, 1)
	hot.Truth = truthOf(t, 1, 1.5)
	rb, rs, rh := run(t, base), run(t, slow), run(t, hot)
	ratio := rs.TrainSamples["resnet18-train"] / rb.TrainSamples["resnet18-train"]
	if ratio < 0.4 || ratio > 0.6 {
		t.Errorf("training twice as slow in the table trained %.2f× as much", ratio)
	}
	if k := rh.MeanPowerMW / rb.MeanPowerMW; k < 1.2 || k > 1.6 {
		t.Errorf("1.5× the table's power read %.2f× the mean power", k)
	}
	g := base
	g.Searcher, g.Duration = "gmd", 3*time.Minute
	rg := run(t, g)
	if rg.FirstPlanS < 0 {
		t.Fatal("no plan on the truth table")
	}
	modes := map[powermode.Mode]bool{}
	for _, m := range base.Truth.Modes() {
		modes[m] = true
	}
	for _, e := range rg.Events {
		if e.Mode != nil && !modes[*e.Mode] {
			t.Fatalf("event %s at %s, a mode the truth table does not have", e.Kind, e.Mode)
		}
	}
}

// TestPowerBudgetDropMidRun: the operator lowers the power budget from 35 W to 25 W
// three minutes in; fulcrumd takes it (a budget event), moves the board (an apply after
// it) and the 1 s power average is over the new budget for a few seconds at most.
func TestPowerBudgetDropMidRun(t *testing.T) {
	sc := pair("gmd", 6*time.Minute, 1)
	at := 3 * time.Minute
	sc.Changes = []lifetime.Change{{At: at, PowerBudgetMW: 25000}}
	res := run(t, sc)
	var budgetAt time.Time
	var before, after *powermode.Mode
	for _, e := range res.Events {
		since := e.Time.Sub(res.Events[0].Time)
		switch {
		case e.Kind == control.KindBudget && since >= at && budgetAt.IsZero():
			budgetAt = e.Time
		case e.Kind == control.KindApply && e.Mode != nil && budgetAt.IsZero():
			before = e.Mode
		case e.Kind == control.KindApply && e.Mode != nil && after == nil:
			after = e.Mode
		}
	}
	if budgetAt.IsZero() || before == nil || after == nil || *after == *before {
		t.Fatalf("budget event at %v; mode before %v, after %v: want the board moved after the drop", budgetAt, before, after)
	}
	if res.PowerBrokenS > 10 {
		t.Errorf("power over budget %.1f s", res.PowerBrokenS)
	}
	// The two stretches' samples are the run's, each trained some.
	total := 0.0
	for _, n := range res.TrainSamples {
		total += n
	}
	if p := res.PowerOneSecond; p.MeanMW < 0.9*res.MeanPowerMW || p.MeanMW > 1.1*res.MeanPowerMW || p.P995MW < p.MeanMW || p.MaxMW < p.P995MW {
		t.Errorf("1 s average power %+v against a mean of %.0f mW", p, res.MeanPowerMW)
	}
	if len(res.PhaseSamples) != 2 || res.PhaseSamples[0] <= 0 || res.PhaseSamples[1] <= 0 || res.PhaseSamples[0]+res.PhaseSamples[1] != total {
		t.Errorf("phase samples %v, trained %v in all", res.PhaseSamples, total)
	}
}

// TestLateAfterPlanUnderTheBudgetOfTheMoment: a request is late against the budget in
// force when it was served, not the one at the end of the run: a budget cut to 5 ms ten
// seconds before the end makes the requests of those seconds late, not the whole run's
// (lifeevents read every request against the end budget, wrong with a budget tour).
func TestLateAfterPlanUnderTheBudgetOfTheMoment(t *testing.T) {
	sc := pair("gmd", 3*time.Minute, 1)
	sc.Changes = []lifetime.Change{{At: 170 * time.Second, LatencyMS: 5}}
	res := run(t, sc)
	s := res.Streams[0]
	if s.Late == 0 || s.LateAfterPlan > s.Late || s.ServedAfterPlan < 1000 || s.LateAfterPlan > s.ServedAfterPlan/4 {
		t.Fatalf("%d late in all, %d of %d after the plan: want the late counted against the budget of their moment", s.Late, s.LateAfterPlan, s.ServedAfterPlan)
	}
}

// TestTwoStreamsTwoJobs: several streams and training jobs — the pooled search, one
// plan for all of them — and each job trains, each stream is served within its own
// budget after the plan.
func TestTwoStreamsTwoJobs(t *testing.T) {
	sc := lifetime.Scenario{Board: testboard.AGXOrin, Train: []string{"resnet18-train", "mobilenetv3-train"},
		Infer:         []lifetime.Stream{{Workload: "resnet50-infer", RateRPS: 8, LatencyMS: 400}, {Workload: "yolov8n-infer", RateRPS: 10, LatencyMS: 300}},
		PowerBudgetMW: 35000, Searcher: "gmd", Duration: 4 * time.Minute, Seed: 1}
	res := run(t, sc)
	if res.FirstPlanS < 0 {
		t.Fatal("no plan for two streams and two jobs")
	}
	for _, n := range sc.Train {
		if res.TrainSamples[n] <= 0 {
			t.Errorf("job %s did not train: %v", n, res.TrainSamples)
		}
	}
	for i, s := range res.Streams {
		if s.Served == 0 || s.P99AfterPlanMS > sc.Infer[i].LatencyMS {
			t.Errorf("stream %s: served %d, p99 after the plan %.1f ms, budget %.0f ms", s.Workload, s.Served, s.P99AfterPlanMS, sc.Infer[i].LatencyMS)
		}
	}
}
