package plan

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

// fieldOf is the field an update's error names, as the control API answers it.
func fieldOf(err error) string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		err = j.Unwrap()[0]
	}
	var (
		re *RangeError
		we *WeightRangeError
		fe *FieldError
	)
	switch {
	case errors.As(err, &re):
		return re.Field
	case errors.As(err, &we):
		return FieldTrainWeight
	case errors.Is(err, ErrWorkloadName):
		return FieldWorkload
	case errors.As(err, &fe):
		return fe.Field
	}
	return ""
}

// The update rules, in plan: what a change sets, what a given 0 means (refused, but
// the power budget's: none), contradictions and shared-only fields refused naming the
// field, and nothing changed by a refused update.
func TestTargetsApply(t *testing.T) {
	cur := Targets{LatencyMS: 100, PowerMW: 30000, RateRPS: 40, Quantile: 0.99, RhoMax: 0.95,
		Streams: map[string]StreamTarget{"cam": {LatencyMS: 50}}}
	for _, tc := range []struct {
		name  string
		u     TargetsUpdate
		want  Targets
		field string // non-empty: refused naming it
	}{
		{"latency", TargetsUpdate{LatencyMS: ptr(80.0)}, Targets{LatencyMS: 80, PowerMW: 30000, RateRPS: 40, Quantile: 0.99, RhoMax: 0.95, Streams: cur.Streams}, ""},
		{"no power budget", TargetsUpdate{PowerMW: ptr(0.0)}, Targets{LatencyMS: 100, RateRPS: 40, Quantile: 0.99, RhoMax: 0.95, Streams: cur.Streams}, ""},
		{"rate auto", TargetsUpdate{RateAuto: ptr(true)}, Targets{LatencyMS: 100, PowerMW: 30000, Quantile: 0.99, RhoMax: 0.95, Streams: cur.Streams}, ""},
		{"stream latency", TargetsUpdate{Workload: "cls", LatencyMS: ptr(200.0)}, Targets{LatencyMS: 100, PowerMW: 30000, RateRPS: 40, Quantile: 0.99, RhoMax: 0.95,
			Streams: map[string]StreamTarget{"cam": {LatencyMS: 50}, "cls": {LatencyMS: 200}}}, ""},
		{"stream shared again", TargetsUpdate{Workload: "cam", Shared: true}, Targets{LatencyMS: 100, PowerMW: 30000, RateRPS: 40, Quantile: 0.99, RhoMax: 0.95}, ""},
		{"weight 1 is the default", TargetsUpdate{Workload: "trainer", TrainWeight: ptr(1.0)}, cur, ""},
		{"weight", TargetsUpdate{Workload: "trainer", TrainWeight: ptr(2.5)}, Targets{LatencyMS: 100, PowerMW: 30000, RateRPS: 40, Quantile: 0.99, RhoMax: 0.95,
			Streams: map[string]StreamTarget{"cam": {LatencyMS: 50}, "trainer": {TrainWeight: 2.5}}}, ""},

		{"power in watts", TargetsUpdate{PowerMW: ptr(30.0)}, cur, FieldPower},
		{"latency 0", TargetsUpdate{LatencyMS: ptr(0.0)}, cur, FieldLatency},
		{"rate 0 (rate_auto opens it)", TargetsUpdate{RateRPS: ptr(0.0)}, cur, FieldRate},
		{"quantile 0", TargetsUpdate{Quantile: ptr(0.0)}, cur, FieldQuantile},
		{"rho 0", TargetsUpdate{RhoMax: ptr(0.0)}, cur, FieldRhoMax},
		{"quantile 1", TargetsUpdate{Quantile: ptr(1.0)}, cur, FieldQuantile},
		{"the first bad field", TargetsUpdate{LatencyMS: ptr(-1.0), Quantile: ptr(2.0)}, cur, FieldLatency},
		{"rate and auto", TargetsUpdate{RateRPS: ptr(5.0), RateAuto: ptr(true)}, cur, FieldRate},
		{"auto off alone", TargetsUpdate{RateAuto: ptr(false)}, cur, FieldRateAuto},
		{"stream power", TargetsUpdate{Workload: "cam", PowerMW: ptr(20000.0)}, cur, FieldPower},
		{"stream latency 0", TargetsUpdate{Workload: "cam", LatencyMS: ptr(0.0)}, cur, FieldLatency},
		{"stream rate out of range", TargetsUpdate{Workload: "cam", RateRPS: ptr(-1.0)}, cur, FieldRate},
		{"shared and a value", TargetsUpdate{Workload: "cam", Shared: true, LatencyMS: ptr(50.0)}, cur, FieldShared},
		{"shared without workload", TargetsUpdate{Shared: true}, cur, FieldWorkload},
		{"weight without workload", TargetsUpdate{TrainWeight: ptr(2.0)}, cur, FieldWorkload},
		{"weight 0", TargetsUpdate{Workload: "trainer", TrainWeight: ptr(0.0)}, cur, FieldTrainWeight},
		{"weight too small", TargetsUpdate{Workload: "trainer", TrainWeight: ptr(5e-324)}, cur, FieldTrainWeight},
		{"name too long", TargetsUpdate{Workload: strings.Repeat("x", 129), LatencyMS: ptr(50.0)}, cur, FieldWorkload},
	} {
		before := cur.Clone()
		got, err := cur.Apply(tc.u)
		if !cur.Equal(before) || !reflect.DeepEqual(cur.Streams, before.Streams) {
			t.Fatalf("%s: Apply changed the targets it was called on: %+v", tc.name, cur)
		}
		if tc.field != "" {
			if err == nil || fieldOf(err) != tc.field || !got.Equal(cur) {
				t.Errorf("%s: %+v, %v (field %q); want refused on %s, the targets unchanged", tc.name, got, err, fieldOf(err), tc.field)
			}
			continue
		}
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%s: the result does not validate: %v", tc.name, err)
		}
	}

	full := Targets{LatencyMS: 100, Streams: map[string]StreamTarget{}}
	for i := range MaxStreamTargets {
		full.Streams[strings.Repeat("s", i+1)] = StreamTarget{LatencyMS: 50}
	}
	if _, err := full.Apply(TargetsUpdate{Workload: "one-more", LatencyMS: ptr(50.0)}); fieldOf(err) != FieldWorkload {
		t.Errorf("a workload past MaxStreamTargets: %v; want refused on workload", err)
	}
	if _, err := full.Apply(TargetsUpdate{Workload: "s", LatencyMS: ptr(60.0)}); err != nil {
		t.Errorf("changing a held workload at the limit: %v", err)
	}
}
