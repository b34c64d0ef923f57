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

// recordMicro is the real scheduler with every SetMicroBatch the controller made
// recorded (worker → the last size set): the size set takes effect at the worker's next
// minibatch, which these tests' scripted workers never start.
type recordMicro struct {
	*sched.Scheduler
	mu  sync.Mutex
	set map[string]int
}

func (r *recordMicro) SetMicroBatch(id string, mb int) error {
	if err := r.Scheduler.SetMicroBatch(id, mb); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.set == nil {
		r.set = map[string]int{}
	}
	r.set[id] = mb
	return nil
}

func (r *recordMicro) sizeOf(id string) (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	mb, ok := r.set[id]
	return mb, ok
}

// seedMicro stores noise-free profiles of the training workload at micro-batch sizes of
// its minibatch of 32 at the env's modes (the simulator's batch curve at that size).
func (e *env) seedMicro(sizes ...int) {
	e.t.Helper()
	now := time.Now().UTC()
	w := e.models[tTrain]
	for _, m := range e.modes {
		for _, mb := range sizes {
			ms, mw := w.TimeMS(e.spec, m, mb), w.PowerMW(e.spec, m, mb)
			if err := e.store.Put(store.Profile{Board: e.spec.Name, Workload: tTrain, Role: truth.Train, Mode: m, Batch: 32, MicroBatch: mb,
				TimeMS: store.TimeStats{Mean: ms, P50: ms, P95: ms}, PowerMW: store.PowerStats{Mean: mw},
				Samples: 1, StartedAt: now, FinishedAt: now, Source: store.SourceSim}); err != nil {
				e.t.Fatal(err)
			}
		}
	}
}

// Issue 32 with several streams, on the fake clock: the stored micro-batch rows reach
// the joint decision, which runs the trainer in micro-batches where its minibatch breaks
// both streams' budgets; the controller sets the size on the trainer, and on a trainer
// of the same job that registers later (a reconnect re-plans nothing).
func TestSeveralStreamsSetEachJobsMicroBatch(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	e.seedMicro(8, 16)
	e.seedStream(tInfer2)
	rec := &recordMicro{Scheduler: e.sched}
	c, err := New(Options{Sched: rec, Board: e.board, Store: e.store, Clock: e.clock, Targets: plan.Targets{LatencyMS: 60, PowerMW: 35000, RateRPS: 20}})
	if err != nil {
		t.Fatal(err)
	}
	e.board.set(20000, nil)
	spec := sched.WorkerSpec{Role: proto.RoleTrain, Workload: tTrain, Batch: 32, MicroBatches: []int{8, 16}}
	tr, _, err := e.sched.Register(spec, func(sched.Grant) {})
	if err != nil {
		t.Fatal(err)
	}
	e.registerInfer(tInfer)
	e.registerInfer(tInfer2)
	e.tick(c, 300*time.Millisecond)
	st := c.Status()
	if st.Current == nil || len(st.Current.Streams) != 2 {
		t.Fatalf("status %+v: want a plan for both streams", st)
	}
	cur := *st.Current
	if !cur.Predicted.Feasible || cur.MicroBatch() == 0 || len(cur.Train) != 1 || cur.Train[0] != (TrainChoice{Workload: tTrain, Batch: 32, MicroBatch: cur.MicroBatch()}) {
		t.Fatalf("plan %+v (jobs %+v): want a feasible plan running %s in micro-batches", cur, cur.Train, tTrain)
	}
	// The decision is plan.MultiDecider's over the stored profiles with the micro-batch rows.
	g := &group{Train: []TrainJob{{Workload: tTrain, Batch: 32, MicroBatches: []int{8, 16}}}, Streams: []StreamSpec{{tInfer, []int{1, 2, 4, 8}}, {tInfer2, []int{1, 2, 4, 8}}}}
	ps, err := StoredMultiProfiles(e.store, e.spec.Name, g)
	if err != nil || len(ps) != len(e.modes) || len(ps[0].Micro) != 1 || len(ps[0].Micro[0]) != 2 {
		t.Fatalf("stored multi profiles: %d, %v; want one per mode with the two micro-batch rows", len(ps), err)
	}
	mb := plan.MultiBudgets{Streams: []plan.StreamBudget{{Name: tInfer, RateRPS: 20, LatencyMS: 60}, {Name: tInfer2, RateRPS: 20, LatencyMS: 60}}, PowerMW: 35000}
	d, err := c.Rules().ForMulti(mb, c.Config().InferBatches).Decide(ps)
	if err != nil {
		t.Fatal(err)
	}
	if cur.Mode != d.Best.Mode || !slices.Equal(d.Best.MicroBatches, []int{cur.MicroBatch()}) || cur.Predicted.ThroughputSPS != d.Best.ObjectiveSPS {
		t.Fatalf("applied %s micro-batch %d (%.1f samples/s); the decision is %s %v (%.1f)", cur.Mode.Human(), cur.MicroBatch(), cur.Predicted.ThroughputSPS,
			d.Best.Mode.Human(), d.Best.MicroBatches, d.Best.ObjectiveSPS)
	}
	if mb, ok := rec.sizeOf(tr); !ok || mb != cur.MicroBatch() {
		t.Fatalf("trainer %s set to micro-batch %d (%v), the plan runs %d", tr, mb, ok, cur.MicroBatch())
	}
	if e.sched.Snapshot().TrainingPaused {
		t.Fatal("training paused under a feasible micro-batch plan")
	}
	// The trainer reconnects: the same job, nothing to re-plan, the plan's size again.
	e.sched.Unregister(tr)
	tr2, _, err := e.sched.Register(spec, func(sched.Grant) {})
	if err != nil {
		t.Fatal(err)
	}
	e.tick(c, 100*time.Millisecond)
	if mb, ok := rec.sizeOf(tr2); !ok || mb != cur.MicroBatch() {
		t.Fatalf("reconnected trainer %s set to micro-batch %d (%v), the plan runs %d", tr2, mb, ok, cur.MicroBatch())
	}
	if st := c.Status(); st.Current == nil || st.Current.MicroBatch() != cur.MicroBatch() {
		t.Fatalf("plan after the reconnect %+v", st.Current)
	}
}
