package main

import (
	"context"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/apitest"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server/controlapi"
	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/profiler/store/storetest"
)

// fulcrumd without a board (board: none) with a training and an inference worker: status
// must not send the operator to optimize, which fails there; it says what works (issue 34
// item 2).
func TestStatusWithoutBoardSuggestsWhatWorks(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	clock := sched.NewFakeClock()
	sc := sched.New(sched.Config{}, clock, nil)
	c, err := control.New(control.Options{Sched: sc, Store: st, Clock: clock, Targets: plan.Targets{LatencyMS: 100}})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []sched.WorkerSpec{{Role: proto.RoleTrain, Workload: "resnet18-train", Batch: 32}, {Role: proto.RoleInfer, Workload: "resnet50-infer", Batch: 1}} {
		if _, _, err := sc.Register(w, func(sched.Grant) {}); err != nil {
			t.Fatal(err)
		}
	}
	c.Step(ctx)
	sock := apitest.Serve(t, allowAll, &controlapi.API{C: c, Started: clock.Now(), BoardSpec: "none"})
	if _, _, err := fulcrumctl(ctx, "optimize", "--socket", sock); err == nil || !strings.Contains(err.Error(), "no board") {
		t.Fatalf("optimize without a board: %v, want it refused", err)
	}
	out := mustRun(t, "status", "--socket", sock)
	if strings.Contains(out, "optimize") {
		t.Errorf("status without a board suggests optimize, which fails there:\n%s", out)
	}
	if !strings.Contains(out, "start fulcrumd with a board") {
		t.Errorf("status without a board does not say how to get plans:\n%s", out)
	}
}

// One status never says two contrary things: no "run optimize" while a search runs, no
// predicted training rate while training is paused (issue 34 item 2).
func TestStatusNoContradictions(t *testing.T) {
	workloads := []api.WorkloadStats{
		{Workload: "resnet18-train", Role: "train", LiveWorkers: 1},
		{Workload: "resnet50-infer", Role: "infer", LiveWorkers: 1},
	}
	for _, tc := range []struct {
		name      string
		st        api.Status
		want, not []string
	}{
		{"optimizing before the first plan", api.Status{Board: "agx-orin-64gb", Optimizing: "gmd", Workloads: workloads},
			[]string{"the gmd search is profiling modes", "optimizing (gmd)"}, []string{"run fulcrumctl optimize"}},
		{"no workers yet", api.Status{Board: "agx-orin-64gb", Workloads: workloads[:1]},
			[]string{"once a training and an inference worker are registered"}, []string{"run fulcrumctl optimize"}},
		{"training paused", api.Status{Board: "agx-orin-64gb", TrainingPaused: true, Workloads: workloads, Degraded: true,
			DegradedReason: "no known configuration meets the latency budget",
			Plan:           &api.Plan{Mode: apitest.Mode30W, InferBatch: 1, Binding: "latency", PredLatencyMS: 420, PredPowerMW: 20000, PredThroughputSamplesPerS: 310, Rho: 0.3}},
			[]string{"training paused (0 samples/s)", "training paused: no training turns are granted"}, []string{"310.0 samples/s"}},
	} {
		var b strings.Builder
		if err := writeStatus(&b, tc.st); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: status lacks %q:\n%s", tc.name, w, out)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(out, n) {
				t.Errorf("%s: status says %q:\n%s", tc.name, n, out)
			}
		}
	}
}
