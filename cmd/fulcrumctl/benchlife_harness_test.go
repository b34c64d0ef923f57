package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// bench --lifetime on the real harness (fulcrum/lifetime): the same seed gives the same
// JSON, twice and at --parallel 1 and 2; the runs did train and took profiles (gmd), and
// the preset row never searched.
func TestBenchLifetimeHarnessDeterministic(t *testing.T) {
	tp := lifeTruth(t)
	args := []string{"bench", "--truth", tp, "--lifetime", "1m", "--methods", "gmd,preset",
		"--pairs", "resnet18-train:mobilenetv3-infer", "--rates", "10", "--latency", "200ms", "--power", "30W", "--seed", "5", "-o", "json", "--quiet"}
	var outs []string
	for _, p := range []string{"1", "1", "2"} {
		out, _, err := simExec(context.Background(), append(args, "--parallel", p)...)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, out)
	}
	if outs[0] != outs[1] || outs[0] != outs[2] {
		t.Fatalf("the same seed gave different JSON (parallel 1, 1, 2):\n%s\n%s\n%s", outs[0], outs[1], outs[2])
	}
	var rep struct {
		Methods []struct {
			Name         string  `json:"name"`
			TrainSamples float64 `json:"train_samples"`
			IdealSamples float64 `json:"ideal_samples"`
			MeanProfiles float64 `json:"mean_profiles"`
			MeanSearchS  float64 `json:"mean_search_s"`
			Errors       int     `json:"errors"`
		} `json:"methods"`
	}
	if err := json.Unmarshal([]byte(outs[0]), &rep); err != nil {
		t.Fatalf("%v\n%s", err, outs[0])
	}
	if len(rep.Methods) != 2 {
		t.Fatalf("rows %+v", rep.Methods)
	}
	gmd, preset := rep.Methods[0], rep.Methods[1]
	if gmd.Errors != 0 || preset.Errors != 0 || gmd.IdealSamples <= 0 || gmd.MeanProfiles <= 0 || gmd.TrainSamples <= 0 {
		t.Fatalf("gmd %+v: want no error, a denominator, profiles taken and training done", gmd)
	}
	if preset.MeanProfiles != 0 || preset.MeanSearchS != 0 {
		t.Fatalf("preset %+v: it holds the default preset and searches nothing", preset)
	}
}

// With the physics simulator as the board, a table of another board is refused before
// anything runs: the runs and their denominators would be on different boards.
func TestBenchLifetimePhysicsNeedsTheBoardsTruth(t *testing.T) {
	tp := lifeTruth(t) // agx-orin-64gb
	_, _, err := simExec(context.Background(), "bench", "--truth", tp, "--lifetime", "1m", "--board", "orin-nx-16gb", "--methods", "gmd",
		"--pairs", "resnet18-train:mobilenetv3-infer", "--rates", "10", "--latency", "200ms", "--power", "15W")
	if err == nil || !strings.Contains(err.Error(), "give the --board the table was made for") {
		t.Fatalf("got %v, want the table refused for another board", err)
	}
}
