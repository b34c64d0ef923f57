package truthprof

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/benchgen"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// microTable is benchgen.Small's table with training micro-batch rows at B_T/2 and B_T/4
// (time a half and a quarter of the minibatch's plus 1 ms, power 90 %), and the table
// itself.
func microTable(t *testing.T) (with, without *truth.Table, micro []int) {
	t.Helper()
	tab, err := benchgen.Table(benchgen.Small())
	if err != nil {
		t.Fatal(err)
	}
	rows := append([]truth.Row(nil), tab.Rows...)
	for _, r := range tab.Rows {
		if r.Role != truth.Train {
			continue
		}
		for _, k := range []int{2, 4} {
			m := r
			m.MicroBatch, m.TimeMS, m.PowerMW = r.Batch/k, r.TimeMS/float64(k)+1, 0.9*r.PowerMW
			rows = append(rows, m)
		}
		micro = []int{r.Batch / 2, r.Batch / 4}
	}
	if with, err = truth.NewTable(rows); err != nil {
		t.Fatal(err)
	}
	return with, tab, micro
}

// Issue 32: a pair's truth carries the micro-batch turns (profiles, scoring, WithoutMicro
// for k = 1); the noisy profiler measures them with every other value drawn as it is
// from the table without them, and pools their repeats.
func TestPairTruthMicroBatches(t *testing.T) {
	with, without, micro := microTable(t)
	pt, err := NewPairTruth(with, "net-train", "net-infer", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	old, err := NewPairTruth(without, "net-train", "net-infer", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(pt.MicroBatches) != 2 || pt.MicroBatches[0] != micro[0] || pt.MicroBatches[1] != micro[1] || len(old.MicroBatches) != 0 {
		t.Fatalf("micro-batch sizes %v (table without them: %v), want %v", pt.MicroBatches, old.MicroBatches, micro)
	}
	i := pt.Len() / 2
	mp := pt.ProfileAt(i)
	if len(mp.Micro) != 2 || mp.Micro[1].Batch != micro[1] || mp.Micro[1].Minibatch != mp.Train.Batch || mp.Micro[1].TimeMS != mp.Train.TimeMS/4+1 {
		t.Fatalf("profile's micro-batch turns %+v (minibatch %+v)", mp.Micro, mp.Train)
	}
	if got := pt.WithoutMicro().ProfileAt(i); got.Micro != nil || got.Train != mp.Train {
		t.Fatalf("WithoutMicro profile %+v", got)
	}
	m, _ := plan.NewModel(plan.Budgets{RateRPS: 5, LatencyMS: 1000, PowerMW: 1e6}, pt.Batches)
	e, ok := pt.Score(m, pt.ModeAt(i), pt.Batches[0], micro[1])
	if !ok || e.MicroBatch != micro[1] || e.ThroughputSPS != m.Evaluate(pt.ModeAt(i), mp.Micro[1], mp.Infer[0]).ThroughputSPS {
		t.Fatalf("score at micro-batch %d: %+v %v", micro[1], e, ok)
	}
	if _, ok := pt.Score(m, pt.ModeAt(i), pt.Batches[0], 3); ok {
		t.Fatal("scored a micro-batch the truth does not have")
	}
	if _, ok := pt.WithoutMicro().Score(m, pt.ModeAt(i), pt.Batches[0], micro[1]); ok {
		t.Fatal("WithoutMicro scored a micro-batch")
	}

	ctx := context.Background()
	a, _ := NewPairProfiler(pt, 0.03, rand.New(rand.NewPCG(3, 3)))
	b, _ := NewPairProfiler(old, 0.03, rand.New(rand.NewPCG(3, 3)))
	pa, _ := a.Profile(ctx, pt.ModeAt(i))
	pb, _ := b.Profile(ctx, pt.ModeAt(i))
	if pa.Train != pb.Train || len(pa.Infer) != len(pb.Infer) || pa.Infer[0] != pb.Infer[0] || pa.Infer[len(pa.Infer)-1] != pb.Infer[len(pb.Infer)-1] {
		t.Fatalf("micro-batch rows changed the other values' noise: %+v vs %+v", pa, pb)
	}
	if pa.Micro[0].TimeMS == mp.Micro[0].TimeMS || len(pa.Micro) != 2 {
		t.Fatalf("micro-batch turns not measured with noise: %+v", pa.Micro)
	}
	var sum float64
	const reps = 200
	for range reps {
		r, _ := a.Remeasure(ctx, pt.ModeAt(i))
		sum += r.Micro[1].TimeMS
	}
	k := a.Known()[0]
	if math.Abs(k.Micro[1].TimeMS-sum/reps) > 1e-9*sum || k.Repeats != reps || k.Micro[1].Batch != micro[1] {
		t.Fatalf("pooled micro-batch turn %+v ×%d, want the repeats' mean %v", k.Micro[1], k.Repeats, sum/reps)
	}
}

// Issue 32 for several workloads: the multi truth carries the training micro-batch rows
// (WithoutMicro drops them and leaves the rest as the table without them gives it), its
// noisy measurements jitter them after everything else (the other values' noise is
// unchanged), and the pooled profiler keeps them through repeats, averaged, and hands
// them to the pooled pair the searchers walk.
func TestMultiTruthMicroBatches(t *testing.T) {
	with, without, micro := microTable(t)
	mt, err := NewMultiTruth(with, []string{"net-train"}, []string{"net-infer"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	old, err := NewMultiTruth(without, []string{"net-train"}, []string{"net-infer"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !mt.HasMicro() || len(mt.MicroBatches) != 1 || mt.MicroBatches[0][0] != micro[0] || mt.MicroBatches[0][1] != micro[1] || old.HasMicro() {
		t.Fatalf("micro-batch sizes %v (table without: %v): want [%v]", mt.MicroBatches, old.MicroBatches, micro)
	}
	p := mt.Profiles()[0]
	if len(p.Micro) != 1 || len(p.Micro[0]) != 2 || p.Micro[0][0].Batch != micro[0] || p.Micro[0][0].Minibatch != p.Train[0].Batch {
		t.Fatalf("profile micro-batch turns %+v", p.Micro)
	}
	if got := p.TrainChoices(0); len(got) != 3 {
		t.Fatalf("training choices %+v: want the minibatch and two micro-batches", got)
	}
	wo := mt.WithoutMicro()
	if wo.HasMicro() || mt.Profiles()[0].Micro == nil {
		t.Fatal("WithoutMicro kept micro-batches or wrote through to the truth it came from")
	}
	m := p.Mode
	a, _ := wo.Measure(m, 0.05, 7)
	b, _ := old.Measure(m, 0.05, 7)
	c, _ := mt.Measure(m, 0.05, 7)
	if a.Train[0] != b.Train[0] || a.Infer[0][0] != b.Infer[0][0] || c.Train[0] != b.Train[0] || c.Infer[0][0] != b.Infer[0][0] || len(c.Micro) != 1 || c.Micro[0][0] == p.Micro[0][0] {
		t.Fatalf("noise: without micro %+v, table without %+v, with %+v", a, b, c)
	}
	pp, err := NewPooledProfiler(mt, 0.05, 7, []float64{10})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, err := pp.Remeasure(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	second, err := pp.Remeasure(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Micro) != 2 || len(second.Micro) != 2 {
		t.Fatalf("pooled pair micro-batch turns %+v, %+v: want two each", first.Micro, second.Micro)
	}
	got := pp.Multi()[0]
	if got.Repeats != 2 || len(got.Micro) != 1 || len(got.Micro[0]) != 2 {
		t.Fatalf("after two repeats: %+v: want both micro-batch turns, averaged", got)
	}
	want := (first.Micro[1].TimeMS + second.Micro[1].TimeMS) / 2
	if math.Abs(got.Micro[0][1].TimeMS-want) > 1e-9*want {
		t.Fatalf("mean micro-batch turn %v ms, want %v (the repeats' mean)", got.Micro[0][1].TimeMS, want)
	}
}
