package sched

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

func (h *harness) registerSpec(spec WorkerSpec) string {
	h.t.Helper()
	id, _, err := h.s.Register(spec, func(g Grant) {
		h.mu.Lock()
		h.got = append(h.got, g)
		h.mu.Unlock()
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return id
}

// microSim runs a training worker and an inference stream on a fake clock: a training
// turn of n samples takes 2 ms + 2.5 ms × n (a minibatch of 32: 82 ms), an inference
// batch 5 ms; a request arrives every 20 ms. Workers re-acquire at once.
type microSim struct {
	h        *harness
	tr, inf  string
	pending  map[string]Grant
	until    map[string]time.Time
	next     time.Time
	seq      int
	trains   []Grant // training grants in order
	answered int
	quiet    bool // no more arrivals
}

func newMicroSim(t *testing.T, latency time.Duration, micro []int) *microSim {
	h := newHarness(t, testConfig{LatencyBudget: latency, Config: Config{DefaultTrain: 10 * msec, DefaultInfer: 5 * msec, Starve: time.Hour}})
	m := &microSim{h: h, pending: map[string]Grant{}, until: map[string]time.Time{}}
	m.inf = h.register(proto.RoleInfer, "cam", 1)
	m.tr = h.registerSpec(WorkerSpec{Role: proto.RoleTrain, Workload: "resnet18", Batch: 32, MicroBatches: micro})
	h.must(h.s.Acquire(m.inf, 0))
	h.must(h.s.Acquire(m.tr, 0))
	m.next = h.clock.Now().Add(100 * msec) // training warms up alone first
	return m
}

func (m *microSim) take() {
	now := m.h.clock.Now()
	for _, g := range m.h.grants() {
		d := 5 * msec
		if g.Kind == proto.KindTrain {
			n := g.Batch
			if g.MicroBatch > 0 {
				n = g.MicroBatch
			}
			d = 2*msec + time.Duration(n)*2500*time.Microsecond
			m.trains = append(m.trains, g)
		}
		m.pending[g.Worker] = g
		m.until[g.Worker] = now.Add(d)
	}
}

func (m *microSim) run(d time.Duration) {
	end := m.h.clock.Now().Add(d)
	m.take()
	for m.h.clock.Now().Before(end) {
		m.h.clock.Advance(msec)
		now := m.h.clock.Now()
		if !m.quiet && !now.Before(m.next) {
			m.seq++
			m.h.arrive(m.inf, "r"+strconv.Itoa(m.seq))
			m.next = m.next.Add(20 * msec)
		}
		for w, g := range m.pending {
			if now.Before(m.until[w]) {
				continue
			}
			delete(m.pending, w)
			if g.Kind == proto.KindInfer {
				m.answered += len(g.RequestIDs)
			}
			m.h.must(m.h.s.Release(w, Release{Grant: g.ID}))
			m.h.must(m.h.s.Acquire(w, 0))
		}
		m.take()
	}
}

// A 40 ms budget cannot hold an 82 ms minibatch: a worker that declares no micro-batches
// trains only while no request has arrived yet; one that declares 8 and 16 keeps
// training at micro-batch 8 (22 ms turns; 16's 42 ms do not fit), its four
// turns per minibatch in order, and every request is answered within its deadline.
func TestMicroBatchesKeepTrainingUnderAShortBudget(t *testing.T) {
	old := newMicroSim(t, 40*msec, nil)
	old.run(3 * time.Second)
	wl, _ := old.h.s.Snapshot().Workload(proto.RoleTrain, "resnet18")
	before := wl.Minibatches

	m := newMicroSim(t, 40*msec, []int{8, 16})
	m.run(3 * time.Second)
	var w WorkerInfo
	for _, x := range m.h.s.Snapshot().Workers {
		if x.ID == m.tr {
			w = x
		}
	}
	m.quiet = true
	m.run(200 * msec) // the last requests are answered
	snap := m.h.s.Snapshot()
	tw, _ := snap.Workload(proto.RoleTrain, "resnet18")
	iw, _ := snap.Workload(proto.RoleInfer, "cam")
	t.Logf("no micro-batches: %d minibatches in 3 s; micro-batches 8/16: %d minibatches, %d samples; requests %d served %d missed %d",
		before, tw.Minibatches, tw.Samples, iw.Requests, iw.Served, iw.DeadlineMisses)
	if before > 2 {
		t.Fatalf("without micro-batches %d minibatches ran beside the stream; the setup should keep whole minibatches out", before)
	}
	if tw.Minibatches < 10 {
		t.Fatalf("with micro-batches only %d minibatches ran in 3 s: training should continue at micro-batch 8", tw.Minibatches)
	}
	if iw.DeadlineMisses != 0 || iw.Failed != 0 || iw.Served != iw.Requests || m.answered != int(iw.Requests) {
		t.Fatalf("requests %d served %d failed %d missed %d: every request must be answered within its deadline",
			iw.Requests, iw.Served, iw.Failed, iw.DeadlineMisses)
	}
	// While requests flow, minibatches run as 4 turns of 8, counted once.
	if w.MicroBatch != 8 || fmt.Sprint(w.MicroBatches) != "[8 16 32]" {
		t.Fatalf("status shows micro_batch %d of %v, want 8 of [8 16 32]", w.MicroBatch, w.MicroBatches)
	}
	done, eights := 0, 0
	for _, g := range m.trains {
		switch {
		case g.MicroBatch == 8:
			eights++
			done += 8
		case g.MicroBatch == 0 && done%32 == 0:
			done += 32
		case g.MicroBatch == 16 && (done%32 == 0 || done%32 == 16):
			done += 16
		default:
			t.Fatalf("training grant %+v after %d samples: a minibatch's turns must all be one size", g, done)
		}
	}
	// The last turn granted may still be running.
	if eights < 40 || done/32 < int(tw.Minibatches) || tw.Samples > uint64(done) || uint64(done)-tw.Samples > 32 {
		t.Fatalf("%d turns of 8, %d samples granted; status %d minibatches %d samples", eights, done, tw.Minibatches, tw.Samples)
	}
}

// Two training workloads with equal weights: the one running micro-batches of 8 (fixed
// through SetMicroBatch) gets its four turns in a row before the other's minibatch, and
// each minibatch counts once.
func TestMicroBatchTurnsOfOneMinibatchStayTogether(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 10*msec, 10*msec))
	a := h.registerSpec(WorkerSpec{Role: proto.RoleTrain, Workload: "a", Batch: 32, MicroBatches: []int{8}})
	b := h.register(proto.RoleTrain, "b", 32)
	h.must(h.s.SetMicroBatch(a, 8))
	h.must(h.s.Acquire(a, 0))
	h.must(h.s.Acquire(b, 0))
	var order []string
	for i := 0; i < 10; i++ {
		g := h.one()
		label := g.Worker
		if g.MicroBatch > 0 {
			label += "/" + strconv.Itoa(g.MicroBatch)
		}
		order = append(order, label)
		d := 40 * msec
		if g.MicroBatch > 0 {
			d = 10 * msec // a quarter of the minibatch: equal GPU time per minibatch
		}
		h.release(g.Worker, g, d)
		h.must(h.s.Acquire(g.Worker, 0))
	}
	am := a + "/8"
	want := fmt.Sprint([]string{am, am, am, am, b, am, am, am, am, b})
	if fmt.Sprint(order) != want {
		t.Fatalf("training turns %v, want %v (a minibatch's micro-batches in a row, shares by minibatch)", order, want)
	}
	snap := h.s.Snapshot()
	wa, _ := snap.Workload(proto.RoleTrain, "a")
	wb, _ := snap.Workload(proto.RoleTrain, "b")
	if wa.Minibatches != 2 || wa.Samples != 64 || wb.Minibatches != 2 {
		t.Fatalf("a: %d minibatches %d samples, b: %d minibatches; want 2/64 and 2", wa.Minibatches, wa.Samples, wb.Minibatches)
	}
	if wa.ExpectedMicroMS[8] == 0 {
		t.Fatalf("expected micro-batch times %v: want the measured turn of 8", wa.ExpectedMicroMS)
	}
}

// A micro-batch turn's hold limit follows the micro-batch's expected time, not the
// minibatch's: a worker holding a 10 ms micro-batch turn for 2 s loses it, where the
// 500 ms minibatch's limit would be 5 s.
func TestMicroBatchHoldLimitIsTheMicroBatchs(t *testing.T) {
	c := cfg(time.Second, 10*msec, 5*msec)
	c.HoldFactor, c.HoldMin, c.HoldMax = 10, 100*msec, time.Minute
	h := newHarness(t, c)
	tr := h.registerSpec(WorkerSpec{Role: proto.RoleTrain, Workload: "r", Batch: 32, MicroBatches: []int{4}})
	h.must(h.s.ExpectTimes(tr, map[int]time.Duration{32: 500 * msec, 4: 10 * msec}))
	h.must(h.s.SetMicroBatch(tr, 4))
	h.must(h.s.Acquire(tr, 0))
	g := h.one()
	if g.MicroBatch != 4 {
		t.Fatalf("grant %+v: want a micro-batch of 4", g)
	}
	h.clock.Advance(2 * time.Second)
	if snap := h.s.Snapshot(); snap.HoldExpired != 1 {
		t.Fatalf("hold expired %d after holding a 10 ms micro-batch turn 2 s; want it taken back", snap.HoldExpired)
	}
}

// The starvation rule admits one micro-batch turn, judged on the micro-batch's own
// estimate.
func TestStarvedMicroBatchTurn(t *testing.T) {
	c := cfg(50*msec, 10*msec, 5*msec)
	c.Starve = time.Second
	h := newHarness(t, c)
	inf := h.register(proto.RoleInfer, "cam", 1)
	tr := h.registerSpec(WorkerSpec{Role: proto.RoleTrain, Workload: "r", Batch: 32, MicroBatches: []int{8}})
	h.must(h.s.ExpectTimes(tr, map[int]time.Duration{32: 400 * msec, 8: 100 * msec}))
	for i := 0; i < 30; i++ { // requests every 10 ms: nothing of 100 ms is admitted
		h.must(h.s.Acquire(inf, 0))
		h.arrive(inf, strconv.Itoa(i))
		h.release(inf, h.one(), 2*msec)
		h.clock.Advance(8 * msec)
	}
	h.must(h.s.Acquire(tr, 0))
	h.none()
	h.clock.Advance(2 * time.Second)
	g := h.one()
	if g.Worker != tr || g.MicroBatch != 8 {
		t.Fatalf("grant %+v: want the starved training worker's micro-batch of 8", g)
	}
	if wl, _ := h.s.Snapshot().Workload(proto.RoleTrain, "r"); wl.StarvedAdmits != 1 {
		t.Fatalf("starved admits %d, want 1", wl.StarvedAdmits)
	}
}

func TestMicroBatchRegistrationChecked(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 10*msec, 10*msec))
	for _, spec := range []WorkerSpec{
		{Role: proto.RoleTrain, Workload: "r", Batch: 32, MicroBatches: []int{12}},
		{Role: proto.RoleTrain, Workload: "r", Batch: 32, MicroBatches: []int{8, 8}},
		{Role: proto.RoleTrain, Workload: "r", Batch: 32, MicroBatches: []int{0}},
		{Role: proto.RoleInfer, Workload: "r", Batch: 8, MicroBatches: []int{4}},
	} {
		if _, _, err := h.s.Register(spec, func(Grant) {}); err == nil {
			t.Fatalf("registered %+v: want it refused", spec)
		}
	}
	tr := h.registerSpec(WorkerSpec{Role: proto.RoleTrain, Workload: "r", Batch: 32, MicroBatches: []int{16, 4}})
	if err := h.s.SetMicroBatch(tr, 8); err == nil {
		t.Fatal("SetMicroBatch(8) accepted for a worker that declared 4 and 16")
	}
	// A worker that declared nothing gets whole minibatches, no micro_batch field.
	old := h.register(proto.RoleTrain, "old", 32)
	h.must(h.s.Acquire(old, 0))
	if g := h.one(); g.MicroBatch != 0 || g.Batch != 32 {
		t.Fatalf("grant %+v: an old client gets its whole minibatch", g)
	}
}

// The size set through SetMicroBatch (the controller's plan) is a ceiling: where its
// turn does not fit the stream's room (16's 42 ms beside a 40 ms budget), the minibatch
// runs at the largest smaller declared size that fits (8) instead of leaving the GPU idle
// between requests; where a larger size would fit (a 200 ms budget), the set size is
// never exceeded.
func TestSetMicroBatchIsACeiling(t *testing.T) {
	m := newMicroSim(t, 40*msec, []int{8, 16})
	m.h.must(m.h.s.SetMicroBatch(m.tr, 16))
	m.run(3 * time.Second)
	m.quiet = true
	m.run(200 * msec)
	snap := m.h.s.Snapshot()
	tw, _ := snap.Workload(proto.RoleTrain, "resnet18")
	iw, _ := snap.Workload(proto.RoleInfer, "cam")
	if tw.Minibatches < 10 {
		t.Fatalf("set to 16, only %d minibatches ran in 3 s: training should go on at micro-batch 8", tw.Minibatches)
	}
	if iw.DeadlineMisses != 0 || iw.Served != iw.Requests {
		t.Fatalf("requests %d served %d missed %d: every request must be answered within its deadline", iw.Requests, iw.Served, iw.DeadlineMisses)
	}
	for _, g := range m.trains[1:] { // the first turn ran before any request arrived
		if g.MicroBatch != 8 && g.MicroBatch != 16 {
			t.Fatalf("training grant %+v: want turns of 8 (16 where nothing queued could miss)", g)
		}
	}

	wide := newMicroSim(t, 200*msec, []int{8, 16})
	wide.h.must(wide.h.s.SetMicroBatch(wide.tr, 8))
	wide.run(2 * time.Second)
	for _, g := range wide.trains[1:] {
		if g.MicroBatch != 8 {
			t.Fatalf("set to 8 beside a 200 ms budget, granted %+v: the set size is a ceiling", g)
		}
	}
	if len(wide.trains) < 40 {
		t.Fatalf("%d training turns in 2 s", len(wide.trains))
	}
}
