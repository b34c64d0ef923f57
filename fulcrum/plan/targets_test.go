package plan

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// The one conversion: open targets become the model's full budgets — no power budget is
// MaxPowerMW, an unmeasured rate the least the model takes, the quantile and ρ cap their
// defaults — and the model accepts what comes out.
func TestTargetsBudgets(t *testing.T) {
	for _, tc := range []struct {
		name string
		t    Targets
		rate float64
		want Budgets
	}{
		{"open", Targets{LatencyMS: 100}, 20, Budgets{RateRPS: 20, LatencyMS: 100, PowerMW: MaxPowerMW, Quantile: DefaultQuantile, RhoMax: DefaultRhoMax}},
		{"no rate yet", Targets{LatencyMS: 100}, 0, Budgets{RateRPS: MinRateRPS, LatencyMS: 100, PowerMW: MaxPowerMW, Quantile: DefaultQuantile, RhoMax: DefaultRhoMax}},
		{"all set", Targets{LatencyMS: 80, PowerMW: 30000, RateRPS: 5, Quantile: 0.95, RhoMax: 0.5}, 5, Budgets{RateRPS: 5, LatencyMS: 80, PowerMW: 30000, Quantile: 0.95, RhoMax: 0.5}},
		{"streams ignored", Targets{LatencyMS: 80, Streams: map[string]StreamTarget{"a": {LatencyMS: 10}}}, 3, Budgets{RateRPS: 3, LatencyMS: 80, PowerMW: MaxPowerMW, Quantile: DefaultQuantile, RhoMax: DefaultRhoMax}},
	} {
		got := tc.t.Budgets(tc.rate)
		if got != tc.want {
			t.Errorf("%s: %+v.Budgets(%v) = %+v; want %+v", tc.name, tc.t, tc.rate, got, tc.want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%s: the model refuses the converted budgets: %v", tc.name, err)
		}
	}
}

// Several workloads: each stream's own latency or the shared one, its rate (floored),
// each job's own weight or 1, one power budget.
func TestTargetsMultiBudgets(t *testing.T) {
	tg := Targets{LatencyMS: 100, PowerMW: 0, Streams: map[string]StreamTarget{
		"yolo": {LatencyMS: 40, RateRPS: 7}, "bert-train": {TrainWeight: 3},
	}}
	got := tg.MultiBudgets([]string{"resnet", "yolo"}, []float64{20, 0}, []string{"bert-train", "gpt-train"})
	want := MultiBudgets{
		Streams:      []StreamBudget{{Name: "resnet", RateRPS: 20, LatencyMS: 100}, {Name: "yolo", RateRPS: MinRateRPS, LatencyMS: 40}},
		PowerMW:      MaxPowerMW,
		Quantile:     DefaultQuantile,
		RhoMax:       DefaultRhoMax,
		TrainWeights: []float64{3, 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("MultiBudgets = %+v; want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("the model refuses the converted budgets: %v", err)
	}
	if lat := tg.StreamLatenciesMS(); !reflect.DeepEqual(lat, map[string]float64{"yolo": 40}) {
		t.Errorf("StreamLatenciesMS = %v; want yolo's 40 only", lat)
	}
	if w := tg.TrainWeights(); !reflect.DeepEqual(w, map[string]float64{"bert-train": 3}) {
		t.Errorf("TrainWeights = %v; want bert-train's 3 only", w)
	}
}

// Targets may leave the rate, power, quantile and ρ cap open (0), never the latency;
// every field and every workload's own target is checked against the one set of limits.
func TestTargetsValidate(t *testing.T) {
	ok := []Targets{
		{LatencyMS: 100},
		{LatencyMS: 100, PowerMW: 30000, RateRPS: 20, Quantile: 0.99, RhoMax: 0.9},
		{LatencyMS: 100, Streams: map[string]StreamTarget{"a": {LatencyMS: 50}, "b": {TrainWeight: MaxTrainWeight}, "c": {}}},
	}
	for _, tg := range ok {
		if err := tg.Validate(); err != nil {
			t.Errorf("%+v: %v; want valid", tg, err)
		}
	}
	long := strings.Repeat("x", 129)
	bad := []struct {
		t    Targets
		want string
	}{
		{Targets{}, FieldLatency},
		{Targets{LatencyMS: 100, PowerMW: 30}, FieldPower},
		{Targets{LatencyMS: 100, RateRPS: -1}, FieldRate},
		{Targets{LatencyMS: 100, Quantile: 0.2}, FieldQuantile},
		{Targets{LatencyMS: 100, RhoMax: 2}, FieldRhoMax},
		{Targets{LatencyMS: 100, Streams: map[string]StreamTarget{"a": {LatencyMS: 0.01}}}, `stream "a": latency_ms`},
		{Targets{LatencyMS: 100, Streams: map[string]StreamTarget{"a": {TrainWeight: 5e-324}}}, "train_weight"},
		{Targets{LatencyMS: 100, Streams: map[string]StreamTarget{"": {LatencyMS: 50}}}, "workload name"},
		{Targets{LatencyMS: 100, Streams: map[string]StreamTarget{long: {LatencyMS: 50}}}, "workload name"},
	}
	for _, tc := range bad {
		err := tc.t.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want an error naming %s", tc.t, err, tc.want)
		}
	}
	many := Targets{LatencyMS: 100, Streams: map[string]StreamTarget{}}
	for i := 0; i <= MaxStreamTargets; i++ {
		many.Streams[strings.Repeat("w", i+1)] = StreamTarget{LatencyMS: 50}
	}
	if err := many.Validate(); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("%d workloads with targets: %v; want refused", len(many.Streams), err)
	}
	var we *WeightRangeError
	if err := (StreamTarget{TrainWeight: -1}).Validate("job"); !errors.As(err, &we) {
		t.Errorf("weight -1: %v; want a *WeightRangeError", err)
	}
}

// The shared targets keep the JSON form the settings file (version 1) has always had
// for its budgets, so files written before Targets read back the same.
func TestTargetsJSONIsTheBudgetsForm(t *testing.T) {
	tg := Targets{LatencyMS: 80, PowerMW: 30000, Quantile: 0.99, RhoMax: 0.95}
	a, _ := json.Marshal(tg)
	b, _ := json.Marshal(Budgets{LatencyMS: 80, PowerMW: 30000, Quantile: 0.99, RhoMax: 0.95})
	if string(a) != string(b) {
		t.Errorf("Targets JSON %s; want the budgets' %s", a, b)
	}
	st, _ := json.Marshal(map[string]StreamTarget{"a": {LatencyMS: 50}, "b": {TrainWeight: 2}})
	if want := `{"a":{"latency_ms":50},"b":{"train_weight":2}}`; string(st) != want {
		t.Errorf("stream targets JSON %s; want %s", st, want)
	}
}

func TestTargetsEqual(t *testing.T) {
	a := Targets{LatencyMS: 100, Streams: map[string]StreamTarget{}}
	if !a.Equal(Targets{LatencyMS: 100}) {
		t.Error("an empty per-workload map differs from none")
	}
	if a.Equal(Targets{LatencyMS: 100, Streams: map[string]StreamTarget{"a": {LatencyMS: 5}}}) {
		t.Error("targets with a workload's own latency equal targets without")
	}
	c := Targets{LatencyMS: 100, Streams: map[string]StreamTarget{"a": {LatencyMS: 5}}}
	d := c.Clone()
	d.Streams["a"] = StreamTarget{LatencyMS: 6}
	if c.Streams["a"].LatencyMS != 5 {
		t.Error("Clone shares the per-workload map")
	}
}
