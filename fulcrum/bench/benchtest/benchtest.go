// Package benchtest holds the test tables the search and bench tests share: the small
// synthetic board as a pair, hand-made tables from rows, the "edge" table whose fastest
// feasible mode sits at 99.5% of the power budget, and the brute-force oracle. It is a
// package of its own (not a _test file) because two packages' tests use it; the internal
// tests of truthprof cannot (this package imports truthprof).
package benchtest

import (
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/benchgen"
	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/truthprof"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// SmallPair is benchgen.Small() (432 modes) as the pair net-train + net-infer, with the
// board's preset names and modes.
func SmallPair(t testing.TB) (*truthprof.PairTruth, []string, []powermode.Mode) {
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

// Row is one row of a hand-made ground-truth table; its workload is w-train or w-infer
// by role.
type Row struct {
	Mode    powermode.Mode
	Role    truth.Role
	Batch   int
	TimeMS  float64
	PowerMW float64
}

// PairFromRows is the pair w-train + w-infer of a hand-made table.
func PairFromRows(t testing.TB, rows []Row) *truthprof.PairTruth {
	t.Helper()
	var tr []truth.Row
	for _, r := range rows {
		w := "w-train"
		if r.Role == truth.Infer {
			w = "w-infer"
		}
		tr = append(tr, truth.Row{Workload: w, Role: r.Role, Mode: r.Mode, Batch: r.Batch, TimeMS: r.TimeMS, PowerMW: r.PowerMW})
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

// EdgePair is a crafted two-knob table: the fastest feasible mode draws 99.5% of the
// power budget, the next one down 90%. Under 3% noise a planner without a margin often
// believes a mode just over the edge fits. GMD's 2σ margin is a statistical guard, not
// a certainty (a mode at the edge still passes when its measurement is 2σ low, about
// 2% of the time), so tests check rates over many seeded searches.
func EdgePair(t testing.TB) *truthprof.PairTruth {
	t.Helper()
	return PairFromRows(t, EdgeRows(nil))
}

// EdgeRows builds the edge table; powersMW are the board power at the four GPU levels
// with the slow memory clock (nil: budget 20 W, 800 MHz at 99.5%).
func EdgeRows(powersMW []float64) []Row {
	var rows []Row
	gpus := []int64{400000000, 600000000, 800000000, 1000000000}
	if powersMW == nil {
		powersMW = []float64{13500, 18000, 19900, 21500}
	}
	for gi, g := range gpus {
		for _, e := range []int64{2133000000, 3199000000} {
			m := powermode.Mode{Cores: 4, CPUKHz: 1200000, GPUHz: g, EMCHz: e}
			extraMW := 0.0
			if e == 3199000000 {
				extraMW = 300
			}
			tt := 200 / (1 + float64(gi)) * map[bool]float64{true: 0.97, false: 1}[e == 3199000000]
			rows = append(rows, Row{Mode: m, Role: truth.Train, Batch: 32, TimeMS: tt, PowerMW: powersMW[gi] + extraMW})
			for _, b := range []int{1, 2} {
				rows = append(rows, Row{Mode: m, Role: truth.Infer, Batch: b, TimeMS: 2 * float64(b), PowerMW: powersMW[gi] + extraMW})
			}
		}
	}
	return rows
}

// BruteForce is the oracle written the obvious way: every mode, every batch,
// Model.BestAtMode.
func BruteForce(t testing.TB, pt *truthprof.PairTruth, b plan.Budgets) (plan.Eval, bool) {
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
