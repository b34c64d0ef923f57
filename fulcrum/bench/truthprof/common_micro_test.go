package truthprof

import (
	"slices"
	"testing"

	"github.com/fulcrum-edge/fulcrum/truth"
)

// A micro-batch size the table lacks at one mode is left out of the truth (every mode
// keeps the other sizes), not the mode: the pair and the several-workload truth read the
// micro-batch rows through plan.Assemble and plan.CommonMicro alike.
func TestMicroSizeMissingAtOneModeIsLeftOut(t *testing.T) {
	with, _, micro := microTable(t)
	full, err := NewPairTruth(with, "net-train", "net-infer", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	gone := full.ModeAt(0)
	rows := slices.DeleteFunc(slices.Clone(with.Rows), func(r truth.Row) bool { return r.Mode == gone && r.MicroBatch == micro[1] })
	tab, err := truth.NewTable(rows)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := NewPairTruth(tab, "net-train", "net-infer", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if pt.Len() != full.Len() || !slices.Equal(pt.MicroBatches, micro[:1]) {
		t.Fatalf("pair: %d modes (of %d), micro-batch sizes %v; want every mode and only %v", pt.Len(), full.Len(), pt.MicroBatches, micro[:1])
	}
	for i := range pt.Len() {
		mp := pt.ProfileAt(i)
		if len(mp.Micro) != 1 || mp.Micro[0] != full.ProfileAt(i).Micro[0] {
			t.Fatalf("pair mode %s: micro-batch turns %+v, want the truth's at %d alone", mp.Mode, mp.Micro, micro[0])
		}
	}
	mt, err := NewMultiTruth(tab, []string{"net-train"}, []string{"net-infer"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(mt.MicroBatches) != 1 || !slices.Equal(mt.MicroBatches[0], micro[:1]) {
		t.Fatalf("several-workload truth: micro-batch sizes %v, want [%v]", mt.MicroBatches, micro[:1])
	}
	for _, m := range mt.Space().Modes() {
		p, ok := mt.Lookup(m)
		if !ok || len(p.Micro) != 1 || len(p.Micro[0]) != 1 || p.Micro[0][0].Batch != micro[0] {
			t.Fatalf("several-workload truth at %s: %+v", m, p.Micro)
		}
	}
	// With no size common to every mode, the truths have none at all.
	rows = slices.DeleteFunc(slices.Clone(rows), func(r truth.Row) bool { return r.Mode == gone && r.MicroBatch > 0 })
	if tab, err = truth.NewTable(rows); err != nil {
		t.Fatal(err)
	}
	if pt, err = NewPairTruth(tab, "net-train", "net-infer", 0, nil); err != nil || len(pt.MicroBatches) != 0 || pt.ProfileAt(1).Micro != nil {
		t.Fatalf("pair without a common size: %v, sizes %v", err, pt.MicroBatches)
	}
	if mt, err = NewMultiTruth(tab, []string{"net-train"}, []string{"net-infer"}, nil); err != nil || mt.MicroBatches != nil || mt.HasMicro() {
		t.Fatalf("several-workload truth without a common size: %v, sizes %v", err, mt.MicroBatches)
	}
}
