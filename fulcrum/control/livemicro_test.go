package control

import (
	"context"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// Issue 32: beside a latency budget shorter than the larger training turns, the live
// profiler measures the micro-batch sizes that fit the room, leaves out those over it
// (predicted from the sizes below and the stored modes' ratios), measures the whole
// minibatch — which the budget's room cannot hold either — not at all (a bound from the
// largest size measured), and gives the searcher every size; a later search is answered
// from the store, and a search beside a budget whose room holds the minibatch measures
// it.
// roomHarness is a live profiler's world for the room tests: every mode but m stored with
// every training size and inference batch, a board drawing the minibatch's power, and
// a trainer (micro-batches 4, 8, 16 of 32) and an inference server (batches 1–8) that
// run each grant for the simulated time, counting the profile batches by role and size.
type roomHarness struct {
	e     *env
	m     powermode.Mode
	w, wi *sim.Workload
	pm    *PowerMonitor
	mu    sync.Mutex
	grant map[string]map[int]int // role → batch → profile grants
}

func newRoomHarness(t *testing.T) *roomHarness {
	t.Helper()
	e := newEnv(t, sched.RealClock{})
	t.Cleanup(e.sched.Close)
	h := &roomHarness{e: e, m: e.modes[3], w: e.models[tTrain], wi: e.models[tInfer], pm: NewPowerMonitor(10 * time.Second),
		grant: map[string]map[int]int{proto.RoleTrain: {}, proto.RoleInfer: {}}}
	now := time.Now().UTC()
	put := func(workload string, role truth.Role, mode powermode.Mode, b, mb int, ms, mw float64) {
		if err := e.store.Put(store.Profile{Board: e.spec.Name, Workload: workload, Role: role, Mode: mode, Batch: b, MicroBatch: mb,
			TimeMS: store.TimeStats{Mean: ms, P50: ms, P95: ms}, PowerMW: store.PowerStats{Mean: mw},
			Samples: 1, StartedAt: now, FinishedAt: now, Source: store.SourceSim}); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range e.modes {
		if x == h.m {
			continue
		}
		put(tTrain, truth.Train, x, 32, 0, h.w.TimeMS(e.spec, x, 32), h.w.PowerMW(e.spec, x, 32))
		for _, mb := range []int{4, 8, 16} {
			put(tTrain, truth.Train, x, 32, mb, h.w.TimeMS(e.spec, x, mb), h.w.PowerMW(e.spec, x, mb))
		}
		for _, b := range []int{1, 2, 4, 8} {
			put(tInfer, truth.Infer, x, b, 0, h.wi.TimeMS(e.spec, x, b), h.wi.PowerMW(e.spec, x, b))
		}
	}
	e.board.mu.Lock()
	e.board.powerFn = func(m powermode.Mode) float64 { return h.w.PowerMW(e.spec, m, 32) }
	e.board.mu.Unlock()
	deliver := func(g sched.Grant) {
		go func() {
			wl, role := h.wi, proto.RoleInfer
			if strings.HasPrefix(g.Worker, proto.RoleTrain) {
				wl, role = h.w, proto.RoleTrain
			}
			if g.Kind == proto.KindProfile {
				h.mu.Lock()
				h.grant[role][g.Batch]++
				h.mu.Unlock()
			}
			d := time.Duration(wl.TimeMS(e.spec, e.board.current(), g.Batch) * float64(time.Millisecond))
			_ = h.pm.Sample(context.Background(), e.board, time.Now())
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
	return h
}

// granted is a copy of the profile grants of role by batch, which it then clears.
func (h *roomHarness) granted(role string) map[int]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := maps.Clone(h.grant[role])
	clear(h.grant[role])
	return out
}

// profiler is a live profiler of the harness's pair beside latency budget latencyMS.
func (h *roomHarness) profiler(latencyMS float64) *LiveProfiler {
	pair := Pair{Train: tTrain, TrainBatch: 32, Infer: tInfer, Batches: []int{1, 2, 4, 8}, MicroBatches: []int{4, 8, 16}}
	return &LiveProfiler{Sched: h.e.sched, Board: h.e.board, Store: h.e.store, Power: h.pm, Pair: pair, LatencyMS: latencyMS, ByRoom: true,
		Options: LiveOptions{Samples: 3, MinTime: time.Millisecond, PowerSettle: time.Millisecond}}
}

func TestLiveProfilerSkipsMicroBatchesOverTheRoom(t *testing.T) {
	h := newRoomHarness(t)
	e, w, wi, m := h.e, h.w, h.wi, h.m
	// A budget between the turns of 8 and 16 at m (no admission margin): 4 and 8 fit, 16
	// and 32 do not.
	t8, t16, inf := w.TimeMS(e.spec, m, 8), w.TimeMS(e.spec, m, 16), wi.TimeMS(e.spec, m, 1)
	latency := (t8+microPredictSlack*t16)/2 + inf
	newLP := func() *LiveProfiler { return h.profiler(latency) }
	pair := newLP().Pair
	lp := newLP()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mp, err := lp.Profile(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	got, gotInfer := h.granted(proto.RoleTrain), h.granted(proto.RoleInfer)
	t.Logf("budget %.1f ms at %s (turns 8: %.1f, 16: %.1f ms, inference %.1f ms); training profile batches granted %v", latency, m.Human(), t8, t16, inf, got)
	if got[16] != 0 || got[4] < 3 || got[8] < 3 || got[32] != 0 {
		t.Fatalf("training profile batches granted %v: want none of 16 and 32, 4 and 8 measured in full", got)
	}
	if c := lp.Counts(); c.Bound != 1 {
		t.Errorf("counts %+v: want the one minibatch stored as a bound counted", c)
	}
	if len(gotInfer) != 4 {
		t.Fatalf("inference profile batches granted %v: want every batch (each fits this room)", gotInfer)
	}
	key := func(mb int) store.Key {
		return store.Key{Board: e.spec.Name, Workload: tTrain, Role: truth.Train, Mode: m, Batch: 32, MicroBatch: mb}
	}
	if _, err := e.store.Get(key(16)); err == nil {
		t.Error("micro-batch 16 stored: a size over the room is never measured, so never stored")
	}
	p8, err8 := e.store.Get(key(8))
	if p, err := e.store.Get(key(0)); err != nil || err8 != nil || !p.Bound || p.Source != store.SourceLive ||
		math.Abs(p.TimeMS.Mean-4*p8.TimeMS.Mean) > 1e-9 || p.PowerMW.Mean < p8.PowerMW.Mean || p.TimeMS.Mean < w.TimeMS(e.spec, m, 32) {
		t.Errorf("stored minibatch %+v, %v (micro-batch 8: %+v, %v): want a bound, 4 × the turn of 8 (at least the true %.1f ms), its power at least 8's",
			p, err, p8.TimeMS, err8, w.TimeMS(e.spec, m, 32))
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
	lp2 := newLP()
	if _, err := lp2.Profile(ctx, m); err != nil {
		t.Fatal(err)
	}
	n := len(h.granted(proto.RoleTrain)) + len(h.granted(proto.RoleInfer))
	if c := lp2.Counts(); c.FromStore != 1 || c.Profiled != 0 || n != 0 {
		t.Errorf("second visit: counts %+v, %d sizes granted: want an answer from the store", c, n)
	}
	// Beside a budget whose room holds the whole minibatch the bound is not trusted: m is
	// not known to a searcher, and a visit runs the minibatch and stores its measurement.
	loose := newLP()
	loose.LatencyMS = 4 * (w.TimeMS(e.spec, m, 32) + inf)
	if slices.ContainsFunc(loose.Known(), func(x plan.ModeProfile) bool { return x.Mode == m }) {
		t.Error("m known beside a budget that holds its minibatch: its bound would stand in for a turn that can be measured without a late request")
	}
	if _, err := loose.Profile(ctx, m); err != nil {
		t.Fatal(err)
	}
	got32 := h.granted(proto.RoleTrain)[32]
	if p, err := e.store.Get(key(0)); err != nil || p.Bound || got32 < 3 {
		t.Errorf("minibatch after a visit beside a loose budget: %+v, %v, %d batches run: want it measured (≥ 3 batches), no longer a bound", p, err, got32)
	}
}

// Inference batches over the room are not measured either: beside a budget whose room
// holds the smallest training turn with an inference batch of 4 but not of 8, the live
// profiler runs batches 1, 2 and 4 and no batch of 8, gives the searcher batch 8 at its
// predicted turn (from 2 and 4, at least 4's), stores none, and a later search is
// answered from the store.
func TestLiveProfilerSkipsInferenceBatchesOverTheRoom(t *testing.T) {
	h := newRoomHarness(t)
	e, m := h.e, h.m
	t4 := h.w.TimeMS(e.spec, m, 4)
	i2, i4 := h.wi.TimeMS(e.spec, m, 2), h.wi.TimeMS(e.spec, m, 4)
	pred8 := i4 + 2*(i4-i2) // the line through 2 and 4, at 8
	latency := t4 + (i4+microPredictSlack*pred8)/2
	if i4 >= microPredictSlack*pred8 {
		t.Fatalf("inference turns at %s (2: %.2f, 4: %.2f ms) leave no budget between 4 and 8", m.Human(), i2, i4)
	}
	lp := h.profiler(latency)
	lp.InferByRoom = true // a plan is in force (the controller's re-search)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mp, err := lp.Profile(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := h.granted(proto.RoleInfer), h.granted(proto.RoleTrain)
	t.Logf("budget %.2f ms at %s (training turn of 4: %.2f ms; inference 2: %.2f, 4: %.2f, 8 predicted %.2f, true %.2f ms); inference profile batches granted %v",
		latency, m.Human(), t4, i2, i4, pred8, h.wi.TimeMS(e.spec, m, 8), got)
	if got[8] != 0 || got[1] < 3 || got[2] < 3 || got[4] < 3 {
		t.Fatalf("inference profile batches granted %v: want 1, 2 and 4 measured in full, no batch of 8", got)
	}
	if _, err := e.store.Get(store.Key{Board: e.spec.Name, Workload: tInfer, Role: truth.Infer, Mode: m, Batch: 8}); err == nil {
		t.Error("inference batch 8 stored: a batch over the room is never measured, so never stored")
	}
	if len(mp.Infer) != 4 || mp.Infer[3].Batch != 8 || mp.Infer[3].TimeMS < mp.Infer[2].TimeMS || !lp.overRoom(t4, mp.Infer[3].TimeMS) {
		t.Fatalf("the searcher's inference batches %+v: want 1, 2, 4 and 8, 8 predicted over the room", mp.Infer)
	}
	if !slices.ContainsFunc(lp.Known(), func(x plan.ModeProfile) bool { return x.Mode == m && len(x.Infer) == 4 }) {
		t.Error("m not known with every batch: it lacks only a batch over the room")
	}
	stored, err := StoredProfiles(e.store, e.spec.Name, lp.Pair)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(stored, func(x plan.ModeProfile) bool { return x.Mode == m && len(x.Infer) == 3 }) {
		t.Error("planned from the store at m: want the three measured inference batches, never the predicted one")
	}
	lp2 := h.profiler(latency)
	lp2.InferByRoom = true
	if _, err := lp2.Profile(ctx, m); err != nil {
		t.Fatal(err)
	}
	if c, n := lp2.Counts(), len(h.granted(proto.RoleInfer))+len(h.granted(proto.RoleTrain)); c.FromStore != 1 || n != 0 {
		t.Errorf("second visit: counts %+v, %d sizes granted: want an answer from the store", c, n)
	}
	// Without a plan in force (a first search) every batch is measured at a new mode.
	m2 := e.modes[4]
	if err := e.store.Delete(store.Key{Board: e.spec.Name, Workload: tInfer, Role: truth.Infer, Mode: m2, Batch: 8}); err != nil {
		t.Fatal(err)
	}
	first := h.profiler(latency)
	if _, err := first.Profile(ctx, m2); err != nil {
		t.Fatal(err)
	}
	if got := h.granted(proto.RoleInfer); got[8] == 0 {
		t.Errorf("first search at %s: inference profile batches %v, want batch 8 measured", m2.Human(), got)
	}
}

// A first search (no plan in force, InferByRoom unset) measures the inference batches
// over the room, but not one that alone takes longer than the latency budget: its
// requests would wait longer than the budget with training paused, and each of its
// profile batches holds the real requests as long. The searcher gets it at its predicted
// turn, the store never holds it, and a later visit answers from the store. The same
// without micro-batch sizes declared (the room off).
func TestLiveProfilerSkipsInferenceBatchesOverTheBudgetAlone(t *testing.T) {
	for _, micro := range []bool{true, false} {
		t.Run(map[bool]string{true: "micro", false: "whole"}[micro], func(t *testing.T) {
			h := newRoomHarness(t)
			e, m := h.e, h.m
			i2, i4 := h.wi.TimeMS(e.spec, m, 2), h.wi.TimeMS(e.spec, m, 4)
			pred8 := i4 + 2*(i4-i2) // the line through 2 and 4, at 8
			latency := (i4 + microPredictSlack*pred8) / 2
			if i4 >= microPredictSlack*pred8 {
				t.Fatalf("inference turns at %s (2: %.2f, 4: %.2f ms) leave no budget between 4 and 8", m.Human(), i2, i4)
			}
			lp := h.profiler(latency)
			if !micro {
				lp.Pair.MicroBatches = nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			mp, err := lp.Profile(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := h.granted(proto.RoleInfer), h.granted(proto.RoleTrain)
			t.Logf("budget %.2f ms at %s (inference 2: %.2f, 4: %.2f, 8 predicted %.2f, true %.2f ms); inference profile batches granted %v",
				latency, m.Human(), i2, i4, pred8, h.wi.TimeMS(e.spec, m, 8), got)
			if got[8] != 0 || got[1] < 3 || got[2] < 3 || got[4] < 3 {
				t.Fatalf("inference profile batches granted %v: want 1, 2 and 4 measured in full, no batch of 8", got)
			}
			if _, err := e.store.Get(store.Key{Board: e.spec.Name, Workload: tInfer, Role: truth.Infer, Mode: m, Batch: 8}); err == nil {
				t.Error("inference batch 8 stored: a batch over the budget alone is never measured, so never stored")
			}
			if len(mp.Infer) != 4 || mp.Infer[3].Batch != 8 || mp.Infer[3].TimeMS <= latency {
				t.Fatalf("the searcher's inference batches %+v: want 1, 2, 4 and 8, 8 predicted over the %.2f ms budget", mp.Infer, latency)
			}
			if !slices.ContainsFunc(lp.Known(), func(x plan.ModeProfile) bool { return x.Mode == m && len(x.Infer) == 4 }) {
				t.Error("m not known with every batch: it lacks only a batch over the budget alone")
			}
			stored, err := StoredProfiles(e.store, e.spec.Name, lp.Pair)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(stored, func(x plan.ModeProfile) bool { return x.Mode == m && len(x.Infer) == 3 }) {
				t.Error("planned from the store at m: want the three measured inference batches, never the predicted one")
			}
			lp2 := h.profiler(latency)
			lp2.Pair = lp.Pair
			if _, err := lp2.Profile(ctx, m); err != nil {
				t.Fatal(err)
			}
			if c, n := lp2.Counts(), len(h.granted(proto.RoleInfer))+len(h.granted(proto.RoleTrain)); c.FromStore != 1 || n != 0 {
				t.Errorf("second visit: counts %+v, %d sizes granted: want an answer from the store", c, n)
			}
			// A budget the batch fits alone: measured on the next visit.
			wide := h.profiler(2 * h.wi.TimeMS(e.spec, m, 8))
			wide.Pair = lp.Pair
			if _, err := wide.Profile(ctx, m); err != nil {
				t.Fatal(err)
			}
			if got := h.granted(proto.RoleInfer); got[8] < 3 {
				t.Errorf("beside a budget of twice batch 8's turn: inference profile batches %v, want batch 8 measured", got)
			}
		})
	}
}

// A micro-batch size above one judged over the room is over it too, as the visit judged
// it (overMicro), even where it alone could not be judged: with only the size below the
// first one measured at the mode and no stored mode holding both, 16 has no prediction.
// microFill completes the mode with both (16 at most the minibatch, at least 8's turn).
func TestMicroFillAboveASizeOverTheRoom(t *testing.T) {
	p := &LiveProfiler{Pair: Pair{Train: tTrain, TrainBatch: 32, Infer: tInfer, Batches: []int{1}, MicroBatches: []int{4, 8, 16}}, LatencyMS: 50, ByRoom: true,
		Admission: plan.Admission{MarginMS: 5, DevRel: 0.1}}
	mp := plan.ModeProfile{Train: plan.TrainPoint{Batch: 32, TimeMS: 182, PowerMW: 25000},
		Micro: []plan.TrainPoint{{Batch: 4, TimeMS: 23, PowerMW: 25000, Minibatch: 32}},
		Infer: []plan.InferPoint{{Batch: 1, TimeMS: 9, PowerMW: 24000}}}
	ratios := map[sizePair]sizeRatio{{8, 4}: {time: 1.8, power: 1}} // 8 predicted at 41.4 ms, lowered by 10 %: 1.1·(37.3 + 9) + 5 ms over 50
	if !p.turnOverRoom(8, map[int]plan.TrainPoint{4: mp.Micro[0]}, 9, ratios) {
		t.Fatal("the test wants 8 over the room by its prediction")
	}
	got, ok := p.microFill(mp, ratios)
	if !ok || len(got.Micro) != 3 {
		t.Fatalf("microFill: ok %v, micro %+v: want 4 measured, 8 and 16 predicted", ok, got.Micro)
	}
	for _, m := range got.Micro {
		if m.Batch == 16 && (m.TimeMS < 41.4-1e-9 || m.TimeMS > 182) {
			t.Errorf("16 filled at %.1f ms: want between 8's predicted turn and the minibatch", m.TimeMS)
		}
	}
}
