package server_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

func TestBudgetsApply(t *testing.T) {
	cur := api.Budgets{LatencyMS: 100, PowerMW: 30000, RateRPS: 40, Quantile: 0.99, RhoMax: 0.95}
	cases := []struct {
		name  string
		u     api.BudgetsUpdate
		want  api.Budgets
		field string // non-empty: the error's field
	}{
		{"latency only", api.BudgetsUpdate{LatencyMS: ptr(80.0)}, api.Budgets{LatencyMS: 80, PowerMW: 30000, RateRPS: 40, Quantile: 0.99, RhoMax: 0.95}, ""},
		{"no power budget", api.BudgetsUpdate{PowerMW: ptr(0.0)}, api.Budgets{LatencyMS: 100, RateRPS: 40, Quantile: 0.99, RhoMax: 0.95}, ""},
		{"rate auto drops the rate", api.BudgetsUpdate{RateAuto: ptr(true)}, api.Budgets{LatencyMS: 100, PowerMW: 30000, RateAuto: true, Quantile: 0.99, RhoMax: 0.95}, ""},
		{"rate_auto false alone", api.BudgetsUpdate{RateAuto: ptr(false)}, cur, "rate_auto"},
		{"rate_auto false with a rate", api.BudgetsUpdate{RateAuto: ptr(false), RateRPS: ptr(5.0)}, api.Budgets{LatencyMS: 100, PowerMW: 30000, RateRPS: 5, Quantile: 0.99, RhoMax: 0.95}, ""},
		{"power in watts", api.BudgetsUpdate{PowerMW: ptr(30.0)}, cur, "power_mw"},
		{"latency NaN-free", api.BudgetsUpdate{LatencyMS: ptr(0.01)}, cur, "latency_ms"},
		{"quantile 1", api.BudgetsUpdate{Quantile: ptr(1.0)}, cur, "quantile"},
		{"rho 0", api.BudgetsUpdate{RhoMax: ptr(0.0)}, cur, "rho_max"},
		{"rate 0", api.BudgetsUpdate{RateRPS: ptr(0.0)}, cur, "rate_rps"},
	}
	for _, tc := range cases {
		got, err := server.ApplyUpdate(tc.u, cur)
		if tc.field != "" {
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Field != tc.field || ae.Code != api.CodeBadBudget || ae.Status != 400 {
				t.Errorf("%s: %v, want a bad_budget on %s", tc.name, err, tc.field)
			}
			if !reflect.DeepEqual(got, cur) {
				t.Errorf("%s: a rejected update returned %+v", tc.name, got)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
		if err := server.ValidateBudgets(got); err != nil {
			t.Errorf("%s: result does not validate: %v", tc.name, err)
		}
	}
	if s := (api.Budgets{LatencyMS: 80, RateAuto: true, RateRPS: 40.2, Quantile: 0.999}).String(); s != "latency 80ms (p99.9), power none, rate auto (measured 40.2 req/s)" {
		t.Errorf("String = %q", s)
	}
	if err := server.ValidateBudgets(api.Budgets{LatencyMS: 80, Quantile: 0.99, RhoMax: 0.95}); err == nil || !strings.Contains(err.Error(), "rate_rps") {
		t.Errorf("a set rate of 0 validated: %v", err)
	}
}

// A stream's own budgets: set, changed field by field, dropped; board-wide fields and
// contradictions are refused naming the field, changing nothing.
func TestStreamBudgetsApply(t *testing.T) {
	cur := api.Budgets{LatencyMS: 100, PowerMW: 30000, RateAuto: true, Quantile: 0.99, RhoMax: 0.95}
	b, err := server.ApplyUpdate(api.BudgetsUpdate{Workload: "cam", LatencyMS: ptr(50.0)}, cur)
	if err != nil || !reflect.DeepEqual(b.Streams, []api.StreamBudgets{{Workload: "cam", LatencyMS: 50}}) || b.LatencyMS != 100 {
		t.Fatalf("set cam's latency: %+v, %v", b, err)
	}
	b, err = server.ApplyUpdate(api.BudgetsUpdate{Workload: "cam", RateRPS: ptr(30.0)}, b)
	if err != nil || !reflect.DeepEqual(b.Streams, []api.StreamBudgets{{Workload: "cam", LatencyMS: 50, RateRPS: 30}}) {
		t.Fatalf("set cam's rate: %+v, %v", b, err)
	}
	if err := server.ValidateBudgets(b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "stream cam: latency 50ms, rate 30 req/s") {
		t.Fatalf("String() = %q", b.String())
	}
	b2, err := server.ApplyUpdate(api.BudgetsUpdate{Workload: "cls", LatencyMS: ptr(200.0)}, b)
	if err != nil || len(b2.Streams) != 2 || len(b.Streams) != 1 {
		t.Fatalf("a second stream: %+v (the first budgets changed to %+v), %v", b2, b, err)
	}
	b3, err := server.ApplyUpdate(api.BudgetsUpdate{Workload: "cam", RateAuto: ptr(true)}, b2)
	if err != nil || b3.StreamOf("cam") != (api.StreamBudgets{Workload: "cam", LatencyMS: 50}) {
		t.Fatalf("cam back to the shared rate: %+v, %v", b3, err)
	}
	b4, err := server.ApplyUpdate(api.BudgetsUpdate{Workload: "cam", Shared: true}, b3)
	if err != nil || !reflect.DeepEqual(b4.Streams, []api.StreamBudgets{{Workload: "cls", LatencyMS: 200}}) {
		t.Fatalf("cam shared again: %+v, %v", b4, err)
	}
	for _, tc := range []struct {
		u     api.BudgetsUpdate
		field string
	}{
		{api.BudgetsUpdate{Workload: "cam", PowerMW: ptr(20000.0)}, "power_mw"},
		{api.BudgetsUpdate{Workload: "cam", Quantile: ptr(0.95)}, "quantile"},
		{api.BudgetsUpdate{Workload: "cam", RhoMax: ptr(0.5)}, "rho_max"},
		{api.BudgetsUpdate{Workload: "cam", LatencyMS: ptr(0.01)}, "latency_ms"},
		{api.BudgetsUpdate{Workload: "cam", RateRPS: ptr(-1.0)}, "rate_rps"},
		{api.BudgetsUpdate{Workload: "cam", Shared: true, LatencyMS: ptr(50.0)}, "shared"},
		{api.BudgetsUpdate{Workload: "cam", RateAuto: ptr(false)}, "rate_auto"},
		{api.BudgetsUpdate{Shared: true}, "workload"},
		{api.BudgetsUpdate{TrainWeight: ptr(2.0)}, "workload"},
		{api.BudgetsUpdate{Workload: "trainer", TrainWeight: ptr(0.0)}, "train_weight"},
		{api.BudgetsUpdate{Workload: "trainer", TrainWeight: ptr(1001.0)}, "train_weight"},
		{api.BudgetsUpdate{Workload: strings.Repeat("x", 129), LatencyMS: ptr(50.0)}, "workload"},
	} {
		got, err := server.ApplyUpdate(tc.u, b2)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Field != tc.field || ae.Status != 400 || !reflect.DeepEqual(got, b2) {
			t.Errorf("%+v: %v (%+v); want a bad_budget on %s changing nothing", tc.u, err, got, tc.field)
		}
	}
	bw, err := server.ApplyUpdate(api.BudgetsUpdate{Workload: "trainer", TrainWeight: ptr(2.5)}, b2)
	if err != nil || bw.StreamOf("trainer") != (api.StreamBudgets{Workload: "trainer", TrainWeight: 2.5}) || server.ValidateBudgets(bw) != nil {
		t.Fatalf("a training weight: %+v, %v", bw, err)
	}
	if !strings.Contains(bw.String(), "trainer: training weight 2.5") {
		t.Fatalf("String() = %q", bw.String())
	}
	if b1, _ := server.ApplyUpdate(api.BudgetsUpdate{Workload: "trainer", TrainWeight: ptr(1.0)}, bw); len(b1.Streams) != len(b2.Streams) {
		t.Fatalf("weight 1 (the default) kept an entry: %+v", b1.Streams)
	}
	full := cur
	for i := range sched.MaxStreamBudgets {
		full.Streams = append(full.Streams, api.StreamBudgets{Workload: strings.Repeat("s", i+1), LatencyMS: 50})
	}
	if _, err := server.ApplyUpdate(api.BudgetsUpdate{Workload: "one-more", LatencyMS: ptr(50.0)}, full); err == nil {
		t.Fatal("a stream budget past MaxStreamBudgets accepted")
	}
}
