package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/apitest"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
)

// An empty or null workload used to set the shared (global) budgets: it is refused and
// the budgets in force are kept.
func TestBudgetsEmptyWorkloadRefused(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	sock := apitest.Serve(t, server.Config{Policy: server.PolicyFunc(func(api.Caller) error { return nil })}, fake)
	for _, body := range []string{`{"workload": "", "latency_ms": 50}`, `{"workload": null, "latency_ms": 50}`} {
		code, b := rawDo(t, sock, http.MethodPut, "/v1/budgets", body)
		if code != http.StatusBadRequest {
			t.Fatalf("PUT %s = %d %s, want 400", body, code, b)
		}
		if e := errorOf(t, b); e.Field != "workload" || !strings.Contains(e.Message, "leave workload out") {
			t.Fatalf("PUT %s: error %+v, want one naming workload", body, e)
		}
	}
	got, err := fake.Budgets(context.Background())
	if err != nil || got.LatencyMS != 100 {
		t.Fatalf("global latency after the refused updates = %v (%v), want 100 kept", got.LatencyMS, err)
	}
}

// A training weight of 5e-324 was "above 0" and starved its job; weights below 0.01
// are refused, 0.01 is the smallest taken.
func TestTrainWeightBounds(t *testing.T) {
	cur := api.Budgets{LatencyMS: 100, Quantile: 0.99, RhoMax: 0.95, RateAuto: true}
	for _, w := range []float64{5e-324, 0.001, 0.0099, -1, 1000.5} {
		if _, err := server.ApplyUpdate(api.BudgetsUpdate{Workload: "trainer", TrainWeight: ptr(w)}, cur); err == nil {
			t.Errorf("train_weight %v accepted", w)
		}
	}
	for _, w := range []float64{0.01, 0.5, 1000} {
		if _, err := server.ApplyUpdate(api.BudgetsUpdate{Workload: "trainer", TrainWeight: ptr(w)}, cur); err != nil {
			t.Errorf("train_weight %v: %v", w, err)
		}
	}
}

// A misspelt workload and a field that does not fit the workload's role are applied
// (budgets for workloads not registered yet are normal after a restart) but the reply
// warns, naming the registered workloads.
func TestBudgetsWarnings(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	fake.SetMeasurements([]api.Worker{
		{ID: "w1", Role: "infer", Workload: "yolo-infer"},
		{ID: "w2", Role: "train", Workload: "resnet-train"},
	}, nil, nil)
	c := client.New(apitest.Serve(t, server.Config{Policy: server.PolicyFunc(func(api.Caller) error { return nil })}, fake))
	defer c.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		u    api.BudgetsUpdate
		want string // "" for no warning
	}{
		{api.BudgetsUpdate{Workload: "yolo-infr", LatencyMS: ptr(50.0)}, `no worker has registered workload "yolo-infr"`},
		{api.BudgetsUpdate{Workload: "resnet-train", LatencyMS: ptr(50.0)}, "is a training workload"},
		{api.BudgetsUpdate{Workload: "yolo-infer", TrainWeight: ptr(2.0)}, "is an inference stream"},
		{api.BudgetsUpdate{Workload: "yolo-infer", LatencyMS: ptr(40.0)}, ""},
		{api.BudgetsUpdate{Workload: "resnet-train", TrainWeight: ptr(2.0)}, ""},
		{api.BudgetsUpdate{LatencyMS: ptr(90.0)}, ""},
	} {
		b, err := c.SetBudgets(ctx, tc.u)
		if err != nil {
			t.Fatalf("%+v: %v", tc.u, err)
		}
		if tc.want == "" {
			if len(b.Warnings) != 0 {
				t.Errorf("%+v: warnings %q, want none", tc.u, b.Warnings)
			}
			continue
		}
		if len(b.Warnings) != 1 || !strings.Contains(b.Warnings[0], tc.want) ||
			!strings.Contains(b.Warnings[0], "yolo-infer (infer), resnet-train (train)") && !strings.Contains(b.Warnings[0], "resnet-train (train), yolo-infer (infer)") {
			t.Errorf("%+v: warnings %q, want one saying %q and naming the registered workloads", tc.u, b.Warnings, tc.want)
		}
	}
	// The warning is not kept with the budgets.
	b, err := c.Budgets(ctx)
	if err != nil || len(b.Warnings) != 0 {
		t.Fatalf("GET /v1/budgets = %+v (%v): no warnings expected", b, err)
	}
	raw, _ := json.Marshal(b)
	if strings.Contains(string(raw), "warnings") {
		t.Fatalf("GET /v1/budgets carries warnings: %s", raw)
	}
}
