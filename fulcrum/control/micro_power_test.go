package control

import (
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// TestPowerCorrectionReachesMicroBatchTurns: a mode that broke the power budget live
// carries a learned correction k, and the profiles the decision plans from give its
// minibatch and inference powers times k. Its micro-batch turns were left as stored, so
// a plan (and rule 1's power step) scored micro-batched training at that mode with the
// power the board had already shown to be too low.
func TestPowerCorrectionReachesMicroBatchTurns(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	now := time.Now().UTC()
	for _, m := range e.modes {
		w := e.models[tTrain]
		ms, mw := w.TimeMS(e.spec, m, 8), w.PowerMW(e.spec, m, 8)
		if err := e.store.Put(store.Profile{Board: e.spec.Name, Workload: tTrain, Role: truth.Train, Mode: m, Batch: 32, MicroBatch: 8,
			TimeMS: store.TimeStats{Mean: ms, P50: ms, P95: ms}, PowerMW: store.PowerStats{Mean: mw},
			Samples: 1, StartedAt: now, FinishedAt: now, Source: store.SourceSim}); err != nil {
			t.Fatal(err)
		}
	}
	c := e.controller(Config{}, plan.Targets{LatencyMS: 400, PowerMW: 60000, RateRPS: 20})
	e.board.set(20000, nil)
	deliver := func(sched.Grant) {}
	if _, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleTrain, Workload: tTrain, Batch: 32, MicroBatches: []int{8}}, deliver); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleInfer, Workload: tInfer, Batch: 1, BatchSizes: []int{1, 2, 4, 8}}, deliver); err != nil {
		t.Fatal(err)
	}
	e.tick(c, 300*time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	before, err := c.unrefinedProfiles()
	if err != nil {
		t.Fatal(err)
	}
	const k = 1.5
	m := e.modes[0]
	c.corrP[m] = k
	after, err := c.unrefinedProfiles()
	if err != nil {
		t.Fatal(err)
	}
	find := func(ps []plan.ModeProfile) plan.ModeProfile {
		for _, p := range ps {
			if p.Mode == m {
				return p
			}
		}
		t.Fatalf("mode %s not in the profiles", m.Human())
		return plan.ModeProfile{}
	}
	b, a := find(before), find(after)
	if len(b.Micro) == 0 || len(a.Micro) != len(b.Micro) {
		t.Fatalf("micro-batch turns before %+v, after %+v: want the stored micro-batch 8", b.Micro, a.Micro)
	}
	if got, want := a.Train.PowerMW, b.Train.PowerMW*k; got != want {
		t.Fatalf("minibatch power %.0f mW with the correction, want %.0f", got, want)
	}
	for i := range a.Micro {
		if got, want := a.Micro[i].PowerMW, b.Micro[i].PowerMW*k; got != want {
			t.Errorf("micro-batch %d turn power %.0f mW with the correction %.1f, want %.0f (as the minibatch's)", a.Micro[i].Batch, got, k, want)
		}
	}
}
