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
	multi := Shape{Train: []Wanted{{Workload: "train", Batches: []int{16}}, {Workload: "train2", Batches: []int{8}}}, Infer: []Wanted{{Workload: "infer", Batches: []int{1}}, {Workload: "other", Batches: []int{1}}}}
	pts = append(pts, pt("train2", truth.Train, m2, 8, 50, 0))
	if got := Assemble(multi, pts); len(got) != 1 || got[0].Train[1].TimeMS != 50 || got[0].Infer[1][0].TimeMS != 99 {
		t.Errorf("two jobs and two streams: %+v, want m2 alone with train2 and other", got)
	}
	if back := MultiOf(PairOf(got[0])); back.Train[0] != got[0].Train[0] || len(back.Infer) != 1 {
		t.Errorf("MultiOf(PairOf) = %+v", back)
	}
}

// Issue 32: a training job's micro-batch points (rows with MicroBatch) become its Micro
// turns, largest first, when the shape wants those sizes; a mode lacking one is
// incomplete; without Micro wanted they are left out and the minibatch point is never
// taken from a micro-batch row.
func TestAssembleMicroBatches(t *testing.T) {
	m1 := powermode.Mode{Cores: 4, CPUKHz: 1, GPUHz: 1, EMCHz: 1}
	m2 := powermode.Mode{Cores: 4, CPUKHz: 2, GPUHz: 1, EMCHz: 1}
	pt := func(r truth.Role, m powermode.Mode, b, micro int, ms float64, reps int) Measured {
		w := "infer"
		if r == truth.Train {
			w = "train"
		}
		return Measured{Row: truth.Row{Workload: w, Role: r, Mode: m, Batch: b, MicroBatch: micro, TimeMS: ms, PowerMW: 1000 * ms}, Repeats: reps}
	}
	pts := []Measured{
		pt(truth.Train, m1, 32, 8, 30, 2), // a micro-batch row before the minibatch's
		pt(truth.Train, m1, 32, 0, 100, 2),
		pt(truth.Train, m1, 32, 16, 55, 1),
		pt(truth.Train, m1, 32, 4, 17, 1), // a size not declared
		pt(truth.Infer, m1, 1, 0, 5, 2),
		pt(truth.Train, m2, 32, 0, 90, 1), // no micro-batch points: incomplete with Micro
		pt(truth.Train, m2, 32, 8, 28, 1),
		pt(truth.Infer, m2, 1, 0, 4, 1),
	}
	sh := PairShape("train", 32, "infer", []int{1})
	plain := Assemble(sh, pts)
	if len(plain) != 2 || plain[0].Train[0].TimeMS != 100 || plain[0].Micro != nil || PairOf(plain[0]).Micro != nil {
		t.Fatalf("without Micro wanted: %+v, want both modes, the minibatch's 100 ms, no micro-batch turns", plain)
	}
	sh.Train[0].Micro = []int{8, 16}
	got := Assemble(sh, pts)
	if len(got) != 1 || got[0].Mode != m1 {
		t.Fatalf("with micro-batches 8 and 16: %+v, want m1 alone (m2 lacks 16)", got)
	}
	p := PairOf(got[0])
	want := []TrainPoint{{Batch: 16, TimeMS: 55, PowerMW: 55000, Minibatch: 32}, {Batch: 8, TimeMS: 30, PowerMW: 30000, Minibatch: 32}}
	if p.Train.TimeMS != 100 || len(p.Micro) != 2 || p.Micro[0] != want[0] || p.Micro[1] != want[1] || p.Repeats != 1 {
		t.Errorf("m1: %+v, want the minibatch at 100 ms and micro-batches %+v, repeats 1", p, want)
	}
	if choices := p.TrainChoices(); len(choices) != 3 || choices[2].MicroBatch() != 8 {
		t.Errorf("training choices %+v: want the minibatch, 16 and 8", choices)
	}
	if mp, ok := AssembleMode(sh, m2, pts); ok || len(mp.Micro[0]) != 1 {
		t.Errorf("m2 lacks micro-batch 16: ok %v, %+v", ok, mp)
	}
	sh.MicroOptional = true
	if got := Assemble(sh, pts); len(got) != 2 || len(got[1].Micro[0]) != 1 || got[1].Micro[0][0].Batch != 8 {
		t.Errorf("micro-batches optional: %+v, want both modes, m2 with its micro-batch 8 alone", got)
	}
}
