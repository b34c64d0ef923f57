package search

import (
	"fmt"
	"slices"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/benchtest"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/truthprof"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

func smallProblem(pt *truthprof.PairTruth, names []string, presets []powermode.Mode, b plan.Budgets) Problem {
	p := problemOf(pt)
	p.Budgets, p.PresetNames = b, names
	for _, m := range presets {
		p.Presets = append(p.Presets, pt.Space.Snap(m))
	}
	return p
}

func fmtSscanf(name string, w *float64) (int, error) { return fmt.Sscanf(name, "MODE_%gW", w) }

// oracleOf is the exhaustive optimum as a Result (bench.Oracle, which this package's
// tests cannot import: bench imports search).
func oracleOf(t *testing.T, pt *truthprof.PairTruth, b plan.Budgets) (Result, error) {
	e, ok := benchtest.BruteForce(t, pt, b)
	return Result{Choice: e, Found: ok, Feasible: ok && e.Feasible}, nil
}

// problemOf is the pair's problem without budgets (as the benchmark builds it).
func problemOf(pt *truthprof.PairTruth) Problem {
	return Problem{Space: pt.Space, Train: pt.Train, Infer: pt.Infer, TrainBatch: pt.TrainBatch, InferBatches: slices.Clone(pt.Batches)}
}
