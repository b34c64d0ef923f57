package control

import (
	"context"
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

// Issue 32: beside a latency budget shorter than the larger training turns, the live
// profiler measures the micro-batch sizes that fit the room, leaves out those over it
// (predicted from the sizes below and the stored modes' ratios), measures the whole
// minibatch — which the budget's room cannot hold either — with overRoomSamples batches,
// and gives the searcher every size; a later search is answered from the store.
func TestLiveProfilerSkipsMicroBatchesOverTheRoom(t *testing.T) {
	e := newEnv(t, sched.RealClock{})
	defer e.sched.Close()
	w, wi := e.models[tTrain], e.models[tInfer]
	m := e.modes[3] // profiled live; the others stored with every size
	now := time.Now().UTC()
	put := func(workload string, role truth.Role, mode powermode.Mode, b, mb int, ms, mw float64) {
		if err := e.store.Put(store.Profile{Board: e.spec.Name, Workload: workload, Role: role, Mode: mode, Batch: b, MicroBatch: mb,
			TimeMS: store.TimeStats{Mean: ms, P50: ms, P95: ms}, PowerMW: store.PowerStats{Mean: mw},
			Samples: 1, StartedAt: now, FinishedAt: now, Source: store.SourceSim}); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range e.modes {
		if x == m {
			continue
		}
		put(tTrain, truth.Train, x, 32, 0, w.TimeMS(e.spec, x, 32), w.PowerMW(e.spec, x, 32))
		for _, mb := range []int{4, 8, 16} {
			put(tTrain, truth.Train, x, 32, mb, w.TimeMS(e.spec, x, mb), w.PowerMW(e.spec, x, mb))
		}
		for _, b := range []int{1, 2, 4, 8} {
			put(tInfer, truth.Infer, x, b, 0, wi.TimeMS(e.spec, x, b), wi.PowerMW(e.spec, x, b))
		}
	}
	pm := NewPowerMonitor(10 * time.Second)
	e.board.mu.Lock()
	e.board.powerFn = func(m powermode.Mode) float64 { return w.PowerMW(e.spec, m, 32) }
	e.board.mu.Unlock()
	var mu sync.Mutex
	granted := map[int]int{} // training profile batch size → grants
	deliver := func(g sched.Grant) {
		go func() {
			wl := wi
			if strings.HasPrefix(g.Worker, proto.RoleTrain) {
				wl = w
				if g.Kind == proto.KindProfile {
					mu.Lock()
					granted[g.Batch]++
					mu.Unlock()
				}
			}
			d := time.Duration(wl.TimeMS(e.spec, e.board.current(), g.Batch) * float64(time.Millisecond))
			_ = pm.Sample(context.Background(), e.board, time.Now())
			if err := e.sched.Release(g.Worker, sched.Release{Grant: g.ID, Duration: d}); err != nil {
				return
			}
			_ = e.sched.Acquire(g.Worker, 0)
		}()
	}
	trainID, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleTrain, Workload: tTrain, Batch: 32, MicroBatches: []int{4, 8, 16}}, deliver)
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
	// A budget between the turns of 8 and 16 at m (no admission margin): 4 and 8 fit, 16
	// and 32 do not.
	t8, t16, inf := w.TimeMS(e.spec, m, 8), w.TimeMS(e.spec, m, 16), wi.TimeMS(e.spec, m, 1)
	latency := (t8+microPredictSlack*t16)/2 + inf
	pair := Pair{Train: tTrain, TrainBatch: 32, Infer: tInfer, Batches: []int{1, 2, 4, 8}, MicroBatches: []int{4, 8, 16}}
	newLP := func() *LiveProfiler {
		return &LiveProfiler{Sched: e.sched, Board: e.board, Store: e.store, Power: pm, Pair: pair, LatencyMS: latency, ByRoom: true,
			Options: LiveOptions{Samples: 3, MinTime: time.Millisecond, PowerSettle: time.Millisecond}}
	}
	lp := newLP()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mp, err := lp.Profile(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := map[int]int{}
	for k, v := range granted {
		got[k] = v
	}
	mu.Unlock()
	t.Logf("budget %.1f ms at %s (turns 8: %.1f, 16: %.1f ms, inference %.1f ms); training profile batches granted %v", latency, m.Human(), t8, t16, inf, got)
	if got[16] != 0 || got[4] < 3 || got[8] < 3 || got[32] != overRoomSamples {
		t.Fatalf("training profile batches granted %v: want none of 16, 4 and 8 measured in full, the minibatch %d times", got, overRoomSamples)
	}
	key := func(mb int) store.Key {
		return store.Key{Board: e.spec.Name, Workload: tTrain, Role: truth.Train, Mode: m, Batch: 32, MicroBatch: mb}
	}
	if _, err := e.store.Get(key(16)); err == nil {
		t.Error("micro-batch 16 stored: a size over the room is never measured, so never stored")
	}
	if p, err := e.store.Get(key(0)); err != nil || p.Samples != overRoomSamples {
		t.Errorf("stored minibatch %+v, %v: want %d samples", p, err, overRoomSamples)
	}
	var p16 *plan.TrainPoint
	for i := range mp.Micro {
		if mp.Micro[i].Batch == 16 {
			p16 = &mp.Micro[i]
		}
	}
	if len(mp.Micro) != 3 || p16 == nil || p16.TimeMS <= mp.Micro[1].TimeMS || p16.TimeMS > mp.Train.TimeMS || p16.Minibatch != 32 {
		t.Fatalf("the searcher's micro-batch turns %+v (minibatch %.1f ms): want 16, 8 and 4, 16 predicted between 8 and the minibatch", mp.Micro, mp.Train.TimeMS)
	}
	if !lp.overRoom(p16.TimeMS, inf) {
		t.Errorf("predicted turn of 16 %.1f ms fits the %.1f ms budget's room", p16.TimeMS, latency)
	}
	known := lp.Known()
	if len(known) != len(e.modes) {
		t.Fatalf("%d modes known, want all %d: m lacks only a size over the room", len(known), len(e.modes))
	}
	// The controller plans from the store alone: it never claims the predicted size.
	stored, err := StoredProfiles(e.store, e.spec.Name, pair)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stored {
		if s.Mode == m && len(s.Micro) != 2 {
			t.Errorf("planned from the store at m: micro-batch turns %+v, want the measured 8 and 4", s.Micro)
		}
	}
	// A later search asks for m again: answered from the store, nothing measured.
	mu.Lock()
	clear(granted)
	mu.Unlock()
	lp2 := newLP()
	if _, err := lp2.Profile(ctx, m); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := len(granted)
	mu.Unlock()
	if c := lp2.Counts(); c.FromStore != 1 || c.Profiled != 0 || n != 0 {
		t.Errorf("second visit: counts %+v, %d sizes granted: want an answer from the store", c, n)
	}
}
