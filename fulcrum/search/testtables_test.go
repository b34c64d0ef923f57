package search

import (
	"fmt"
	"slices"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/benchgen"
	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/truthprof"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

func smallPair(t testing.TB) (*truthprof.PairTruth, []string, []powermode.Mode) {
	t.Helper()
	v := benchgen.Small()
	tab, err := benchgen.Table(v)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := truthprof.NewPairTruth(tab, "net-train", "net-infer", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	names, presets := benchgen.Presets(v)
	return pt, names, presets
}

func smallProblem(pt *truthprof.PairTruth, names []string, presets []powermode.Mode, b plan.Budgets) Problem {
	p := problemOf(pt)
	p.Budgets, p.PresetNames = b, names
	for _, m := range presets {
		p.Presets = append(p.Presets, pt.Space.Snap(m))
	}
	return p
}

type truthRow struct {
	m       powermode.Mode
	role    truth.Role
	batch   int
	timeMS  float64
	powerMW float64
}

func pairFromRows(t *testing.T, rows []truthRow) *truthprof.PairTruth {
	t.Helper()
	var tr []truth.Row
	for _, r := range rows {
		w := "w-train"
		if r.role == truth.Infer {
			w = "w-infer"
		}
		tr = append(tr, truth.Row{Workload: w, Role: r.role, Mode: r.m, Batch: r.batch, TimeMS: r.timeMS, PowerMW: r.powerMW})
	}
	tab, err := truth.NewTable(tr)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := truthprof.NewPairTruth(tab, "w-train", "w-infer", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pt
}

func fmtSscanf(name string, w *float64) (int, error) { return fmt.Sscanf(name, "MODE_%gW", w) }

// bruteForce is the oracle written the obvious way: every mode, every batch, Model.Evaluate.
func bruteForce(t *testing.T, pt *truthprof.PairTruth, b plan.Budgets) (plan.Eval, bool) {
	t.Helper()
	m, err := plan.NewModel(b, pt.Batches)
	if err != nil {
		t.Fatal(err)
	}
	var best plan.Eval
	found := false
	for i := range pt.Len() {
		if e, ok := m.BestAtMode(pt.ProfileAt(i)); ok && (!found || e.Better(best)) {
			best, found = e, true
		}
	}
	return best, found
}

// oracleOf is the exhaustive optimum as a Result (bench.Oracle, which this package's
// tests cannot import: bench imports search).
func oracleOf(t *testing.T, pt *truthprof.PairTruth, b plan.Budgets) (Result, error) {
	e, ok := bruteForce(t, pt, b)
	return Result{Choice: e, Found: ok, Feasible: ok && e.Feasible}, nil
}

// problemOf is the pair's problem without budgets (as the benchmark builds it).
func problemOf(pt *truthprof.PairTruth) Problem {
	return Problem{Space: pt.Space, Train: pt.Train, Infer: pt.Infer, TrainBatch: pt.TrainBatch, InferBatches: slices.Clone(pt.Batches)}
}
