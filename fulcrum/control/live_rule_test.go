package control

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// The live profiler stops a point by the offline profiler's rule (profiler/measure): a
// training point whose profile batches alternate 90 and 110 ms is measured until its
// mean's relative standard error is at most the target — 24 batches at 0.021, what
// fulcrumctl profile measures for the same sequence (profiler's TestProfileStopRule) —
// while the steady inference point stops at Samples. Before, the live profiler stopped
// every point at Samples and MinTime: the training point at 5 batches, RSE 0.050.
func TestLiveProfileStopsByTheOfflineRule(t *testing.T) {
	e := newEnv(t, sched.RealClock{})
	defer e.sched.Close()
	pm := NewPowerMonitor(10 * time.Second)
	e.board.mu.Lock()
	e.board.powerFn = func(m powermode.Mode) float64 { return e.models[tTrain].PowerMW(e.spec, m, 32) }
	e.board.mu.Unlock()
	var mu sync.Mutex
	trainProfiles := 0
	deliver := func(g sched.Grant) {
		go func() {
			wl := e.models[tInfer]
			train := strings.HasPrefix(g.Worker, proto.RoleTrain)
			if train {
				wl = e.models[tTrain]
			}
			d := time.Duration(wl.TimeMS(e.spec, e.board.current(), g.Batch) * float64(time.Millisecond))
			if train && g.Kind == proto.KindProfile {
				mu.Lock()
				i := trainProfiles // 0: the warm-up batch
				trainProfiles++
				mu.Unlock()
				switch {
				case i == 0:
					d = 100 * time.Millisecond
				case i%2 == 1:
					d = 90 * time.Millisecond
				default:
					d = 110 * time.Millisecond
				}
			}
			_ = pm.Sample(context.Background(), e.board, time.Now())
			if err := e.sched.Release(g.Worker, sched.Release{Grant: g.ID, Duration: d}); err != nil {
				return
			}
			_ = e.sched.Acquire(g.Worker, 0)
		}()
	}
	trainID, inferID := e.register(deliver)
	for _, id := range []string{trainID, inferID} {
		if err := e.sched.Acquire(id, 0); err != nil {
			t.Fatal(err)
		}
	}
	lp := &LiveProfiler{Sched: e.sched, Board: e.board, Store: e.store, Power: pm,
		Pair:    Pair{Train: tTrain, TrainBatch: 32, Infer: tInfer, Batches: []int{1}},
		Options: LiveOptions{Samples: 5, MinTime: time.Nanosecond, PowerSettle: time.Millisecond, TargetRSE: 0.021}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := e.modes[2]
	mp, err := lp.Profile(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := e.store.Get(store.Key{Board: e.spec.Name, Workload: tTrain, Role: truth.Train, Mode: m, Batch: 32})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("training point: %d batches, mean %.2f ms, rse %.4f", tr.Samples, tr.TimeMS.Mean, tr.RSE)
	if tr.Samples != 24 || tr.RSE > 0.021 || math.Abs(tr.TimeMS.Mean-100) > 1e-9 || mp.Train.TimeMS != tr.TimeMS.Mean {
		t.Errorf("training point stored %d batches, mean %v, rse %v: want 24 batches, mean 100, rse ≤ 0.021 (the offline rule)", tr.Samples, tr.TimeMS.Mean, tr.RSE)
	}
	inf, err := e.store.Get(store.Key{Board: e.spec.Name, Workload: tInfer, Role: truth.Infer, Mode: m, Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if inf.Samples != 5 || inf.RSE != 0 {
		t.Errorf("steady inference point stored %d batches, rse %v: want Samples (5), rse 0", inf.Samples, inf.RSE)
	}
}
