package server_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// fill sets every exported field of the struct v points to to a non-zero value.
func fill(t *testing.T, v reflect.Value) {
	t.Helper()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Int, reflect.Int64:
			f.SetInt(7)
		case reflect.Uint64:
			f.SetUint(7)
		case reflect.Float64:
			f.SetFloat(7.5)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
			f.Index(0).SetInt(7)
		case reflect.Map:
			f.Set(reflect.MakeMap(f.Type()))
			f.SetMapIndex(reflect.ValueOf(7), reflect.ValueOf(7.5))
		case reflect.Struct:
			fill(t, f)
		default:
			t.Fatalf("fill: field %s of kind %s", v.Type().Field(i).Name, f.Kind())
		}
	}
}

// assertFull fails for any zero field of the struct v: a conversion that forgot one.
func assertFull(t *testing.T, v reflect.Value) {
	t.Helper()
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() == reflect.Struct {
			assertFull(t, f)
			continue
		}
		if f.IsZero() {
			t.Errorf("%s.%s is not copied by the conversion", v.Type().Name(), v.Type().Field(i).Name)
		}
	}
}

// The conversions copy every field of the internal types: a field added to the
// scheduler's or the store's type must be added here (or left out on purpose).
func TestWireConversionsCopyEveryField(t *testing.T) {
	var w sched.WorkerInfo
	fill(t, reflect.ValueOf(&w).Elem())
	var ws sched.WorkloadStats
	fill(t, reflect.ValueOf(&ws).Elem())
	var ir store.ImportResult
	fill(t, reflect.ValueOf(&ir).Elem())
	assertFull(t, reflect.ValueOf(server.WorkersFrom([]sched.WorkerInfo{w})[0]))
	assertFull(t, reflect.ValueOf(server.WorkloadsFrom([]sched.WorkloadStats{ws})[0]))
	assertFull(t, reflect.ValueOf(server.ImportResponseFrom(ir)))
	if reflect.TypeFor[sched.WorkerInfo]().NumField() != reflect.TypeFor[api.Worker]().NumField() ||
		reflect.TypeFor[sched.WorkloadStats]().NumField() != reflect.TypeFor[api.WorkloadStats]().NumField() ||
		reflect.TypeFor[store.ImportResult]().NumField() != reflect.TypeFor[api.ImportResponse]().NumField() {
		t.Error("an internal type gained or lost a field: decide whether the API shows it")
	}
	if server.WorkersFrom(nil) != nil || server.WorkloadsFrom(nil) != nil {
		t.Error("nil must stay nil (the JSON says null, as before)")
	}
}

// GET /v1/profiles answers the store's own JSON: a profile with every field set encodes
// the same through the wire type, and the two types have the same fields.
func TestProfileFromKeepsTheStoresJSON(t *testing.T) {
	at := time.Date(2026, 11, 25, 9, 30, 0, 0, time.UTC)
	p := store.Profile{Board: "agx-orin-64gb", Workload: "resnet18", Role: truth.Infer,
		Mode:  powermode.Mode{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000},
		Batch: 4, MicroBatch: 2, TimeMS: store.TimeStats{Mean: 10.5, P50: 10, P95: 12, Stddev: 0.5}, PowerMW: store.PowerStats{Mean: 21000, Stddev: 300},
		Samples: 30, PowerSamples: 60, Warmup: 3, StartedAt: at, FinishedAt: at.Add(time.Minute), RSE: 0.01, Source: store.SourceSim,
		Repeats: 2, Throttled: &store.Throttled{Readings: 3, GPUHzMin: 510000000, CPUKHzMin: 1497600}, Bound: true}
	want, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(server.ProfileFrom(p))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("api.Profile's JSON differs from the store's:\ngot  %s\nwant %s", got, want)
	}
	for _, pair := range [][2]reflect.Type{
		{reflect.TypeFor[store.Profile](), reflect.TypeFor[api.Profile]()},
		{reflect.TypeFor[store.TimeStats](), reflect.TypeFor[api.TimeStats]()},
		{reflect.TypeFor[store.PowerStats](), reflect.TypeFor[api.PowerStats]()},
		{reflect.TypeFor[store.Throttled](), reflect.TypeFor[api.Throttled]()},
	} {
		if pair[0].NumField() != pair[1].NumField() {
			t.Errorf("%s has %d fields, %s %d: decide whether the API shows the new one", pair[0], pair[0].NumField(), pair[1], pair[1].NumField())
		}
	}
}
