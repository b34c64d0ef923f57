package plan

import (
	"testing"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

func TestAssemble(t *testing.T) {
	m1 := powermode.Mode{Cores: 4, CPUKHz: 1, GPUHz: 1, EMCHz: 1}
	m2 := powermode.Mode{Cores: 4, CPUKHz: 2, GPUHz: 1, EMCHz: 1}
	m3 := powermode.Mode{Cores: 4, CPUKHz: 3, GPUHz: 1, EMCHz: 1}
	pt := func(w string, r truth.Role, m powermode.Mode, b int, ms float64, reps int) Measured {
		return Measured{Row: truth.Row{Workload: w, Role: r, Mode: m, Batch: b, TimeMS: ms, PowerMW: 1000 * ms}, Repeats: reps}
	}
	pts := []Measured{
		pt("train", truth.Train, m2, 16, 200, 0),
		pt("infer", truth.Infer, m2, 4, 40, 3),
		pt("infer", truth.Infer, m2, 1, 10, 2),
		pt("infer", truth.Infer, m2, 8, 80, 1), // a batch size not asked for
		pt("other", truth.Infer, m2, 1, 99, 1), // another workload
		pt("train", truth.Train, m1, 16, 100, 4),
		pt("infer", truth.Infer, m1, 1, 5, 5),
		pt("train", truth.Train, m1, 32, 300, 1), // another minibatch size
		pt("infer", truth.Infer, m3, 1, 7, 1),    // no training point: incomplete
	}
	sh := PairShape("train", 16, "infer", []int{1, 4})
	got := Assemble(sh, pts)
	if len(got) != 2 || got[0].Mode != m2 || got[1].Mode != m1 {
		t.Fatalf("assembled %+v, want m2 then m1 (the order of their first points)", got)
	}
	if p := got[0]; p.Train[0] != (TrainPoint{Batch: 16, TimeMS: 200, PowerMW: 200000}) || len(p.Infer[0]) != 2 || p.Infer[0][0].Batch != 1 || p.Infer[0][1].TimeMS != 40 || p.Repeats != 1 {
		t.Errorf("m2: %+v (want the training point, batches 1 and 4 ascending, the least repeats: 1)", p)
	}
	if p := PairOf(got[1]); p.Train.TimeMS != 100 || len(p.Infer) != 1 || p.Repeats != 4 {
		t.Errorf("m1 from a store (one batch size of two is enough): %+v", p)
	}
	sh.EveryBatch = true
	if got := Assemble(sh, pts); len(got) != 1 || got[0].Mode != m2 {
		t.Errorf("every batch size wanted: %+v, want m2 alone", got)
	}
	if mp, ok := AssembleMode(sh, m3, pts); ok || mp.Train[0].Batch != 0 || len(mp.Infer[0]) != 1 {
		t.Errorf("m3 has no training point: ok %v, %+v", ok, mp)
	}
	// Several jobs and streams, each matched by workload and role.
	multi := Shape{Train: []Wanted{{"train", []int{16}}, {"train2", []int{8}}}, Infer: []Wanted{{"infer", []int{1}}, {"other", []int{1}}}}
	pts = append(pts, pt("train2", truth.Train, m2, 8, 50, 0))
	if got := Assemble(multi, pts); len(got) != 1 || got[0].Train[1].TimeMS != 50 || got[0].Infer[1][0].TimeMS != 99 {
		t.Errorf("two jobs and two streams: %+v, want m2 alone with train2 and other", got)
	}
	if back := MultiOf(PairOf(got[0])); back.Train[0] != got[0].Train[0] || len(back.Infer) != 1 {
		t.Errorf("MultiOf(PairOf) = %+v", back)
	}
}
