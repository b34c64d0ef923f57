package bench

import (
	"reflect"
	"slices"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/truthprof"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// multiMicroTables are the simulated AGX's resnet18-train with two inference streams
// (mobilenetv3-infer, yolov8n-infer) at 12 cores, with training micro-batch rows
// (k = 2, 4, 8) and without.
func multiMicroTables(t *testing.T) (with, without *truth.Table) {
	t.Helper()
	spec := testboard.Spec(t, "agx-orin-64gb")
	opt := sim.TruthOptions{Workloads: []string{"mobilenetv3-infer", "yolov8n-infer", "resnet18-train"}, Cores: []int{12}, MicroSplits: []int{2, 4, 8}}
	rows, err := sim.TruthRows(spec, testboard.Workloads(t), opt)
	if err != nil {
		t.Fatal(err)
	}
	if with, err = truth.NewTable(rows); err != nil {
		t.Fatal(err)
	}
	whole := slices.DeleteFunc(slices.Clone(rows), func(r truth.Row) bool { return r.MicroBatch > 0 })
	if without, err = truth.NewTable(whole); err != nil {
		t.Fatal(err)
	}
	return with, without
}

// Issue 32 for several streams: the multi truth reads the training micro-batch rows,
// and a two-stream configuration whose latency budget is shorter than a resnet18
// minibatch is infeasible at k = 1 but feasible for the micro-batch-aware oracles, which
// answer with a micro-batch.
func TestMultiOracleMicroBatches(t *testing.T) {
	with, _ := multiMicroTables(t)
	mt, err := truthprof.NewMultiTruth(with, []string{"resnet18-train"}, []string{"mobilenetv3-infer", "yolov8n-infer"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !mt.HasMicro() || !slices.Equal(mt.MicroBatches[0], []int{16, 8, 4}) {
		t.Fatalf("micro-batch sizes %v: want [[16 8 4]] from the rows at k = 2, 4, 8", mt.MicroBatches)
	}
	b := plan.MultiBudgets{PowerMW: 50000, Streams: []plan.StreamBudget{{Name: "mobilenetv3-infer", RateRPS: 30, LatencyMS: 50}, {Name: "yolov8n-infer", RateRPS: 30, LatencyMS: 50}}}
	whole, err := MultiOracle(mt.WithoutMicro(), b)
	if err != nil {
		t.Fatal(err)
	}
	if whole.Feasible {
		t.Fatalf("k = 1: oracle feasible at %+v; the budget should be below a minibatch", whole.Best)
	}
	micro, err := MultiOracle(mt, b)
	if err != nil {
		t.Fatal(err)
	}
	if !micro.Feasible || len(micro.Best.MicroBatches) != 1 || micro.Best.MicroBatches[0] == 0 || micro.Best.ObjectiveSPS <= 0 {
		t.Fatalf("micro-batch-aware oracle: feasible %v, best %+v: want training at a micro-batch within budget", micro.Feasible, micro.Best)
	}
	m3, found, err := MultiMarginOracle(mt, b, 0.03, plan.Admission{MarginMS: 5, DevRel: 0.06})
	if err != nil || !found || !m3.Feasible || len(m3.MicroBatches) != 1 || m3.MicroBatches[0] == 0 {
		t.Fatalf("micro-batch-aware margin oracle: found %v, %+v, err %v: want a micro-batch within budget", found, m3, err)
	}
	if _, found, _ := MultiMarginOracle(mt.WithoutMicro(), b, 0.03, plan.Admission{MarginMS: 5, DevRel: 0.06}); found {
		t.Fatal("margin oracle at k = 1 found a configuration the exact oracle says is infeasible")
	}
}

// Issue 32 with --streams 2: Micro off scores a table with micro-batch rows as the same
// table without them (byte for byte what the bench did before); Micro on opens up the
// budgets shorter than a minibatch for the oracles and GMD, without violations.
func TestBenchMultiMicroBatches(t *testing.T) {
	with, without := multiMicroTables(t)
	run := func(tab *truth.Table, micro bool) *BenchReport {
		spec := microSpec(tab, micro)
		spec.Streams = 2
		spec.Searchers = []string{"oracle", "oracle-m3", "gmd"}
		rep, err := RunBench(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	before, off := run(without, true), run(with, false)
	if off.Micro || before.Micro {
		t.Fatalf("report says micro-batches on: off %v, without rows %v", off.Micro, before.Micro)
	}
	if off.ConfigsOracleInfeasible != before.ConfigsOracleInfeasible || !reflect.DeepEqual(off.Outcomes, before.Outcomes) {
		t.Fatalf("micro off: %d infeasible, outcomes %+v\nwithout micro rows: %d, %+v", off.ConfigsOracleInfeasible, off.Outcomes, before.ConfigsOracleInfeasible, before.Outcomes)
	}
	on := run(with, true)
	if !on.Micro {
		t.Fatal("report says micro-batches off with Micro on and micro-batch rows")
	}
	if on.ConfigsOracleInfeasible >= off.ConfigsOracleInfeasible {
		t.Fatalf("oracle infeasible: %d with micro-batches, %d without: the 25 and 50 ms budgets should open up", on.ConfigsOracleInfeasible, off.ConfigsOracleInfeasible)
	}
	for i, st := range on.Searchers {
		t.Logf("%s: within %d (%.1f%%) with micro-batches, %d without; violations %.1f%%, no answer %.1f%%", st.Name, st.WithinBudget, st.WithinBudgetPct, off.Searchers[i].WithinBudget, st.ViolationPct, st.NoAnswerPct)
		if st.ViolationPct > 0 || st.FalseClaimPct > 0 {
			t.Errorf("%s: %.1f%% violations, %.1f%% false claims with micro-batches", st.Name, st.ViolationPct, st.FalseClaimPct)
		}
		if st.WithinBudget <= off.Searchers[i].WithinBudget {
			t.Errorf("%s: within every budget %d configurations with micro-batches, %d without", st.Name, st.WithinBudget, off.Searchers[i].WithinBudget)
		}
	}
}
