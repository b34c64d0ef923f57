package controlapi

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
)

// The controller's own Heat, Caller, live refinement and a plan's training jobs (control imports nothing of the API) reach the
// wire field by field: with every field set, the API's JSON is the controller's, and the
// types have the same fields, so a field added on one side must be added on the other.
func TestHeatAndCallerReachTheWireWhole(t *testing.T) {
	at := time.Date(2026, 11, 25, 9, 30, 0, 0, time.UTC)
	load := 0.875
	h := &control.Heat{At: at, Zones: []control.ThermalZone{{Zone: "gpu-thermal", Celsius: 97.5, TripC: 99, Error: "EAGAIN"}},
		GPULoad: &load, GPUHz: 510000000, GPUFloorHz: 612000000, CPUKHz: 1497600, CPUFloorKHz: 1728000, Throttled: true,
		ThrottleReason: "GPU runs under its floor", ThrottledSince: &at, CapGPUHz: 510000000, CapCPUKHz: 1497600}
	m := api.Mode{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000}
	two := func(a, b int) []control.StreamBatch {
		return []control.StreamBatch{{Workload: "mobilenetv3-infer", Batch: a}, {Workload: "bert-base-infer", Batch: b}}
	}
	r := &control.RefineStatus{Mode: m, Batch: 4, Streams: two(4, 2), Pooled: control.Pooled{Windows: 12, TrainRatio: 1.03, InferRatio: 1.04, PowerRatio: 0.95, Repeats: 13,
		TrainRatios: []float64{1.03}, InferRatios: []float64{1.04, 0.98}},
		PFeasible: 0.9975, Confirmed: &control.RefineConfig{Mode: m, Batch: 4, Streams: two(4, 2)}, Trial: &control.RefineConfig{Mode: m, Batch: 8, Streams: two(8, 2)}, TrialUntil: at,
		Failed: []control.RefineFailure{{Mode: m, Batch: 16, Streams: two(16, 1), Count: 1, RetryAt: at, Why: "power over budget"}}}
	c := &control.Caller{UID: 1000, GID: 1000, PID: 42, Comm: "fulcrumctl", Groups: []int{27, 1001}}
	for _, pair := range []struct {
		name      string
		from, got any
	}{
		{"heat", h, toAPIHeat(h)},
		{"caller", c, toAPICaller(c)},
		{"caller back", c, fromAPICaller(*toAPICaller(c))},
		{"refine", r, toAPIRefine(r)},
		{"train jobs", []control.TrainChoice{{Workload: "resnet18-train", Batch: 32, MicroBatch: 8}, {Workload: "lstm-train", Batch: 20}}, toAPITrainJobs([]control.TrainChoice{{Workload: "resnet18-train", Batch: 32, MicroBatch: 8}, {Workload: "lstm-train", Batch: 20}})},
	} {
		want, _ := json.Marshal(pair.from)
		got, _ := json.Marshal(pair.got)
		if string(got) != string(want) {
			t.Errorf("%s: the wire's JSON differs from the controller's:\ngot  %s\nwant %s", pair.name, got, want)
		}
	}
	for _, types := range [][2]reflect.Type{
		{reflect.TypeFor[control.Heat](), reflect.TypeFor[api.Heat]()},
		{reflect.TypeFor[control.ThermalZone](), reflect.TypeFor[api.ThermalZone]()},
		{reflect.TypeFor[control.Caller](), reflect.TypeFor[api.Caller]()},
		{reflect.TypeFor[control.RefineStatus](), reflect.TypeFor[api.Refine]()},
		{reflect.TypeFor[control.Pooled](), reflect.TypeFor[api.RefinePooled]()},
		{reflect.TypeFor[control.RefineConfig](), reflect.TypeFor[api.RefineConfig]()},
		{reflect.TypeFor[control.RefineFailure](), reflect.TypeFor[api.RefineFailure]()},
		{reflect.TypeFor[control.TrainChoice](), reflect.TypeFor[api.PlanTrainJob]()},
	} {
		if types[0].NumField() != types[1].NumField() {
			t.Errorf("%s has %d fields, %s %d: copy the new one", types[0], types[0].NumField(), types[1], types[1].NumField())
		}
	}
	if toAPIHeat(nil) != nil || toAPICaller(nil) != nil || toAPIRefine(nil) != nil {
		t.Error("nil must stay nil (no heat reading, no caller)")
	}
}
