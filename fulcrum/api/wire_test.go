package api

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"testing"
	"time"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/*.golden.json from the current wire types")

// goldenStatus sets every field of a status response, so that any change to the JSON
// shape of GET /v1/status (a renamed tag, a dropped or added field, a changed type)
// changes its encoding.
func goldenStatus() Status {
	at := time.Date(2026, 11, 25, 9, 30, 0, 0, time.UTC)
	mode := Mode{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000}
	load := 0.875
	q := Quantiles{Count: 1190, P50MS: 21.5, P95MS: 60, P99MS: 77.25, MaxMS: 90}
	return Status{
		Version: "v1.2.3", Board: "sim:agx-orin-64gb", Mode: mode, ModeHeld: true,
		Budgets: Budgets{LatencyMS: 100, PowerMW: 30000, RateRPS: 12.5, RateAuto: true, Quantile: 0.99, RhoMax: 0.95,
			Streams: []StreamBudgets{{Workload: "mobilenet", LatencyMS: 50, RateRPS: 30}, {Workload: "resnet18", TrainWeight: 2}}},
		Plan: &Plan{Mode: mode, InferBatch: 4, Feasible: false, Binding: "power", PredLatencyMS: 80.5, PredPowerMW: 29000,
			PredThroughputSamplesPerS: 310.25, Rho: 0.3, Source: "gmd", Reason: "after gmd", At: at, ApplyError: "ina3221: busy"},
		Power: &Power{TotalMW: 31000, Avg1sMW: 30500, Avg1sSamples: 10, Rails: []Rail{{Name: "VDD_GPU_SOC", PowerMW: 9000}}, At: at},
		Heat: &Heat{At: at, Zones: []ThermalZone{{Zone: "gpu-thermal", Celsius: 97.5, TripC: 99}, {Zone: "cv0-thermal", Error: "EAGAIN"}},
			GPULoad: &load, GPUHz: 510000000, GPUFloorHz: 612000000, CPUKHz: 1497600, CPUFloorKHz: 1728000, Throttled: true,
			ThrottleReason: "GPU runs 510 MHz under its 612 MHz floor", ThrottledSince: &at, CapGPUHz: 510000000, CapCPUKHz: 1497600},
		Refine: &Refine{Mode: mode, Batch: 4, Streams: []RefineStream{{Workload: "mobilenet", Batch: 4}},
			Pooled:    RefinePooled{Windows: 12, TrainRatio: 1.03, InferRatio: 1.04, PowerRatio: 0.95, Repeats: 13, TrainRatios: []float64{1.03}, InferRatios: []float64{1.04}},
			PFeasible: 0.9975, Confirmed: &RefineConfig{Mode: mode, Batch: 4, Streams: []RefineStream{{Workload: "mobilenet", Batch: 4}}},
			Trial: &RefineConfig{Mode: mode, Batch: 8, Streams: []RefineStream{{Workload: "mobilenet", Batch: 8}}}, TrialUntil: at,
			Failed: []RefineFailure{{Mode: mode, Batch: 16, Streams: []RefineStream{{Workload: "mobilenet", Batch: 16}}, Count: 1, RetryAt: at, Why: "power 31.0 W (1 s average) over the 30.0 W budget"}}},
		Workers: []Worker{{ID: "w1", Role: "infer", Workload: "mobilenet", Batch: 4, BatchSizes: []int{1, 2, 4}, PID: 4242, UID: 1000, Waiting: true, Queued: 3}},
		Workloads: []WorkloadStats{{Workload: "mobilenet", Role: "infer", LiveWorkers: 1, Requests: 1200, Served: 1190, Failed: 2,
			DeadlineMisses: 8, Latency: q, LatencyRecent: q, ArrivalRateHz: 40.2, ExpectedBatchMS: map[int]float64{1: 5.5, 4: 12},
			Minibatches: 7, Samples: 224, ThroughputPerS: 99.5, ExpectedTrainMS: 101, TurnWait: q, Overruns: 1, StarvedAdmits: 2,
			DurationsClamped: 3, HoldExpired: 4, LatencyBudgetMS: 50}},
		Streams: []StreamStatus{{Workload: "mobilenet", Batch: 4, LatencyBudgetMS: 50, OwnBudget: true, RateRPS: 30, RateFixed: true,
			PlanRateRPS: 30, PredLatencyMS: 44.5, MeasuredP99MS: 41.25, ServedRecent: 800, Rho: 0.2}},
		TrainingPaused: true, Degraded: true, DegradedReason: "power unreadable", Optimizing: "gmd",
		Turns: 5000, Overruns: 3, Profiles: 42, StartedAt: at, UptimeS: 3600.5,
	}
}

func checkGolden(t *testing.T, name string, v any) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := "testdata/" + name + ".golden.json"
	if *updateGolden {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./fulcrum/api -run TestWireGolden -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the JSON of %s changed: this changes the HTTP API (docs/api.md). If that is intended, run go test ./fulcrum/api -run TestWireGolden -update and say so in docs/api.md.\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

func TestWireGolden(t *testing.T) {
	checkGolden(t, "status", goldenStatus())
	checkGolden(t, "import", ImportResponse{Added: 3, Unchanged: 2, Replaced: 1})
}
