package control

import (
	"context"
	"errors"
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

// An inference worker that declined profile batches (no on_profile handler) is left
// out of live profiling: with an empty store no search starts, no profile grant is
// sent, the status names the workload and on_profile, and optimize is refused. A worker
// of the same workload that runs profile batches frees the search.
func TestDeclinedWorkloadIsNotProfiledLive(t *testing.T) {
	e := newEnv(t, sched.RealClock{})
	defer e.sched.Close()
	c, err := New(Options{Config: Config{MaxProfiles: 2, Live: LiveOptions{Samples: 2, MinTime: time.Millisecond}}, Sched: e.sched, Board: e.board, Store: e.store,
		Targets: plan.Targets{LatencyMS: 400, PowerMW: 30000, RateRPS: 20}})
	if err != nil {
		t.Fatal(err)
	}
	e.board.mu.Lock()
	e.board.powerFn = func(m powermode.Mode) float64 { return e.models[tTrain].PowerMW(e.spec, m, 32) }
	e.board.mu.Unlock()
	sw := &scriptedWorkers{e: e, power: c.power, grants: map[string]int{}}
	tr, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleTrain, Workload: tTrain, Batch: 32}, sw.deliver)
	if err != nil {
		t.Fatal(err)
	}
	in, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleInfer, Workload: tInfer, Batch: 1, BatchSizes: []int{1, 2, 4, 8}, NoProfiles: true}, sw.deliver)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{tr, in} {
		if err := e.sched.Acquire(id, 0); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		c.Step(context.Background())
	}
	st := c.Status()
	if st.Searching || sw.count(proto.KindProfile) != 0 {
		t.Fatalf("searching %v with %d profile grants; a workload that declined profile batches must not be profiled", st.Searching, sw.count(proto.KindProfile))
	}
	if !strings.Contains(st.Profiling, tInfer) || !strings.Contains(st.Profiling, "on_profile") {
		t.Fatalf("status line %q: want it to name %s and on_profile", st.Profiling, tInfer)
	}
	var said bool
	for _, ev := range c.Events().List(0) {
		said = said || (ev.Kind == KindProfile && strings.Contains(ev.Reason, "no live search") && strings.Contains(ev.Reason, tInfer))
	}
	if !said {
		t.Fatalf("no event says why no search ran: %+v", c.Events().List(0))
	}
	if _, err := c.Optimize(context.Background(), "gmd", 0); !errors.Is(err, ErrNoProfiles) || !strings.Contains(err.Error(), "on_profile") {
		t.Fatalf("optimize: %v, want ErrNoProfiles naming on_profile", err)
	}
	// The scheduler refuses profile batches of that worker too.
	if _, err := e.sched.Profile(context.Background(), in, 1); !errors.Is(err, sched.ErrProfilesDeclined) {
		t.Fatalf("sched.Profile of a declining worker: %v", err)
	}

	// A second worker of the workload that runs profile batches: the search starts,
	// and profiles through it.
	in2, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleInfer, Workload: tInfer, Batch: 1, BatchSizes: []int{1, 2, 4, 8}}, sw.deliver)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.sched.Acquire(in2, 0); err != nil {
		t.Fatal(err)
	}
	c.Step(context.Background())
	if st := c.Status(); !st.Searching || st.Profiling != "" {
		t.Fatalf("after a worker that runs profile batches joined: searching %v, profiling line %q", st.Searching, st.Profiling)
	}
	for deadline := time.Now().Add(30 * time.Second); c.Status().Searching; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("search did not finish in 30 s")
		}
	}
	if sw.count(proto.KindProfile) == 0 || c.Status().Live.Profiled == 0 {
		t.Fatalf("no mode profiled once a worker runs profile batches: %+v; events %+v", c.Status().Live, c.Events().List(0))
	}
}

// A profile batch answered at once (a client that runs nothing for it) takes a
// fraction of the workload's real batches of that size: once some real ones ran, such
// batches are discarded, said once per point, and a point made of nothing else fails
// instead of storing a bogus profile.
func TestTooFastProfileBatchesDiscarded(t *testing.T) {
	// What the README's snippet did: no on_profile, a profile grant answered at once.
	e, pm, m := realBatchesServed(t, 1, 40*time.Microsecond)
	type discard struct {
		k      store.Key
		n      int
		fastMS float64
		realMS float64
	}
	var got []discard
	lp := &LiveProfiler{Sched: e.sched, Board: e.board, Store: e.store, Power: pm,
		Pair:    Pair{Train: tTrain, TrainBatch: 32, Infer: tInfer, Batches: []int{1}},
		Options: LiveOptions{Samples: 3, MinTime: time.Millisecond, PowerSettle: time.Millisecond},
		OnDiscard: func(k store.Key, n int, fastestMS, realMS float64) {
			got = append(got, discard{k, n, fastestMS, realMS})
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := lp.Profile(ctx, m)
	if err == nil || !strings.Contains(err.Error(), "on_profile") {
		t.Fatalf("profiling a workload whose profile batches run nothing: %v, want an error naming on_profile", err)
	}
	if len(got) != 1 || got[0].k.Workload != tInfer || got[0].n < 6 || got[0].fastMS >= 0.2*got[0].realMS {
		t.Fatalf("discards reported %+v", got)
	}
	if c := lp.Counts(); c.Discarded != got[0].n {
		t.Fatalf("counts %+v, %d discarded", c, got[0].n)
	}
	if ps, _ := e.store.List(store.Filter{Board: e.spec.Name, Workload: tInfer}); len(ps) != 0 {
		t.Fatalf("a bogus inference profile was stored: %+v", ps)
	}
	// The training point, whose batches are real, was measured and stored.
	if ps, _ := e.store.List(store.Filter{Board: e.spec.Name, Role: truth.Train}); len(ps) != 1 {
		t.Fatalf("%d training profiles stored, want 1", len(ps))
	}
}

// Real batches served at another, much slower mode are no reference at a fifth: a search
// that had just served requests at one core and 115 MHz (82.5 ms at batch 1) discarded
// every honest 5.5 ms profile batch at a fast mode and failed (lifetime, two streams,
// seed 2). Here the real batches take 15× the profile batches' time, as there; the point
// is measured and stored, nothing discarded. A handler that runs nothing (40 µs) is still
// caught against the same real batches (TestTooFastProfileBatchesDiscarded).
func TestProfileBatchesAtAFasterModeAreKept(t *testing.T) {
	e, pm, m := realBatchesServed(t, 15, 0) // served at a mode 15× slower for this workload
	var discards int
	lp := &LiveProfiler{Sched: e.sched, Board: e.board, Store: e.store, Power: pm,
		Pair:      Pair{Train: tTrain, TrainBatch: 32, Infer: tInfer, Batches: []int{1}},
		Options:   LiveOptions{Samples: 3, MinTime: time.Millisecond, PowerSettle: time.Millisecond},
		OnDiscard: func(store.Key, int, float64, float64) { discards++ }}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := lp.Profile(ctx, m); err != nil {
		t.Fatalf("profiling a mode faster than the real batches' one: %v", err)
	}
	if discards != 0 || lp.Counts().Discarded != 0 {
		t.Fatalf("%d points with discards (%d batches): honest profile batches were discarded", discards, lp.Counts().Discarded)
	}
	if ps, _ := e.store.List(store.Filter{Board: e.spec.Name, Workload: tInfer}); len(ps) != 1 {
		t.Fatalf("%d inference profiles stored, want 1", len(ps))
	}
}

// realBatchesServed starts a pair on a real clock whose workers take the model's time at
// the board's mode, real inference batches inferScale times that and inference profile
// batches fakeProfile (0: the model's time), and has four real inference batches of one
// request served, the too-fast check's reference. It returns the env, the power monitor
// the workers sample and a mode to profile.
func realBatchesServed(t *testing.T, inferScale float64, fakeProfile time.Duration) (*env, *PowerMonitor, powermode.Mode) {
	t.Helper()
	e := newEnv(t, sched.RealClock{})
	t.Cleanup(e.sched.Close)
	pm := NewPowerMonitor(10 * time.Second)
	e.board.mu.Lock()
	e.board.powerFn = func(m powermode.Mode) float64 { return e.models[tTrain].PowerMW(e.spec, m, 32) }
	e.board.mu.Unlock()
	var mu sync.Mutex
	served := 0
	deliver := func(g sched.Grant) {
		go func() {
			wl := e.models[tInfer]
			if strings.HasPrefix(g.Worker, proto.RoleTrain) {
				wl = e.models[tTrain]
			}
			d := time.Duration(wl.TimeMS(e.spec, e.board.current(), g.Batch) * float64(time.Millisecond))
			switch {
			case g.Kind == proto.KindProfile && wl == e.models[tInfer] && fakeProfile > 0:
				d = fakeProfile
			case g.Kind == proto.KindInfer:
				d = time.Duration(float64(d) * inferScale)
			}
			_ = pm.Sample(context.Background(), e.board, time.Now())
			if err := e.sched.Release(g.Worker, sched.Release{Grant: g.ID, Duration: d}); err != nil {
				return
			}
			if g.Kind == proto.KindInfer {
				mu.Lock()
				served++
				mu.Unlock()
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
	for i := range 4 {
		if err := e.sched.Arrivals(inferID, []proto.Request{{ID: "r" + string(rune('a'+i))}}); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			mu.Lock()
			n := served
			mu.Unlock()
			if n > i {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("a real inference batch was not served")
			}
		}
	}
	if ms, n := e.sched.RealBatchMS(proto.RoleInfer, tInfer, 1, time.Time{}); n != 4 || ms <= 1 {
		t.Fatalf("real batches recorded: %.2f ms over %d", ms, n)
	}
	return e, pm, e.modes[2]
}
