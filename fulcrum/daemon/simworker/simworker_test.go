package simworker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon/simworker"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

func TestReadTrace(t *testing.T) {
	got, err := simworker.ReadTrace(strings.NewReader("# offsets\n0\n0.010\n\n0.25\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{0, 10 * time.Millisecond, 250 * time.Millisecond}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	for _, bad := range []string{"x\n", "-1\n", "0.5\n0.1\n"} {
		if _, err := simworker.ReadTrace(strings.NewReader(bad)); err == nil {
			t.Errorf("trace %q accepted", bad)
		}
	}
}

// Unmanaged workers run on the simulated board without fulcrumd and serve every request
// of a trace.
func TestUnmanagedTrace(t *testing.T) {
	r := newRig(t)
	trace := []time.Duration{0, 5 * time.Millisecond, 10 * time.Millisecond, 200 * time.Millisecond}
	rep, err := simworker.Run(context.Background(), simworker.Options{Role: proto.RoleInfer, Workload: r.models["mobilenetv3-infer"],
		Spec: r.spec, Root: r.root, Batch: 2, Trace: trace, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Managed || rep.Requests != 4 || rep.Served != 4 || rep.Unserved != 0 || rep.Batches < 2 {
		t.Fatalf("report %+v: want 4 requests served in at least 2 batches of ≤2", rep)
	}
	tr, err := simworker.Run(context.Background(), simworker.Options{Role: proto.RoleTrain, Workload: r.models["lstm-train"],
		Spec: r.spec, Root: r.root, Steps: 3, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Batches != 3 || tr.Samples != 3*r.models["lstm-train"].Batch {
		t.Fatalf("training report %+v", tr)
	}
}

func TestOptionsChecked(t *testing.T) {
	r := newRig(t)
	cases := map[string]simworker.Options{
		"role mismatch": {Role: proto.RoleInfer, Workload: r.models["lstm-train"], Spec: r.spec, Root: r.root, RateHz: 1},
		"no arrivals":   {Role: proto.RoleInfer, Workload: r.models["mobilenetv3-infer"], Spec: r.spec, Root: r.root},
		"no root":       {Role: proto.RoleTrain, Workload: r.models["lstm-train"], Spec: r.spec},
	}
	for name, o := range cases {
		if _, err := simworker.Run(context.Background(), o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
