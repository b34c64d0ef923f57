package fulcrum

import (
	"fmt"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/benchgen"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// smallVariant is a 4×6×6×3 = 432-mode synthetic board with one training and one
// inference workload: small enough to check searchers against the exhaustive optimum.
func smallVariant() benchgen.Variant {
	return benchgen.Variant{
		Name: "small",
		Board: benchgen.Board{
			Name: "small",
			Levels: powermode.Levels{
				Cores:  []int{2, 4, 6, 8},
				CPUKHz: []int64{400000, 800000, 1200000, 1600000, 2000000, 2200000},
				GPUHz:  []int64{300000000, 500000000, 700000000, 900000000, 1100000000, 1300000000},
				EMCHz:  []int64{665600000, 2133000000, 3199000000},
			},
			StaticW: 6, CPUW: 12, GPUW: 30, EMCW: 6,
		},
		Keep: 1,
		Workloads: []benchgen.Workload{
			{Name: "net-train", Role: truth.Train, Batches: []int{32}, BaseMS: 100, GPU: 0.7, EMC: 0.15, CPU: 0.1, NeedCores: 4, Activity: 0.9},
			{Name: "net-infer", Role: truth.Infer, Batches: []int{1, 2, 4, 8}, BaseMS: 6, BatchSlope: 0.4, GPU: 0.6, EMC: 0.25, CPU: 0.1, NeedCores: 2, Activity: 0.8},
		},
	}
}

func smallPair(t testing.TB) (*PairTruth, []string, []powermode.Mode) {
	t.Helper()
	v := smallVariant()
	tab, err := benchgen.Table(v)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := NewPairTruth(tab, "net-train", "net-infer", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	names, presets := benchgen.Presets(v)
	return pt, names, presets
}

func smallProblem(pt *PairTruth, names []string, presets []powermode.Mode, b Budgets) Problem {
	p := pt.Problem()
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

func pairFromRows(t *testing.T, rows []truthRow) *PairTruth {
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
	pt, err := NewPairTruth(tab, "w-train", "w-infer", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pt
}

func fmtSscanf(name string, w *float64) (int, error) { return fmt.Sscanf(name, "MODE_%gW", w) }

func truthKey(w string, role truth.Role, m powermode.Mode, b int) truth.Key {
	return truth.Key{Workload: w, Role: role, Mode: m, Batch: b}
}
