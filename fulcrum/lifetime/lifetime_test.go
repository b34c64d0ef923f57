package lifetime_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/lifetime"
	"github.com/fulcrum-edge/fulcrum/internal/testboard"
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
// same event log (times, modes, measured numbers) and the same figures twice — and
// another seed gives another run.
func TestSameSeedSameRun(t *testing.T) {
	a := run(t, pair("gmd", 2*time.Minute, 1))
	b := run(t, pair("gmd", 2*time.Minute, 1))
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
	sc := pair("gmd", 10*time.Minute, 1)
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
