package bench

import (
	"reflect"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// microTables are the simulated AGX's resnet18-train × mobilenetv3-infer at 12 cores,
// with training micro-batch rows (k = 2, 4, 8) and without.
func microTables(t *testing.T) (with, without *truth.Table) {
	t.Helper()
	spec := testboard.Spec(t, "agx-orin-64gb")
	opt := sim.TruthOptions{Workloads: []string{"mobilenetv3-infer", "resnet18-train"}, Cores: []int{12}, MicroSplits: []int{2, 4, 8}}
	rows, err := sim.TruthRows(spec, testboard.Workloads(t), opt)
	if err != nil {
		t.Fatal(err)
	}
	if with, err = truth.NewTable(rows); err != nil {
		t.Fatal(err)
	}
	var whole []truth.Row
	for _, r := range rows {
		if r.MicroBatch == 0 {
			whole = append(whole, r)
		}
	}
	if without, err = truth.NewTable(whole); err != nil {
		t.Fatal(err)
	}
	return with, without
}

func microSpec(tab *truth.Table, micro bool) BenchSpec {
	return BenchSpec{
		Truth: tab, RatesRPS: []float64{30}, LatenciesMS: []float64{25, 50, 75}, PowersMW: []float64{30000, 50000},
		Searchers: []string{"oracle-m3", "gmd"}, Noise: 0.03, Seed: 1, Parallel: 2, Micro: micro,
		Rules: plan.Rules{NoiseRel: 0.03, Admission: plan.Admission{MarginMS: 5, DevRel: 0.06}},
	}
}

// Issue 32. k = 1 is today's benchmark exactly: a table with micro-batch rows scored
// with Micro off gives the outcomes of the same table without them. With Micro on, the
// latency budgets shorter than a resnet18 minibatch (~100 ms at MAXN) become
// satisfiable: the micro-batch-aware oracle-m3 runs training where it could not, and
// GMD's decision claims micro-batches without violating a budget.
func TestBenchMicroBatches(t *testing.T) {
	with, without := microTables(t)
	run := func(tab *truth.Table, micro bool) *BenchReport {
		rep, err := RunBench(t.Context(), microSpec(tab, micro))
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	before, off := run(without, true), run(with, false)
	if off.Micro || before.Micro {
		t.Fatalf("report says micro-batches on: off %v, without rows %v", off.Micro, before.Micro)
	}
	if off.ConfigsOracleInfeasible != before.ConfigsOracleInfeasible || len(off.Outcomes) != len(before.Outcomes) {
		t.Fatalf("micro off: %d infeasible, table without micro rows %d", off.ConfigsOracleInfeasible, before.ConfigsOracleInfeasible)
	}
	for s := range before.Outcomes {
		for c := range before.Outcomes[s] {
			a, b := off.Outcomes[s][c], before.Outcomes[s][c]
			if a.Status != b.Status || !reflect.DeepEqual(a.Decision, b.Decision) || a.Choice != b.Choice || a.Ratio != b.Ratio || a.Profiles != b.Profiles {
				t.Fatalf("searcher %d config %d: micro off %+v\nwithout micro rows %+v", s, c, a, b)
			}
		}
	}
	on := run(with, true)
	if !on.Micro {
		t.Fatal("report says micro-batches off with Micro on and micro-batch rows")
	}
	if on.ConfigsOracleInfeasible >= off.ConfigsOracleInfeasible {
		t.Fatalf("oracle infeasible: %d with micro-batches, %d without: the 25 ms budget should open up", on.ConfigsOracleInfeasible, off.ConfigsOracleInfeasible)
	}
	for i, st := range on.Searchers {
		if st.ViolationPct > 0 || st.FalseClaimPct > 0 {
			t.Errorf("%s: %.1f%% violations, %.1f%% false claims with micro-batches", st.Name, st.ViolationPct, st.FalseClaimPct)
		}
		if st.WithinBudget <= off.Searchers[i].WithinBudget {
			t.Errorf("%s: within every budget %d configurations with micro-batches, %d without", st.Name, st.WithinBudget, off.Searchers[i].WithinBudget)
		}
		micro := 0
		for _, o := range on.Outcomes[i] {
			if o.Status == "within" && o.Choice.MicroBatch > 0 {
				micro++
			}
		}
		if micro == 0 {
			t.Errorf("%s: no answer within budget runs micro-batches", st.Name)
		}
	}
}
