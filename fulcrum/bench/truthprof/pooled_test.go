package truthprof

import (
	"context"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/benchgen"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// The pooled profiler measures every workload per mode (k+m−1 profiles each), answers
// with the pooled pair, pools repeats, and forks without recounting.
func TestPooledProfiler(t *testing.T) {
	v := benchgen.Small()
	v.Workloads = append(v.Workloads, benchgen.Workload{Name: "cls-infer", Role: truth.Infer, Batches: []int{1, 2, 4, 8}, BaseMS: 14, BatchSlope: 0.5, GPU: 0.7, EMC: 0.2, CPU: 0.1, NeedCores: 2, Activity: 0.85})
	tab, err := benchgen.Table(v)
	if err != nil {
		t.Fatal(err)
	}
	mt, err := NewMultiTruth(tab, []string{"net-train"}, []string{"net-infer", "cls-infer"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rates := []float64{10, 30}
	pp, err := NewPooledProfiler(mt, 0.03, 7, rates)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m := mt.Profiles()[3].Mode
	got, err := pp.Profile(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	multi := pp.Multi()
	if len(multi) != 1 || pp.Count() != 2 {
		t.Fatalf("after one mode: %d multi profiles, count %d; want 1 and 2 (two streams)", len(multi), pp.Count())
	}
	want := plan.PooledPair(multi[0], rates, nil)
	if got.Train != want.Train || len(got.Infer) != len(want.Infer) || got.Infer[0] != want.Infer[0] {
		t.Fatalf("Profile answered %+v, want the pooled pair %+v", got, want)
	}
	if again, _ := pp.Profile(ctx, m); again.Infer[0] != got.Infer[0] || pp.Count() != 2 {
		t.Fatal("asking again measured again")
	}
	if _, err := pp.Remeasure(ctx, m); err != nil {
		t.Fatal(err)
	}
	if _, err := pp.Remeasure(ctx, m); err != nil {
		t.Fatal(err)
	}
	if r := pp.Multi()[0]; r.Repeats != 2 || pp.Count() != 6 || r.Infer[1][0].TimeMS == multi[0].Infer[1][0].TimeMS {
		t.Fatalf("after two repeats: repeats %d, count %d (want 2, 6) and a pooled mean replacing the first measurement", r.Repeats, pp.Count())
	}
	f := pp.Fork(99)
	if len(f.Multi()) != 1 || f.Count() != 0 {
		t.Fatalf("fork knows %d modes and counted %d; want 1 and 0", len(f.Multi()), f.Count())
	}
	if _, err := NewPooledProfiler(mt, 0.03, 7, []float64{1}); err == nil {
		t.Fatal("one rate for two streams accepted")
	}
}
