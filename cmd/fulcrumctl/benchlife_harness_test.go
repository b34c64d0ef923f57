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

// Issue 32 in bench --lifetime, on the real harness: resnet18-train beside a 25 req/s
// mobilenetv3 stream whose 60 ms budget is below one training minibatch at every mode.
// With --micro=false nothing keeps the admission room with training (the configuration
// is apart) and GMD's run trains nothing once it has planned; with --micro (the default)
// the simulated trainer declares the table's micro-batch sizes, the denominator and
// oracle-m3 run a micro-batch, and GMD's run keeps training after its plan.
func TestBenchLifetimeMicroBatches(t *testing.T) {
	tp := lifeTruth(t)
	args := []string{"bench", "--truth", tp, "--lifetime", "4m", "--methods", "gmd,oracle-m3",
		"--pairs", "resnet18-train:mobilenetv3-infer", "--rates", "25", "--latency", "60ms", "--power", "50W", "--seed", "1", "-o", "json", "--quiet"}
	type report struct {
		ConfigsApart int  `json:"configs_apart"`
		Micro        bool `json:"micro"`
		Methods      []struct {
			Name         string `json:"name"`
			WithinBudget int    `json:"within_budget"`
			Errors       int    `json:"errors"`
		} `json:"methods"`
		Configurations []struct {
			IdealSamples float64 `json:"ideal_samples"`
			Runs         []struct {
				Method         string   `json:"method"`
				TrainSamples   float64  `json:"train_samples"`
				TrainAfterPlan float64  `json:"train_samples_after_plan"`
				FirstPlanS     *float64 `json:"first_plan_s"`
				LatencyBrokenS float64  `json:"latency_broken_s"`
				Error          string   `json:"error"`
			} `json:"runs"`
		} `json:"configurations"`
	}
	get := func(micro string) report {
		out, _, err := simExec(context.Background(), append(args, "--micro="+micro)...)
		if err != nil {
			t.Fatal(err)
		}
		var rep report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if len(rep.Configurations) != 1 || len(rep.Configurations[0].Runs) != 2 || rep.Methods[0].Errors != 0 || rep.Configurations[0].Runs[0].FirstPlanS == nil {
			t.Fatalf("--micro=%s: %s\nwant one configuration, gmd planned without error", micro, out)
		}
		c := rep.Configurations[0]
		t.Logf("--micro=%s: ideal %.0f samples; gmd trained %.0f (%.0f after its plan at %.0f s), latency broken %.0f s; oracle-m3 %.0f; within: gmd %d, oracle-m3 %d",
			micro, c.IdealSamples, c.Runs[0].TrainSamples, c.Runs[0].TrainAfterPlan, *c.Runs[0].FirstPlanS, c.Runs[0].LatencyBrokenS, c.Runs[1].TrainSamples,
			rep.Methods[0].WithinBudget, rep.Methods[1].WithinBudget)
		return rep
	}
	whole, micro := get("false"), get("true")
	if whole.Micro || whole.ConfigsApart != 1 || whole.Configurations[0].Runs[0].TrainAfterPlan != 0 || whole.Configurations[0].Runs[1].TrainSamples != 0 {
		t.Fatalf("--micro=false: %+v: want the configuration apart, nothing trained after GMD's plan, oracle-m3 training nothing", whole)
	}
	g, o := micro.Configurations[0].Runs[0], micro.Configurations[0].Runs[1]
	if !micro.Micro || micro.ConfigsApart != 0 || micro.Configurations[0].IdealSamples <= 0 || o.TrainSamples <= 0 || micro.Methods[1].WithinBudget != 1 {
		t.Fatalf("--micro: %+v: want a denominator and oracle-m3 training within every budget with a micro-batch", micro)
	}
	if g.TrainAfterPlan <= 0 {
		t.Fatalf("--micro: GMD's run trained %v samples after its plan: the trainer's micro-batches must keep training going", g.TrainAfterPlan)
	}
}
