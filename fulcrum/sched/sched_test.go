package sched

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

const msec = time.Millisecond

type harness struct {
	t     *testing.T
	clock *FakeClock
	s     *Scheduler
	mu    sync.Mutex
	got   []Grant
}

// testConfig is a scheduler's configuration and the latency budget its controller
// would give it (SetLatencyBudget; 0: DefaultLatencyBudget).
type testConfig struct {
	Config
	LatencyBudget time.Duration
}

func newHarness(t *testing.T, cfg testConfig) *harness {
	h := &harness{t: t, clock: NewFakeClock()}
	h.s = New(cfg.Config, h.clock, nil)
	h.s.SetLatencyBudget(cfg.LatencyBudget)
	return h
}

func (h *harness) register(role, workload string, batch int) string {
	h.t.Helper()
	id, _, err := h.s.Register(WorkerSpec{Role: role, Workload: workload, Batch: batch}, func(g Grant) {
		h.mu.Lock()
		h.got = append(h.got, g)
		h.mu.Unlock()
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return id
}

// grants returns and clears the grants delivered so far.
func (h *harness) grants() []Grant {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.got
	h.got = nil
	return g
}

func (h *harness) one() Grant {
	h.t.Helper()
	g := h.grants()
	if len(g) != 1 {
		h.t.Fatalf("want exactly one grant, got %d: %+v", len(g), g)
	}
	return g[0]
}

func (h *harness) none() {
	h.t.Helper()
	if g := h.grants(); len(g) != 0 {
		h.t.Fatalf("want no grant, got %+v", g)
	}
}

func (h *harness) must(err error) {
	h.t.Helper()
	if err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) arrive(id string, ids ...string) {
	h.t.Helper()
	var r []proto.Request
	for _, x := range ids {
		r = append(r, proto.Request{ID: x})
	}
	h.must(h.s.Arrivals(id, r))
}

func (h *harness) release(id string, g Grant, d time.Duration) {
	h.t.Helper()
	h.clock.Advance(d)
	h.must(h.s.Release(id, Release{Grant: g.ID, Duration: d}))
}

func cfg(latency, train, infer time.Duration) testConfig {
	return testConfig{LatencyBudget: latency, Config: Config{DefaultTrain: train, DefaultInfer: infer, IdleAdmitArrivals: 0.1}}
}

func TestInferenceBatchDispatchedWhenFull(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 50*msec, 10*msec))
	inf := h.register(proto.RoleInfer, "yolo", 4)
	h.must(h.s.Acquire(inf, 9))
	h.arrive(inf, "a", "b", "c")
	h.none()
	h.clock.Advance(5 * msec)
	h.none()
	h.arrive(inf, "d", "e")
	g := h.one()
	if g.Kind != proto.KindInfer || g.Batch != 4 || fmt.Sprint(g.RequestIDs) != "[a b c d]" || g.Seq != 9 {
		t.Fatalf("grant %+v: want the 4 oldest requests as one infer batch echoing seq 9", g)
	}
	// The fifth request waits for the next acquire.
	h.release(inf, g, 10*msec)
	h.none()
	h.must(h.s.Acquire(inf, 10))
	h.none() // one request, slack left: waits to batch
}

func TestInferencePartialBatchDispatchedWhenSlackRunsOut(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 50*msec, 20*msec))
	inf := h.register(proto.RoleInfer, "yolo", 8)
	h.must(h.s.Acquire(inf, 0))
	h.arrive(inf, "a")
	h.clock.Advance(40 * msec)
	h.arrive(inf, "b")
	h.clock.Advance(39 * msec) // t=79ms: deadline 100 − expected 20 = 80 not reached
	h.none()
	h.clock.Advance(1 * msec)
	g := h.one()
	if g.Batch != 2 || fmt.Sprint(g.RequestIDs) != "[a b]" {
		t.Fatalf("grant %+v: want the partial batch [a b] when a's slack ran out", g)
	}
	if g.Deadline != 20*msec {
		t.Fatalf("grant deadline %v, want the 20ms left before a's deadline", g.Deadline)
	}
}

func TestOldRequestWithAgeIsDueAtOnce(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 50*msec, 20*msec))
	inf := h.register(proto.RoleInfer, "yolo", 8)
	h.must(h.s.Acquire(inf, 0))
	h.must(h.s.Arrivals(inf, []proto.Request{{ID: "late", AgeMS: 95}}))
	g := h.one()
	if fmt.Sprint(g.RequestIDs) != "[late]" || g.Deadline != 5*msec {
		t.Fatalf("grant %+v: a request that already waited 95ms must be served now with 5ms left", g)
	}
}

func TestTrainingAdmission(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 50*msec, 10*msec))
	inf := h.register(proto.RoleInfer, "yolo", 8)
	tr := h.register(proto.RoleTrain, "resnet18", 32)
	h.must(h.s.Acquire(inf, 0))
	h.arrive(inf, "a") // deadline t=100
	h.must(h.s.Acquire(tr, 0))
	g := h.one() // 100 ≥ 50 + 10: training fits before a is due
	if g.Kind != proto.KindTrain || g.Worker != tr || g.Batch != 32 {
		t.Fatalf("grant %+v: want training admitted", g)
	}
	h.release(tr, g, 50*msec) // t=50
	h.must(h.s.Acquire(tr, 0))
	// 100 − 50 = 50 < 50 + 10: training would make a miss; a is served early instead.
	g = h.one()
	if g.Kind != proto.KindInfer || fmt.Sprint(g.RequestIDs) != "[a]" {
		t.Fatalf("grant %+v: want the blocking inference batch served before training", g)
	}
	h.release(inf, g, 10*msec)
	g = h.one()
	if g.Kind != proto.KindTrain {
		t.Fatalf("grant %+v: want training once the queue is empty", g)
	}
}

func TestTrainingWaitsWhenBlockingWorkerIsBusy(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 50*msec, 10*msec))
	inf := h.register(proto.RoleInfer, "yolo", 8)
	tr := h.register(proto.RoleTrain, "resnet18", 32)
	h.arrive(inf, "a") // no acquire from the inference worker yet
	h.clock.Advance(60 * msec)
	h.must(h.s.Acquire(tr, 0))
	h.none() // 40ms left < 60ms: training must not start
	h.must(h.s.Acquire(inf, 0))
	if g := h.one(); g.Worker != inf {
		t.Fatalf("grant %+v: want the inference batch", g)
	}
}

func TestTrainingAdmissionUsesMeasuredTime(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 10*msec, 10*msec))
	inf := h.register(proto.RoleInfer, "yolo", 8)
	tr := h.register(proto.RoleTrain, "resnet18", 32)
	h.must(h.s.Acquire(tr, 0))
	h.release(tr, h.one(), 500*msec) // warm-up: the next minibatch replaces it
	h.must(h.s.Acquire(tr, 0))
	h.release(tr, h.one(), 70*msec) // expected training time is now the measured 70ms
	h.arrive(inf, "a")              // deadline t=670
	h.clock.Advance(30 * msec)
	h.must(h.s.Acquire(tr, 0)) // 670 − 600 = 70 < 70 + 10
	h.none()
	snap := h.s.Snapshot()
	if wl, _ := snap.Workload(proto.RoleTrain, "resnet18"); wl.ExpectedTrainMS != 70 {
		t.Fatalf("expected training time %v ms, want the measured 70", wl.ExpectedTrainMS)
	}
}

func TestIdleQueueAdmissionDependsOnArrivalRate(t *testing.T) {
	// L = 50ms cannot absorb a 60ms minibatch: training runs only while arrivals are rare.
	h := newHarness(t, cfg(50*msec, 60*msec, 5*msec))
	inf := h.register(proto.RoleInfer, "yolo", 1)
	tr := h.register(proto.RoleTrain, "resnet18", 32)
	h.must(h.s.Acquire(tr, 0))
	g := h.one() // no arrivals at all: admitted
	h.release(tr, g, 60*msec)
	// Arrivals every 10ms (100/s): 100 × 0.06 = 6 expected during a minibatch.
	for i := 0; i < 30; i++ {
		h.must(h.s.Acquire(inf, 0))
		h.arrive(inf, fmt.Sprint(i))
		gi := h.one()
		h.release(inf, gi, 1*msec)
		h.clock.Advance(9 * msec)
	}
	h.must(h.s.Acquire(tr, 0))
	h.none()
}

func TestEarliestDeadlineFirst(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 50*msec, 10*msec))
	tr := h.register(proto.RoleTrain, "resnet18", 32)
	a := h.register(proto.RoleInfer, "a", 1)
	b := h.register(proto.RoleInfer, "b", 1)
	h.must(h.s.Acquire(tr, 0))
	g := h.one()
	h.must(h.s.Acquire(a, 0))
	h.must(h.s.Acquire(b, 0))
	h.must(h.s.Arrivals(a, []proto.Request{{ID: "a1"}}))
	h.must(h.s.Arrivals(b, []proto.Request{{ID: "b1", AgeMS: 20}})) // older: earlier deadline
	h.none()                                                        // the training turn is held
	h.release(tr, g, 30*msec)
	g1 := h.one()
	if g1.Worker != b {
		t.Fatalf("first grant to %s, want %s (earlier deadline)", g1.Worker, b)
	}
	h.release(b, g1, 5*msec)
	if g2 := h.one(); g2.Worker != a {
		t.Fatalf("second grant to %s, want %s", g2.Worker, a)
	}
}

func TestTrainingRoundRobin(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 10*msec, 10*msec))
	ids := []string{h.register(proto.RoleTrain, "t1", 8), h.register(proto.RoleTrain, "t2", 8), h.register(proto.RoleTrain, "t3", 8)}
	for _, id := range ids {
		h.must(h.s.Acquire(id, 0))
	}
	var order []string
	for i := 0; i < 7; i++ {
		g := h.one()
		order = append(order, g.Worker)
		h.release(g.Worker, g, 10*msec)
		h.must(h.s.Acquire(g.Worker, 0))
	}
	want := fmt.Sprint([]string{ids[0], ids[1], ids[2], ids[0], ids[1], ids[2], ids[0]})
	if fmt.Sprint(order) != want {
		t.Fatalf("order %v, want %v", order, want)
	}
}

func TestDisconnectWhileHoldingTurnReleasesIt(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 10*msec, 10*msec))
	inf := h.register(proto.RoleInfer, "yolo", 2)
	tr := h.register(proto.RoleTrain, "resnet18", 32)
	h.must(h.s.Acquire(inf, 0))
	h.arrive(inf, "a", "b", "c")
	g := h.one()
	if g.Batch != 2 {
		t.Fatalf("grant %+v", g)
	}
	h.must(h.s.Acquire(tr, 0))
	h.none()
	h.clock.Advance(3 * msec)
	h.s.Unregister(inf)
	if g := h.one(); g.Worker != tr {
		t.Fatalf("grant %+v: the turn must pass on at once", g)
	}
	snap := h.s.Snapshot()
	if len(snap.Workers) != 1 || snap.Turn != tr {
		t.Fatalf("snapshot %+v", snap)
	}
	if err := h.s.Release(inf, Release{Grant: g.ID}); err == nil {
		t.Fatal("release from an unregistered worker must fail")
	}
}

func TestDisconnectAccountsRequestsAsFailed(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 10*msec, 10*msec))
	inf := h.register(proto.RoleInfer, "yolo", 2)
	h.must(h.s.Acquire(inf, 0))
	h.arrive(inf, "a", "b", "c")
	h.one()
	h.s.Unregister(inf)
	snap := h.s.Snapshot()
	wl, ok := snap.Workload(proto.RoleInfer, "yolo")
	if !ok || wl.Failed != 3 || wl.LiveWorkers != 0 || len(snap.Workers) != 0 {
		t.Fatalf("after disconnect: %+v; want 3 failed (2 in flight + 1 queued), kept after the worker left", snap)
	}
	// A restarted worker of the same workload continues its measurements.
	inf2 := h.register(proto.RoleInfer, "yolo", 2)
	h.must(h.s.Acquire(inf2, 0))
	h.arrive(inf2, "a", "b")
	h.release(inf2, h.one(), 5*msec)
	wl, _ = h.s.Snapshot().Workload(proto.RoleInfer, "yolo")
	if wl.Failed != 3 || wl.Served != 2 || wl.LiveWorkers != 1 || wl.Requests != 5 {
		t.Fatalf("after restart: %+v", wl)
	}
}

func TestOverrunCounted(t *testing.T) {
	h := newHarness(t, testConfig{LatencyBudget: 100 * msec, Config: Config{DefaultTrain: 20 * msec, OverrunFactor: 3, OverrunMin: 50 * msec}})
	tr := h.register(proto.RoleTrain, "resnet18", 32)
	h.must(h.s.Acquire(tr, 0))
	g := h.one()
	if g.Deadline != 60*msec {
		t.Fatalf("grant deadline %v, want 3×20ms", g.Deadline)
	}
	h.clock.Advance(59 * msec)
	if n := h.s.Snapshot().Overruns; n != 0 {
		t.Fatalf("overruns %d before the limit", n)
	}
	h.clock.Advance(2 * msec)
	if n := h.s.Snapshot().Overruns; n != 1 {
		t.Fatalf("overruns %d after the limit, want 1", n)
	}
	h.must(h.s.Release(tr, Release{Grant: g.ID}))
	snap := h.s.Snapshot()
	if wl, _ := snap.Workload(proto.RoleTrain, "resnet18"); snap.Overruns != 1 || wl.Overruns != 1 {
		t.Fatalf("an overrun must be counted once: %+v", snap)
	}
	// Warm-up: the latest minibatch (61 ms, held) is the expected time until times
	// settle.
	h.must(h.s.Acquire(tr, 0))
	g = h.one()
	if g.Deadline != 183*msec {
		t.Fatalf("deadline %v, want 3 × the measured 61ms", g.Deadline)
	}
	h.release(tr, g, 10*msec)
	// Short turns: the 50ms floor applies over 3 × 10ms.
	h.must(h.s.Acquire(tr, 0))
	if g = h.one(); g.Deadline != 50*msec {
		t.Fatalf("deadline %v, want the 50ms floor", g.Deadline)
	}
}

func TestBetweenTurnsRunsOnlyWhenGPUIsFree(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 10*msec, 10*msec))
	tr := h.register(proto.RoleTrain, "resnet18", 32)
	h.must(h.s.Acquire(tr, 0))
	g := h.one()
	started := make(chan struct{})
	finish := make(chan struct{})
	res := make(chan error, 1)
	go func() {
		res <- h.s.BetweenTurns(context.Background(), func(context.Context) error {
			close(started)
			<-finish
			return errors.New("applied")
		})
	}()
	// Wait until the action is queued (it must not start while the turn is held).
	for {
		h.s.mu.Lock()
		n := len(h.s.actions)
		h.s.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-started:
		t.Fatal("action ran while a minibatch held the turn")
	default:
	}
	h.release(tr, g, 10*msec)
	<-started
	h.must(h.s.Acquire(tr, 0))
	h.none() // the action holds the turn
	if snap := h.s.Snapshot(); snap.Turn != "action" {
		t.Fatalf("turn %q, want action", snap.Turn)
	}
	close(finish)
	if err := <-res; err == nil || err.Error() != "applied" {
		t.Fatalf("BetweenTurns returned %v, want fn's error", err)
	}
	if g := h.one(); g.Worker != tr {
		t.Fatalf("grant %+v after the action", g)
	}
}

func TestProfileGrant(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 10*msec, 10*msec))
	inf := h.register(proto.RoleInfer, "yolo", 4)
	res := make(chan time.Duration, 1)
	go func() {
		d, err := h.s.Profile(context.Background(), inf, 16)
		if err != nil {
			t.Error(err)
		}
		res <- d
	}()
	for {
		h.s.mu.Lock()
		n := len(h.s.profiles)
		h.s.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	h.none() // no acquire yet
	h.must(h.s.Acquire(inf, 0))
	g := h.one()
	if g.Kind != proto.KindProfile || g.Batch != 16 {
		t.Fatalf("grant %+v: want a profile grant of batch 16", g)
	}
	h.release(inf, g, 42*msec)
	if d := <-res; d != 42*msec {
		t.Fatalf("profiled %v, want 42ms", d)
	}
}

func TestOutOfOrder(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 10*msec, 10*msec))
	tr := h.register(proto.RoleTrain, "resnet18", 32)
	code := func(err error) string {
		var pe *proto.Error
		if errors.As(err, &pe) {
			return pe.Code
		}
		return fmt.Sprint(err)
	}
	if c := code(h.s.Release(tr, Release{Grant: 1})); c != proto.CodeOutOfOrder {
		t.Fatalf("release without grant: %s", c)
	}
	if c := code(h.s.Arrivals(tr, []proto.Request{{ID: "x"}})); c != proto.CodeInvalid {
		t.Fatalf("arrivals on a training worker: %s", c)
	}
	if c := code(h.s.Acquire("train-99", 0)); c != proto.CodeNotRegistered {
		t.Fatalf("unknown worker: %s", c)
	}
	h.must(h.s.Acquire(tr, 0))
	g := h.one()
	if c := code(h.s.Acquire(tr, 0)); c != proto.CodeOutOfOrder {
		t.Fatalf("acquire while holding: %s", c)
	}
	if c := code(h.s.Release(tr, Release{Grant: g.ID + 1})); c != proto.CodeOutOfOrder {
		t.Fatalf("release of the wrong grant: %s", c)
	}
	h.must(h.s.Release(tr, Release{Grant: g.ID}))
	h.must(h.s.Acquire(tr, 0))
	h.one()
	inf := h.register(proto.RoleInfer, "yolo", 2)
	h.arrive(inf, "a")
	if c := code(h.s.Arrivals(inf, []proto.Request{{ID: "a"}, {ID: "b"}})); c != proto.CodeInvalid {
		t.Fatalf("duplicate id: %s", c)
	}
	if q := h.s.Snapshot().Workers[1].Queued; q != 2 {
		t.Fatalf("queued %d, want 2 (the duplicate dropped, b kept)", q)
	}
}

func TestMeasurements(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 10*msec, 10*msec))
	inf := h.register(proto.RoleInfer, "yolo", 1)
	tr := h.register(proto.RoleTrain, "resnet18", 32)
	// Ten requests served with latencies 1..10 ms; request 10 fails.
	for i := 1; i <= 10; i++ {
		h.must(h.s.Acquire(inf, 0))
		h.arrive(inf, fmt.Sprint(i))
		g := h.one()
		h.clock.Advance(time.Duration(i) * msec)
		h.must(h.s.Release(inf, Release{Grant: g.ID, Results: []proto.Result{{ID: fmt.Sprint(i), OK: i != 10}}}))
	}
	// 4 minibatches of 32 over 200ms.
	for i := 0; i < 4; i++ {
		h.must(h.s.Acquire(tr, 0))
		g := h.one()
		h.release(tr, g, 50*msec)
	}
	snap := h.s.Snapshot()
	wi, _ := snap.Workload(proto.RoleInfer, "yolo")
	wt, _ := snap.Workload(proto.RoleTrain, "resnet18")
	if wi.Served != 9 || wi.Failed != 1 || wi.Requests != 10 {
		t.Fatalf("inference counts %+v", wi)
	}
	if wi.Latency.Count != 9 || wi.Latency.P50MS != 5 || wi.Latency.MaxMS != 9 || wi.Latency.P99MS != 9 {
		t.Fatalf("latency %+v, want p50 5 max 9 over 9 samples", wi.Latency)
	}
	if wt.Minibatches != 4 || wt.Samples != 128 {
		t.Fatalf("training counts %+v", wt)
	}
	// 128 samples since registration 55ms + 200ms ago.
	want := 128 / 0.255
	if d := wt.ThroughputPerS - want; d > 1e-6 || d < -1e-6 {
		t.Fatalf("throughput %v, want %v", wt.ThroughputPerS, want)
	}
	if snap.Turns != 14 {
		t.Fatalf("turns %d, want 14", snap.Turns)
	}
}

func TestExpectedInferenceTimeInterpolates(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 10*msec, 10*msec))
	inf := h.register(proto.RoleInfer, "yolo", 8)
	serve := func(ids []string, d time.Duration) {
		h.must(h.s.Acquire(inf, 0))
		h.arrive(inf, ids...)
		g := h.grants()
		for i := 0; len(g) == 0 && i < 100; i++ {
			// Let the partial batch fall due; in steps, as the held time counts.
			h.clock.Advance(msec)
			g = h.grants()
		}
		if len(g) != 1 {
			t.Fatalf("grants %+v", g)
		}
		h.release(inf, g[0], d)
	}
	serve([]string{"a"}, 5*msec)
	serve([]string{"b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8"}, 12*msec)
	h.s.mu.Lock()
	w := h.s.workers[inf]
	got := []time.Duration{h.s.expInfer(w, 1), h.s.expInfer(w, 4), h.s.expInfer(w, 8), h.s.expInfer(w, 16)}
	h.s.mu.Unlock()
	want := []time.Duration{5 * msec, 8 * msec, 12 * msec, 24 * msec}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("expected times for 1,4,8,16 = %v, want %v", got, want)
	}
}

func TestDeviationGuardsAdmission(t *testing.T) {
	c := cfg(100*msec, 10*msec, 10*msec)
	c.DevK = 2
	h := newHarness(t, c)
	tr := h.register(proto.RoleTrain, "resnet18", 32)
	for _, d := range []time.Duration{40, 60, 40, 60, 40, 60} {
		h.must(h.s.Acquire(tr, 0))
		h.release(tr, h.one(), d*msec)
	}
	snap := h.s.Snapshot()
	if wl, _ := snap.Workload(proto.RoleTrain, "resnet18"); wl.ExpectedTrainMS <= 60 {
		e := wl.ExpectedTrainMS
		t.Fatalf("expected training time %.1f ms: with spread 40–60 ms and dev_k 2 it must exceed the mean by the spread", e)
	}
}

func TestMarginBringsDispatchForward(t *testing.T) {
	c := cfg(100*msec, 50*msec, 20*msec)
	c.Margin = 5 * msec
	h := newHarness(t, c)
	inf := h.register(proto.RoleInfer, "yolo", 8)
	h.must(h.s.Acquire(inf, 0))
	h.arrive(inf, "a")
	h.clock.Advance(74 * msec)
	h.none()
	h.clock.Advance(1 * msec) // 100 − 5 margin − 20 expected = 75
	if g := h.one(); fmt.Sprint(g.RequestIDs) != "[a]" {
		t.Fatalf("grant %+v", g)
	}
}

func TestPendingRequestsBounded(t *testing.T) {
	h := newHarness(t, cfg(time.Hour, 10*msec, 10*msec))
	inf := h.register(proto.RoleInfer, "yolo", 8)
	for i := 0; i < MaxPending/proto.MaxRequestsMsg; i++ {
		reqs := make([]proto.Request, proto.MaxRequestsMsg)
		for k := range reqs {
			reqs[k].ID = fmt.Sprint(i, "-", k)
		}
		h.must(h.s.Arrivals(inf, reqs))
	}
	err := h.s.Arrivals(inf, []proto.Request{{ID: "one-too-many"}})
	var pe *proto.Error
	if !errors.As(err, &pe) || pe.Code != proto.CodeInvalid {
		t.Fatalf("arrivals beyond %d pending: %v, want invalid", MaxPending, err)
	}
}

func TestStarvedTrainingIsAdmittedWhenInferenceIsIdle(t *testing.T) {
	c := cfg(100*msec, 10*msec, 5*msec)
	c.Starve = time.Second
	h := newHarness(t, c)
	inf := h.register(proto.RoleInfer, "yolo", 1)
	tr := h.register(proto.RoleTrain, "resnet18", 32)
	h.must(h.s.Acquire(tr, 0))
	h.release(tr, h.one(), 10*msec) // warm-up
	h.must(h.s.Acquire(tr, 0))
	h.release(tr, h.one(), 400*msec) // an outlier: now expected ≥ 400ms > L
	serve := func(i int) {
		h.must(h.s.Acquire(inf, 0))
		h.arrive(inf, fmt.Sprint(i))
		h.release(inf, h.one(), 2*msec)
		h.clock.Advance(8 * msec)
	}
	for i := 0; i < 5; i++ { // requests every 10ms
		serve(i)
	}
	h.must(h.s.Acquire(tr, 0))
	h.none()
	// Frequent arrivals: training cannot be admitted normally.
	for i := 5; i < 25; i++ {
		h.must(h.s.Acquire(inf, 0))
		h.arrive(inf, fmt.Sprint(i))
		g := h.one()
		if g.Worker != inf {
			t.Fatalf("grant %+v at %d: training must stay blocked while requests arrive", g, i)
		}
		h.release(inf, g, 2*msec)
		h.clock.Advance(8 * msec)
	}
	h.none()
	// Past the starvation limit, with nothing queued, it runs once to re-measure.
	h.clock.Advance(time.Second)
	g := h.one()
	if g.Worker != tr {
		t.Fatalf("grant %+v: want the starved training minibatch", g)
	}
	if wl, _ := h.s.Snapshot().Workload(proto.RoleTrain, "resnet18"); wl.StarvedAdmits != 1 {
		t.Fatalf("starved admits %d, want 1", wl.StarvedAdmits)
	}
}

// After a mode change the controller hands the scheduler the new mode's times: a
// training worker measured at a slow mode (expected 400 ms > L) is admitted at once at a
// fast one instead of starving; ExpectTimes with no times forgets the old measurement
// (the configured default applies again).
func TestExpectTimesReplacesStaleEstimates(t *testing.T) {
	h := newHarness(t, cfg(150*msec, 60*msec, 5*msec))
	inf := h.register(proto.RoleInfer, "yolo", 1)
	tr := h.register(proto.RoleTrain, "resnet18", 32)
	h.must(h.s.Acquire(tr, 0))
	h.release(tr, h.one(), 60*msec) // warm-up
	for range 3 {
		h.must(h.s.Acquire(tr, 0))
		h.release(tr, h.one(), 400*msec) // the slow mode
	}
	// Requests every 10 ms: a 400 ms minibatch cannot be admitted.
	serve := func(i int) Grant {
		h.must(h.s.Acquire(inf, 0))
		h.arrive(inf, fmt.Sprint(i))
		g := h.one()
		h.release(inf, g, 2*msec)
		h.clock.Advance(8 * msec)
		return g
	}
	for i := range 20 {
		serve(i)
	}
	h.must(h.s.Acquire(tr, 0))
	h.none()
	h.arrive(inf, "queued")
	h.none() // a partial batch with slack left waits; training still does not fit
	if err := h.s.ExpectTimes("nobody", nil); err == nil {
		t.Error("ExpectTimes for an unknown worker: no error")
	}
	// The new mode: 100 ms training, 4 ms inference batches.
	h.must(h.s.ExpectTimes(inf, map[int]time.Duration{1: 4 * msec}))
	h.none()
	h.must(h.s.ExpectTimes(tr, map[int]time.Duration{32: 100 * msec}))
	g := h.one()
	if g.Worker != tr || g.Kind != proto.KindTrain {
		t.Fatalf("grant %+v: want the training minibatch, admitted with the new mode's time", g)
	}
	// cfg() has DevK 0: the expected time is the new mode's 100 ms itself.
	if wl, _ := h.s.Snapshot().Workload(proto.RoleTrain, "resnet18"); math.Abs(wl.ExpectedTrainMS-100) > 0.01 {
		t.Errorf("expected training time %.2f ms, want the new mode's 100 ms", wl.ExpectedTrainMS)
	}
	h.release(tr, g, 100*msec)
	// Forgetting: unknown again (the snapshot shows none; the configured default applies
	// until a minibatch is measured).
	h.must(h.s.ExpectTimes(tr, nil))
	if wl, _ := h.s.Snapshot().Workload(proto.RoleTrain, "resnet18"); wl.ExpectedTrainMS != 0 {
		t.Errorf("after forgetting, expected training time %.1f ms, want none", wl.ExpectedTrainMS)
	}
}
