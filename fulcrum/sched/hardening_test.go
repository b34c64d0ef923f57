package sched

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// Issue 17 item 2: a release reporting more time than the turn was held (a second
// connection registered under a running workload's name, releasing with an hour after
// holding the turn ~0 ms) must not become the workload's expected time.
func TestReleasedDurationCheckedAgainstHeldTime(t *testing.T) {
	for _, tc := range []struct {
		name        string
		held        time.Duration
		reported    time.Duration
		wantMS      float64
		wantClamped uint64
	}{
		{"an hour after 10 ms", 10 * msec, time.Hour, 10, 1},
		{"zero held", 0, 3600 * time.Second, 0, 1},
		{"within the slack", 100 * msec, 101 * msec, 101, 0},
		// Issue 26 item 5: less than the turn was held counts as the held time.
		{"less than held", 100 * msec, 80 * msec, 100, 0},
		{"less than held within the slack", 100 * msec, 97 * msec, 97, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, cfg(100*msec, 50*msec, 10*msec))
			tr := h.register(proto.RoleTrain, "resnet", 8)
			h.must(h.s.Acquire(tr, 1))
			h.release(tr, h.one(), 50*msec) // the first minibatch is warm-up, not measured
			h.must(h.s.Acquire(tr, 2))
			g := h.one()
			h.clock.Advance(tc.held)
			h.must(h.s.Release(tr, Release{Grant: g.ID, Duration: tc.reported}))
			snap := h.s.Snapshot()
			wl, _ := snap.Workload(proto.RoleTrain, "resnet")
			if wl.ExpectedTrainMS != tc.wantMS || wl.DurationsClamped != tc.wantClamped || snap.DurationsClamped != tc.wantClamped {
				t.Fatalf("expected %v ms, clamped %d (total %d); want %v ms, clamped %d",
					wl.ExpectedTrainMS, wl.DurationsClamped, snap.DurationsClamped, tc.wantMS, tc.wantClamped)
			}
		})
	}
}

// Issue 17 item 3: register + acquire and never release used to stall every worker for
// as long as the connection lived. At the hold limit the turn is taken back, the others
// are granted, the holder is reported (the daemon drops it) and gets no more turns.
func TestHoldLimitTakesTheTurnBack(t *testing.T) {
	c := cfg(100*msec, 50*msec, 10*msec)
	c.HoldFactor, c.HoldMin = 10, time.Second
	type expiry struct {
		worker      string
		held, limit time.Duration
	}
	var got []expiry
	c.OnHoldExpired = func(w string, _ uint64, _ time.Time, held, limit time.Duration) {
		got = append(got, expiry{w, held, limit})
	}
	h := newHarness(t, c)
	hog := h.register(proto.RoleInfer, "yolo", 2)
	other := h.register(proto.RoleTrain, "resnet", 8)
	h.must(h.s.Acquire(hog, 1))
	h.arrive(hog, "a", "b")
	g := h.one()
	h.must(h.s.Acquire(other, 1))
	h.clock.Advance(999 * msec)
	h.none()
	if len(got) != 0 {
		t.Fatalf("expired before the limit: %+v", got)
	}
	h.clock.Advance(msec)
	if g2 := h.one(); g2.Worker != other {
		t.Fatalf("after the hold limit the grant went to %s; want %s", g2.Worker, other)
	}
	if len(got) != 1 || got[0].worker != hog || got[0].limit != time.Second || got[0].held != time.Second {
		t.Fatalf("OnHoldExpired calls %+v; want one for %s held 1s, limit 1s", got, hog)
	}
	var pe *proto.Error
	if err := h.s.Release(hog, Release{Grant: g.ID}); !errors.As(err, &pe) || pe.Code != proto.CodeTurnExpired {
		t.Fatalf("late release: %v; want %s", err, proto.CodeTurnExpired)
	}
	if err := h.s.Acquire(hog, 2); !errors.As(err, &pe) || pe.Code != proto.CodeTurnExpired {
		t.Fatalf("acquire after expiry: %v; want %s", err, proto.CodeTurnExpired)
	}
	snap := h.s.Snapshot()
	wl, _ := snap.Workload(proto.RoleInfer, "yolo")
	if wl.Failed != 2 || wl.HoldExpired != 1 || snap.HoldExpired != 1 {
		t.Fatalf("after expiry %+v (total expired %d); want the 2 held requests failed and 1 expiry", wl, snap.HoldExpired)
	}
}

// The hold limit is a multiple of the expected time with a floor, and never below the
// overrun limit.
func TestHoldLimitScalesWithExpectedTime(t *testing.T) {
	c := cfg(100*msec, 50*msec, 10*msec)
	c.HoldFactor, c.HoldMin = 10, 200*msec
	var limits []time.Duration
	c.OnHoldExpired = func(_ string, _ uint64, _ time.Time, _, limit time.Duration) { limits = append(limits, limit) }
	h := newHarness(t, c)
	tr := h.register(proto.RoleTrain, "resnet", 8)
	h.must(h.s.Acquire(tr, 1))
	h.release(tr, h.one(), 40*msec) // warm-up
	h.must(h.s.Acquire(tr, 2))
	h.release(tr, h.one(), 40*msec) // expected 40 ms from now on
	h.must(h.s.Acquire(tr, 3))
	h.one()
	h.clock.Advance(399 * msec)
	if len(limits) != 0 {
		t.Fatalf("expired at 399 ms with expected 40 ms × 10: %v", limits)
	}
	h.clock.Advance(msec)
	if fmt.Sprint(limits) != "[400ms]" {
		t.Fatalf("limits %v; want [400ms]", limits)
	}
}

// Issue 17 item 1: connections that register a fresh workload name and close used to
// keep five preallocated 10,000-sample windows per name, 256 names deep (2,000 names:
// 24 → 387 MB RSS). Now the windows grow with use and at most MaxIdleWorkloads idle
// workloads are kept; the forgotten ones are reported (metric series dropped).
func TestFreshWorkloadNamesStayBounded(t *testing.T) {
	c := cfg(100*msec, 50*msec, 10*msec)
	var forgotten int
	c.OnForget = func(role, name string) { forgotten++ }
	h := newHarness(t, c)
	live := h.register(proto.RoleTrain, "keep", 8)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const names = 2000
	for i := range names {
		id := h.register(proto.RoleInfer, fmt.Sprintf("fresh-%d", i), 1)
		h.s.Unregister(id)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	snap := h.s.Snapshot()
	if len(snap.Workloads) != MaxIdleWorkloads+1 || forgotten != names-MaxIdleWorkloads {
		t.Fatalf("%d workloads kept, %d forgotten; want %d kept (the idle ones plus the live one), %d forgotten",
			len(snap.Workloads), forgotten, MaxIdleWorkloads+1, names-MaxIdleWorkloads)
	}
	if _, ok := snap.Workload(proto.RoleTrain, "keep"); !ok || snap.Workers[0].ID != live {
		t.Fatal("the live workload was forgotten")
	}
	// Before: 32 idle names × 5 × 10,000 samples × 32 B ≈ 51 MB at the very least.
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 4<<20 {
		t.Fatalf("heap grew by %d bytes over %d fresh names; want a few KB per kept name", grown, names)
	}
}

// A workload idle longest is forgotten first; one that comes back keeps what was learned.
func TestIdleWorkloadsForgottenOldestFirst(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 50*msec, 10*msec))
	for i := range MaxIdleWorkloads + 1 {
		h.clock.Advance(msec)
		h.s.Unregister(h.register(proto.RoleTrain, fmt.Sprint("w", i), 8))
	}
	var names []string
	for _, wl := range h.s.Snapshot().Workloads {
		names = append(names, wl.Workload)
	}
	if slices.Contains(names, "w0") || !slices.Contains(names, "w1") || len(names) != MaxIdleWorkloads {
		t.Fatalf("kept %v; want all but w0", names)
	}
}

func TestWindowGrowsWrapsAndCompacts(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := newWindow(time.Minute, 40)
	if len(w.at) != 0 {
		t.Fatalf("a new window holds %d slots; want none until used", len(w.at))
	}
	for i := range 50 {
		w.add(t0.Add(time.Duration(i)*time.Second), float64(i))
	}
	v := w.values(t0.Add(49 * time.Second))
	if len(v) != 40 || v[0] != 10 || v[39] != 49 || len(w.at) != 40 {
		t.Fatalf("after 50 adds into 40: %d values %v…%v, %d slots; want 10…49 in 40 slots", len(v), v[0], v[len(v)-1], len(w.at))
	}
	w.compact(t0.Add(100 * time.Second)) // samples older than 40 s are gone
	if got := w.values(t0.Add(100 * time.Second)); len(got) != 10 || got[0] != 40 || len(w.at) != 10 {
		t.Fatalf("after compacting: %v in %d slots; want 40…49 in 10", got, len(w.at))
	}
	w.add(t0.Add(100*time.Second), 50)
	if got := w.values(t0.Add(100 * time.Second)); len(got) != 11 || got[10] != 50 {
		t.Fatalf("add after compacting: %v", got)
	}
}

// Issue 26 item 3: the hold limit followed the expected time, and a new workload's
// expected time is its latest release, so turns of 4.8 s, 45 s and 70 s, each released
// within the limit, raised it to ~700 s (10 h with duration_ms at its maximum). With the
// ceiling (HoldMax, 60 s by default) a turn is taken back at 60 s whatever came before,
// and the trainer waiting behind it is granted then.
func TestHoldLimitCannotRatchetPastCeiling(t *testing.T) {
	c := testConfig{Config: DefaultConfig()}
	type expiry struct {
		worker      string
		held, limit time.Duration
	}
	var got []expiry
	c.OnHoldExpired = func(w string, _ uint64, _ time.Time, held, limit time.Duration) {
		got = append(got, expiry{w, held, limit})
	}
	h := newHarness(t, c)
	big := h.register(proto.RoleTrain, "ratchet", 8)
	other := h.register(proto.RoleTrain, "victim", 8)
	for i, d := range []time.Duration{4800 * msec, 45 * time.Second} {
		h.must(h.s.Acquire(big, uint64(i+1)))
		g := h.one()
		if g.Worker != big {
			t.Fatalf("turn %d went to %s", i, g.Worker)
		}
		h.release(big, g, d) // honest: reported = held
		if len(got) != 0 {
			t.Fatalf("a %v turn expired: %+v", d, got)
		}
	}
	h.must(h.s.Acquire(big, 3))
	g := h.one()
	h.must(h.s.Acquire(other, 1))
	h.clock.Advance(c.HoldMax - msec)
	h.none()
	h.clock.Advance(msec)
	if len(got) != 1 || got[0].worker != big || got[0].limit > c.HoldMax {
		t.Fatalf("after 45 s turns, a turn held %v: expiries %+v; want one for %s at a limit ≤ %v", c.HoldMax, got, big, c.HoldMax)
	}
	if g2 := h.one(); g2.Worker != other {
		t.Fatalf("after the expiry the grant went to %s; want %s", g2.Worker, other)
	}
	t.Logf("hold limit after turns of 4.8 s and 45 s: %v (grant %d)", got[0].limit, g.ID)
}

// Issue 26 item 5: training shares counted the reported duration, so a job reporting
// duration_ms 0.001 for minibatches it held 50 ms got 99 % of the training turns. Shares
// now count the held time: two jobs holding their turns equally long get equal turns
// whatever they report.
func TestUnderReportedDurationsDoNotTakeTheShare(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 50*msec, 10*msec))
	liar := h.register(proto.RoleTrain, "liar", 8)
	honest := h.register(proto.RoleTrain, "honest", 8)
	h.must(h.s.Acquire(liar, 1))
	h.must(h.s.Acquire(honest, 1))
	turns := map[string]int{}
	for i := 0; i < 100; i++ {
		gs := h.grants()
		for j := 0; len(gs) == 0 && j < 10; j++ {
			h.clock.Advance(TrainRejoinGrace) // a claim held for a re-acquire lapses
			gs = h.grants()
		}
		if len(gs) != 1 {
			t.Fatalf("turn %d: grants %+v", i, gs)
		}
		g := gs[0]
		turns[g.Worker]++
		h.clock.Advance(50 * msec)
		reported := 50 * msec
		if g.Worker == liar {
			reported = time.Microsecond
		}
		h.must(h.s.Release(g.Worker, Release{Grant: g.ID, Duration: reported}))
		h.must(h.s.Acquire(g.Worker, uint64(i+2)))
	}
	t.Logf("turns of 50 ms each: liar %d, honest %d", turns[liar], turns[honest])
	if turns[honest] < 45 || turns[liar] > 55 {
		t.Fatalf("liar %d turns, honest %d of 100; want about half each (the held time counts)", turns[liar], turns[honest])
	}
	wl, _ := h.s.Snapshot().Workload(proto.RoleTrain, "liar")
	if wl.DurationsUnderReported == 0 {
		t.Fatalf("under-reported releases not counted: %+v", wl)
	}
}

// Issue 26 item 3: a process that lets a turn expire is on probation: for a minute the
// turns of its other workers are held to ProbationHold (or the overrun limit) rather
// than the full hold limit, so each of its dead connections costs the others a second,
// not hold_min_ms; a worker of another process keeps the full limit.
func TestProcessThatLetATurnExpireIsOnProbation(t *testing.T) {
	c := testConfig{Config: DefaultConfig()}
	var limits []string
	c.OnHoldExpired = func(w string, _ uint64, _ time.Time, held, _ time.Duration) {
		limits = append(limits, fmt.Sprint(w, " ", held))
	}
	h := newHarness(t, c)
	reg := func(pid int) string {
		id, _, err := h.s.Register(WorkerSpec{Role: proto.RoleTrain, Workload: "w" + fmt.Sprint(pid), Batch: 8, PID: pid}, func(g Grant) {
			h.mu.Lock()
			h.got = append(h.got, g)
			h.mu.Unlock()
		})
		h.must(err)
		return id
	}
	a, b, other := reg(100), reg(100), reg(200)
	h.must(h.s.Acquire(a, 1))
	if g := h.one(); g.Worker != a {
		t.Fatalf("first grant to %s", g.Worker)
	}
	h.must(h.s.Acquire(b, 1))
	h.must(h.s.Acquire(other, 1))
	h.clock.Advance(c.HoldMin) // a's turn expires; b (same process) is granted next
	if g := h.one(); g.Worker != b {
		t.Fatalf("after the expiry the grant went to %s; want %s", g.Worker, b)
	}
	h.clock.Advance(ProbationHold)
	g := h.one()
	if g.Worker != other || len(limits) != 2 {
		t.Fatalf("a second after b's grant: expiries %v, grant to %s; want b's turn taken back at %v and %s granted", limits, g.Worker, ProbationHold, other)
	}
	h.clock.Advance(2 * time.Second) // another process: the full limit still applies
	h.must(h.s.Release(other, Release{Grant: g.ID}))
	t.Logf("expiries: %v", limits)
	if len(limits) != 2 {
		t.Fatalf("the other process's 2 s turn expired: %v", limits)
	}
}
