package control

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// Issue 32: a latency budget no mode meets with whole minibatches pauses training — unless
// the training worker declared micro-batches: then training keeps running in turns short
// enough for the admission room (the scheduler picks the size). A power budget nothing
// meets still pauses it: shorter turns do not lower the power.
func TestInfeasibleLatencyKeepsMicroBatchedTrainingRunning(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	c := e.controller(Config{}, plan.Targets{LatencyMS: 30, PowerMW: 35000, RateRPS: 20})
	e.board.set(20000, nil)
	deliver := func(sched.Grant) {}
	if _, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleTrain, Workload: tTrain, Batch: 32, MicroBatches: []int{4, 8, 16}}, deliver); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleInfer, Workload: tInfer, Batch: 1, BatchSizes: []int{1, 2, 4, 8}}, deliver); err != nil {
		t.Fatal(err)
	}
	e.tick(c, 300*time.Millisecond)
	st := c.Status()
	if st.Current == nil || st.Current.Predicted.Feasible || st.Current.Predicted.Binding != string(plan.ConstraintLatency) {
		t.Fatalf("plan %+v: want an infeasible plan bound by latency (whole minibatches)", st.Current)
	}
	if e.sched.Snapshot().TrainingPaused {
		t.Fatal("training paused although the training worker runs micro-batches that fit the room")
	}
	for _, ev := range c.Events().List(0) {
		if strings.HasPrefix(ev.Reason, "training paused") {
			t.Fatalf("event %q: training must not be paused", ev.Reason)
		}
	}
	// A power budget nothing meets still pauses it.
	c.SetTargets(plan.Targets{LatencyMS: 30, PowerMW: 1000, RateRPS: 20})
	e.tick(c, 300*time.Millisecond)
	if st := c.Status(); st.Current == nil || st.Current.Predicted.Binding == string(plan.ConstraintLatency) {
		t.Skipf("plan %+v: the power budget does not bind here", st.Current)
	}
	if !e.sched.Snapshot().TrainingPaused {
		t.Fatal("training runs although the power budget binds")
	}
}

// When even the smallest declared micro-batch does not fit the room, training is paused
// as before: shorter turns would still make requests miss.
func TestMicroBatchesThatDoNotFitStillPause(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	c := e.controller(Config{}, plan.Targets{LatencyMS: 4, PowerMW: 35000, RateRPS: 20})
	e.board.set(20000, nil)
	deliver := func(sched.Grant) {}
	if _, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleTrain, Workload: tTrain, Batch: 32, MicroBatches: []int{16}}, deliver); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleInfer, Workload: tInfer, Batch: 1, BatchSizes: []int{1, 2, 4, 8}}, deliver); err != nil {
		t.Fatal(err)
	}
	e.tick(c, 300*time.Millisecond)
	if st := c.Status(); st.Current == nil || st.Current.Predicted.Binding != string(plan.ConstraintLatency) {
		t.Fatalf("plan %+v: want an infeasible plan bound by latency", st.Current)
	}
	if !e.sched.Snapshot().TrainingPaused {
		t.Fatal("training runs although not even its smallest micro-batch fits a 4 ms budget")
	}
}

// Issue 32, profiled live: a mode stored before the trainer declared micro-batches is
// planned from (whole minibatches there) but is not known to a searcher; profiling it
// measures the declared micro-batch sizes alone — profile grants of those sizes on the
// trainer — stores them (source live, micro_batch set) and counts one profile; the
// mode is then known with its micro-batch turns.
func TestLiveProfilerMeasuresMissingMicroBatches(t *testing.T) {
	e := newEnv(t, sched.RealClock{})
	defer e.sched.Close()
	e.seed()
	pm := NewPowerMonitor(10 * time.Second)
	e.board.mu.Lock()
	e.board.powerFn = func(m powermode.Mode) float64 { return e.models[tTrain].PowerMW(e.spec, m, 32) }
	e.board.mu.Unlock()
	var mu sync.Mutex
	profiled := map[string][]int{} // worker role → profile batch sizes granted
	deliver := func(g sched.Grant) {
		go func() {
			wl := e.models[tInfer]
			if strings.HasPrefix(g.Worker, proto.RoleTrain) {
				wl = e.models[tTrain]
			}
			if g.Kind == proto.KindProfile {
				mu.Lock()
				role, _, _ := strings.Cut(g.Worker, "-")
				profiled[role] = append(profiled[role], g.Batch)
				mu.Unlock()
			}
			d := time.Duration(wl.TimeMS(e.spec, e.board.current(), g.Batch) * float64(time.Millisecond))
			_ = pm.Sample(context.Background(), e.board, time.Now())
			if err := e.sched.Release(g.Worker, sched.Release{Grant: g.ID, Duration: d}); err != nil {
				return
			}
			_ = e.sched.Acquire(g.Worker, 0)
		}()
	}
	trainID, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleTrain, Workload: tTrain, Batch: 32, MicroBatches: []int{8, 16}}, deliver)
	if err != nil {
		t.Fatal(err)
	}
	inferID, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleInfer, Workload: tInfer, Batch: 1, BatchSizes: []int{1, 2, 4, 8}}, deliver)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{trainID, inferID} {
		if err := e.sched.Acquire(id, 0); err != nil {
			t.Fatal(err)
		}
	}
	pair := Pair{Train: tTrain, TrainBatch: 32, Infer: tInfer, Batches: []int{1, 2, 4, 8}, MicroBatches: []int{8, 16}}
	lp := &LiveProfiler{Sched: e.sched, Board: e.board, Store: e.store, Power: pm, Pair: pair,
		Options: LiveOptions{Samples: 3, MinTime: time.Millisecond, PowerSettle: time.Millisecond}}
	stored, err := StoredProfiles(e.store, e.spec.Name, pair)
	if err != nil || len(stored) != len(e.modes) || stored[0].Micro != nil {
		t.Fatalf("planning from a store without micro-batch rows: %d profiles (%v), want %d of whole minibatches", len(stored), err, len(e.modes))
	}
	if k := lp.Known(); len(k) != 0 {
		t.Fatalf("%d modes known to a searcher, want none: each lacks the declared micro-batches", len(k))
	}
	m := e.modes[3]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mp, err := lp.Profile(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := profiled
	mu.Unlock()
	if len(got[proto.RoleInfer]) != 0 || len(got[proto.RoleTrain]) == 0 || slices.ContainsFunc(got[proto.RoleTrain], func(b int) bool { return b != 8 && b != 16 }) {
		t.Fatalf("profile batches granted %v: want the trainer's micro-batches 8 and 16 alone", got)
	}
	if c := lp.Counts(); c.Profiled != 1 || c.Points != 2 {
		t.Errorf("counts %+v: want one profile of two points", c)
	}
	if len(mp.Micro) != 2 || mp.Micro[0].Batch != 16 || mp.Micro[1].Batch != 8 || mp.Micro[1].Minibatch != 32 || mp.Micro[1].TimeMS >= mp.Micro[0].TimeMS {
		t.Fatalf("profile's micro-batch turns %+v", mp.Micro)
	}
	for _, mb := range []int{8, 16} {
		p, err := e.store.Get(store.Key{Board: e.spec.Name, Workload: tTrain, Role: truth.Train, Mode: m, Batch: 32, MicroBatch: mb})
		if err != nil || p.Source != store.SourceLive || p.Samples < 3 {
			t.Errorf("stored micro-batch %d: %+v, %v", mb, p, err)
		}
	}
	if k := lp.Known(); len(k) != 1 || k[0].Mode != m || len(k[0].Micro) != 2 {
		t.Fatalf("known after profiling: %+v, want mode %s with its two micro-batch turns", k, m.Human())
	}
}
