package main

import (
	"context"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api/apitest"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server/controlapi"
	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/profiler/store/storetest"
)

// A worker registered without an on_profile handler: fulcrumctl status says its
// workload is left out of live profiling and names on_profile (issue 27), through the
// real controller and API on a unix socket.
func TestStatusNamesWorkloadsThatDeclineProfiles(t *testing.T) {
	st := storetest.Open(t)
	clock := sched.NewFakeClock()
	sc := sched.New(sched.Config{}, clock, nil)
	c, err := control.New(control.Options{Sched: sc, Store: st, Clock: clock, Targets: plan.Targets{LatencyMS: 100}})
	if err != nil {
		t.Fatal(err)
	}
	sock := apitest.Serve(t, allowAll, &controlapi.API{C: c, Started: clock.Now()})
	if _, _, err := sc.Register(sched.WorkerSpec{Role: proto.RoleInfer, Workload: "pyinfer", Batch: 4, NoProfiles: true}, func(sched.Grant) {}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sc.Register(sched.WorkerSpec{Role: proto.RoleTrain, Workload: "pytrain", Batch: 8}, func(sched.Grant) {}); err != nil {
		t.Fatal(err)
	}
	c.Step(context.Background())
	out := mustRun(t, "status", "--socket", sock)
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "profiling") {
			line = l
		}
	}
	if !strings.Contains(line, "pyinfer (infer)") || !strings.Contains(line, "on_profile") || strings.Contains(line, "pytrain") {
		t.Fatalf("status's profiling line %q: want pyinfer and on_profile, not pytrain:\n%s", line, out)
	}
}
