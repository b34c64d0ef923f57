package server_test

import (
	"reflect"
	"slices"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
)

// fieldNames are a struct type's field names, but those named in skip.
func fieldNames(t reflect.Type, skip ...string) []string {
	var out []string
	for i := range t.NumField() {
		if n := t.Field(i).Name; !slices.Contains(skip, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// The wire's per-workload budgets and the controller's per-workload targets are the
// same fields (the wire adds the workload's name, which the targets hold as the map
// key), and the conversions copy each one both ways: a field added on one side only,
// or one the conversion forgets, fails here.
func TestStreamTargetConversionFieldForField(t *testing.T) {
	wire, tgt := fieldNames(reflect.TypeFor[api.StreamBudgets](), "Workload"), fieldNames(reflect.TypeFor[plan.StreamTarget]())
	if !slices.Equal(wire, tgt) {
		t.Fatalf("api.StreamBudgets has %v, plan.StreamTarget %v: keep them field for field", wire, tgt)
	}
	var in api.StreamBudgets
	v := reflect.ValueOf(&in).Elem()
	for i := range v.NumField() {
		if v.Type().Field(i).Name == "Workload" {
			v.Field(i).SetString("cam")
			continue
		}
		v.Field(i).SetFloat(float64(i) + 0.5) // every field its own value: a swap shows
	}
	st := server.StreamTargetOf(in)
	sv := reflect.ValueOf(st)
	for _, n := range tgt {
		if got, want := sv.FieldByName(n).Float(), v.FieldByName(n).Float(); got != want {
			t.Errorf("StreamTargetOf: %s = %v; want %v", n, got, want)
		}
	}
	if back := server.StreamBudgetsOf("cam", st); back != in {
		t.Errorf("round trip %+v → %+v → %+v", in, st, back)
	}
}

// The shared budgets: the wire's fields are the targets' with the rate said twice
// (rate_auto, and rate_rps reporting the measured rate), and the per-workload list the
// targets' map in name order.
func TestTargetsConversionFieldForField(t *testing.T) {
	wire, tgt := fieldNames(reflect.TypeFor[api.Budgets](), "RateAuto", "Warnings"), fieldNames(reflect.TypeFor[plan.Targets]())
	if !slices.Equal(wire, tgt) {
		t.Fatalf("api.Budgets has %v (but rate_auto and warnings), plan.Targets %v: keep them field for field", wire, tgt)
	}
	tg := plan.Targets{LatencyMS: 80, PowerMW: 30000, RateRPS: 12, Quantile: 0.95, RhoMax: 0.5,
		Streams: map[string]plan.StreamTarget{"yolo": {LatencyMS: 40, RateRPS: 7}, "bert": {TrainWeight: 2}}}
	b := server.BudgetsFrom(tg, 99)
	want := api.Budgets{LatencyMS: 80, PowerMW: 30000, RateRPS: 12, Quantile: 0.95, RhoMax: 0.5,
		Streams: []api.StreamBudgets{{Workload: "bert", TrainWeight: 2}, {Workload: "yolo", LatencyMS: 40, RateRPS: 7}}}
	if !reflect.DeepEqual(b, want) {
		t.Errorf("BudgetsFrom = %+v; want %+v", b, want)
	}
	if back := server.TargetsOf(b); !back.Equal(tg) {
		t.Errorf("round trip: %+v; want %+v", back, tg)
	}
	// An auto rate: the targets hold 0, the wire says auto and reports the measured one.
	tg.RateRPS = 0
	b = server.BudgetsFrom(tg, 99)
	if !b.RateAuto || b.RateRPS != 99 {
		t.Errorf("auto rate on the wire: %+v; want rate_auto and the measured 99", b)
	}
	if back := server.TargetsOf(b); back.RateRPS != 0 || !back.Equal(tg) {
		t.Errorf("auto rate back: %+v; want rate 0 (measured)", back)
	}
}

// An update on the wire and plan's update are the same fields (the wire adds whether the
// body named a workload, which ApplyUpdate answers itself), and TargetsUpdateOf copies
// each: the update rules live in plan alone (plan.Targets.Apply), so a field the
// conversion forgets would be an update silently dropped.
func TestTargetsUpdateConversionFieldForField(t *testing.T) {
	wire, upd := fieldNames(reflect.TypeFor[api.BudgetsUpdate](), "workloadGiven"), fieldNames(reflect.TypeFor[plan.TargetsUpdate]())
	if !slices.Equal(wire, upd) {
		t.Fatalf("api.BudgetsUpdate has %v, plan.TargetsUpdate %v: keep them field for field", wire, upd)
	}
	in := api.BudgetsUpdate{LatencyMS: ptr(1.5), PowerMW: ptr(2.5), RateRPS: ptr(3.5), RateAuto: ptr(true), Quantile: ptr(4.5),
		RhoMax: ptr(5.5), Workload: "cam", Shared: true, TrainWeight: ptr(6.5)}
	iv := reflect.ValueOf(in)
	for i := range iv.NumField() {
		if f := iv.Type().Field(i); f.IsExported() && iv.Field(i).IsZero() {
			t.Fatalf("the test leaves %s zero: give every field a value", f.Name)
		}
	}
	got := reflect.ValueOf(server.TargetsUpdateOf(in))
	for _, n := range upd {
		if !reflect.DeepEqual(got.FieldByName(n).Interface(), iv.FieldByName(n).Interface()) {
			t.Errorf("TargetsUpdateOf: %s = %v; want %v", n, got.FieldByName(n), iv.FieldByName(n))
		}
	}
}
