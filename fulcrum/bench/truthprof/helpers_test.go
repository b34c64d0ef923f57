package truthprof

import (
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/benchgen"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// smallPair is benchgen.Small's only pair, with the board's presets.
func smallPair(t testing.TB) (*PairTruth, []string, []powermode.Mode) {
	t.Helper()
	v := benchgen.Small()
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

func truthKey(w string, role truth.Role, m powermode.Mode, b int) truth.Key {
	return truth.Key{Workload: w, Role: role, Mode: m, Batch: b}
}
