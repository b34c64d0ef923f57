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

// The live profiler stops a point by the offline profiler's rule (profiler/measure). By
// default its precision wait is off (max_samples 0): a training point whose profile
// batches alternate 90 and 110 ms stops at Samples and MinTime, 5 batches at RSE 0.050,
// as before the loops were one. With max_samples 50 and a target of 0.021 it is
// measured until its mean's relative standard error is at most the target: 24 batches,
// what fulcrumctl profile measures for the same sequence (profiler's
// TestProfileStopRule). The steady inference point stops at Samples either way.
func TestLiveProfileStopRule(t *testing.T) {
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, tc := range []struct {
		maxSamples, wantN int
		wantMean, rseMax  float64
	}{
		{0, 5, 98, 0.051},
		{50, 24, 100, 0.021},
	} {
		mu.Lock()
		trainProfiles = 0
		mu.Unlock()
		lp := &LiveProfiler{Sched: e.sched, Board: e.board, Store: e.store, Power: pm,
			Pair:    Pair{Train: tTrain, TrainBatch: 32, Infer: tInfer, Batches: []int{1}},
			Options: LiveOptions{Samples: 5, MinTime: time.Nanosecond, PowerSettle: time.Millisecond, MaxSamples: tc.maxSamples, TargetRSE: 0.021}}
		m := e.modes[2+i]
		mp, err := lp.Profile(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := e.store.Get(store.Key{Board: e.spec.Name, Workload: tTrain, Role: truth.Train, Mode: m, Batch: 32})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("max_samples %d: training point %d batches, mean %.2f ms, rse %.4f", tc.maxSamples, tr.Samples, tr.TimeMS.Mean, tr.RSE)
		if tr.Samples != tc.wantN || tr.RSE > tc.rseMax || math.Abs(tr.TimeMS.Mean-tc.wantMean) > 1e-9 || mp.Train.TimeMS != tr.TimeMS.Mean {
			t.Errorf("max_samples %d: training point stored %d batches, mean %v, rse %v: want %d batches, mean %v, rse ≤ %v",
				tc.maxSamples, tr.Samples, tr.TimeMS.Mean, tr.RSE, tc.wantN, tc.wantMean, tc.rseMax)
		}
		inf, err := e.store.Get(store.Key{Board: e.spec.Name, Workload: tInfer, Role: truth.Infer, Mode: m, Batch: 1})
		if err != nil {
			t.Fatal(err)
		}
		if inf.Samples != 5 || inf.RSE != 0 {
			t.Errorf("max_samples %d: steady inference point stored %d batches, rse %v: want Samples (5), rse 0", tc.maxSamples, inf.Samples, inf.RSE)
		}
	}
}
