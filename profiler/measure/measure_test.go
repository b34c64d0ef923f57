package measure

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/profiler/store"
)

// clock is a test clock that moves only when a batch runs (by the batch's time), or
// never (still).
type clock struct {
	t     time.Time
	still bool
}

func (c *clock) Now() time.Time { return c.t }

func (c *clock) run(d time.Duration) {
	if !c.still {
		c.t = c.t.Add(d)
	}
}

// meter records what it is told.
type meter struct {
	warm, ran  int
	started    bool
	stopped    []Span
	failAt     int // fail the ran-th measured batch (0: never)
	failWarmAt int // fail the warm-th warm-up batch (0: never)
}

var errGuard = errors.New("over budget")

func (m *meter) Ran(_ context.Context, b Ran) error {
	if b.Warmup {
		if m.started {
			panic("a warm-up batch after Start")
		}
		m.warm++
		if m.warm == m.failWarmAt {
			return errGuard
		}
		return nil
	}
	m.ran++
	if m.ran == m.failAt {
		return errGuard
	}
	return nil
}

func (m *meter) Start(context.Context, time.Time) { m.started = true }

func (m *meter) Stop(_ context.Context, s Span) (Power, error) {
	m.stopped = append(m.stopped, s)
	return Power{MeanMW: 20000, Readings: 3}, nil
}

// alternating is 90, 110, 90, … ms: the mean's RSE first reaches 0.021 at 24 batches
// (0.1/√23 = 0.02085; at 23 it is 0.02139, at 22 0.02182).
func alternating(i int) time.Duration {
	if i%2 == 0 {
		return 90 * time.Millisecond
	}
	return 110 * time.Millisecond
}

func steady(int) time.Duration { return 100 * time.Millisecond }

// batches runs times(i) for the i-th batch (warm-up included), moving the clock.
func batches(c *clock, times func(int) time.Duration) (Batch, *int) {
	n := 0
	return func(context.Context) (time.Duration, error) {
		d := times(n)
		n++
		c.run(d)
		return d, nil
	}, &n
}

func TestRuleDone(t *testing.T) {
	r := Rule{MinSamples: 5, MinTime: 300 * time.Millisecond, TargetRSE: 0.02, MaxSamples: 50}
	for _, tc := range []struct {
		name    string
		n       int
		sd      float64 // of a mean of 100
		elapsed time.Duration
		want    bool
	}{
		{"under the minimum count", 4, 0, time.Second, false},
		{"under the minimum time", 5, 0, 299 * time.Millisecond, false},
		{"both minimums, precise", 5, 0, 300 * time.Millisecond, true},
		{"both minimums, imprecise", 5, 10, time.Second, false},
		{"imprecise at the cap", 50, 20, time.Second, true},
		{"at the cap, under the minimum time", 50, 0, 10 * time.Millisecond, false},
		{"the limit ends it whatever the time", 500, 0, 0, true},
	} {
		if got := r.Done(tc.n, 100, tc.sd, tc.elapsed); got != tc.want {
			t.Errorf("%s: Done(%d, 100, %v, %s) = %v, want %v", tc.name, tc.n, tc.sd, tc.elapsed, got, tc.want)
		}
	}
	if l := (Rule{MinSamples: 3, MaxSamples: 1000}).Limit(); l != 1000 {
		t.Errorf("Limit with MaxSamples above 100 × MinSamples = %d, want MaxSamples", l)
	}
}

func TestLoopStops(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rule     Rule
		times    func(int) time.Duration
		still    bool
		wantWarm int
		wantN    int
	}{
		{"steady stops at the minimum", Rule{Warmup: 2, MinSamples: 5, TargetRSE: 0.02, MaxSamples: 50}, steady, false, 2, 5},
		// Warm-ups of 100 ms until 250 ms have passed: three.
		{"warm-up by time", Rule{Warmup: 1, WarmupTime: 250 * time.Millisecond, MinSamples: 5, TargetRSE: 0.02, MaxSamples: 50}, steady, false, 3, 5},
		{"noisy runs until the target", Rule{Warmup: 0, MinSamples: 5, TargetRSE: 0.021, MaxSamples: 50}, alternating, false, 0, 24},
		{"the cap stops a noisy run", Rule{MinSamples: 5, TargetRSE: 0.021, MaxSamples: 10}, alternating, false, 0, 10},
		// 100 ms batches, at least 1 s: ten, although five are precise and the cap is 8.
		{"the minimum time holds past the cap", Rule{MinSamples: 5, MinTime: time.Second, TargetRSE: 0.02, MaxSamples: 8}, steady, false, 0, 10},
		// A clock that does not move: the minimum time is never reached.
		{"the limit ends a still clock", Rule{MinSamples: 3, MinTime: time.Second, TargetRSE: 0.02, MaxSamples: 50}, steady, true, 0, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{t: time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC), still: tc.still}
			run, calls := batches(c, tc.times)
			m := &meter{}
			res, err := Loop{Rule: tc.rule, Clock: c, Meter: m}.Run(context.Background(), run)
			if err != nil {
				t.Fatal(err)
			}
			if res.Warmup != tc.wantWarm || len(res.TimesMS) != tc.wantN || *calls != tc.wantWarm+tc.wantN {
				t.Fatalf("warm-up %d, measured %d, batches run %d; want %d + %d", res.Warmup, len(res.TimesMS), *calls, tc.wantWarm, tc.wantN)
			}
			if m.warm != tc.wantWarm || m.ran != tc.wantN || len(m.stopped) != 1 || m.stopped[0].Batches != tc.wantN || m.stopped[0].Err != nil {
				t.Fatalf("meter told of %d warm-up and %d measured batches, stopped %+v", m.warm, m.ran, m.stopped)
			}
			if res.Power.MeanMW != 20000 || !res.Start.Equal(m.stopped[0].Start) || !res.End.Equal(m.stopped[0].End) {
				t.Fatalf("result %+v, meter's span %+v", res, m.stopped[0])
			}
			k := store.Key{Board: "b", Workload: "w", Role: "train", Batch: 32}
			p := res.Profile(k, store.SourceLive)
			if p.Samples != tc.wantN || p.Warmup != tc.wantWarm || p.PowerSamples != 3 || p.Key() != k || p.Source != store.SourceLive {
				t.Fatalf("profile %+v", p)
			}
			if tc.rule.MaxSamples > len(res.TimesMS) && p.RSE > tc.rule.TargetRSE {
				t.Fatalf("stopped before the cap with rse %v over the target %v", p.RSE, tc.rule.TargetRSE)
			}
		})
	}
}

// A discarded batch is neither a sample nor told to the meter; Discard's error ends the
// measurement; the meter's error is returned as it is, warm-up or measured, and Stop
// is told of the failure.
func TestLoopDiscardsAndFails(t *testing.T) {
	newClock := func() *clock { return &clock{t: time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)} }
	rule := Rule{Warmup: 1, MinSamples: 5, TargetRSE: 0.02, MaxSamples: 50}

	c := newClock()
	fast := func(i int) time.Duration {
		if i%3 == 1 {
			return time.Microsecond // every third after the warm-up: nothing ran
		}
		return 100 * time.Millisecond
	}
	run, calls := batches(c, fast)
	m := &meter{}
	discarded := 0
	l := Loop{Rule: rule, Clock: c, Meter: m, Discard: func(d time.Duration, kept int) (bool, error) {
		if d < time.Millisecond {
			discarded++
			return true, nil
		}
		return false, nil
	}}
	res, err := l.Run(context.Background(), run)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.TimesMS) != 5 || m.ran != 5 || discarded == 0 || *calls != 1+5+discarded || res.TimesMS[0] != 100 {
		t.Fatalf("kept %v (meter told of %d), %d discarded, %d run", res.TimesMS, m.ran, discarded, *calls)
	}

	errBogus := errors.New("bogus batches")
	c = newClock()
	run, _ = batches(c, steady)
	m = &meter{}
	l = Loop{Rule: rule, Clock: c, Meter: m, Discard: func(time.Duration, int) (bool, error) { return true, errBogus }}
	if _, err := l.Run(context.Background(), run); !errors.Is(err, errBogus) || len(m.stopped) != 1 || !errors.Is(m.stopped[0].Err, errBogus) {
		t.Fatalf("Discard's error: %v, stopped %+v", err, m.stopped)
	}

	for _, m := range []*meter{{failWarmAt: 1}, {failAt: 3}} {
		c = newClock()
		run, _ = batches(c, steady)
		_, err := Loop{Rule: rule, Clock: c, Meter: m}.Run(context.Background(), run)
		if err != errGuard {
			t.Fatalf("meter failing %+v: %v, want its error as it is", m, err)
		}
		if wantStops := min(m.failAt, 1); len(m.stopped) != wantStops {
			t.Fatalf("meter failing %+v: stopped %d times, want %d (once after Start)", m, len(m.stopped), wantStops)
		}
	}

	c = newClock()
	n := 0
	failing := func(context.Context) (time.Duration, error) {
		n++
		if n == 3 {
			return 0, errors.New("worker crashed")
		}
		return 100 * time.Millisecond, nil
	}
	if _, err := (Loop{Rule: rule, Clock: c, Meter: &meter{}, Unit: "minibatch"}).Run(context.Background(), failing); err == nil || err.Error() != "minibatch 2: worker crashed" {
		t.Fatalf("a failing batch: %v, want it named", err)
	}
	n = 0
	zero := func(context.Context) (time.Duration, error) {
		n++
		return time.Duration(min(n-1, 1)) * -time.Millisecond, nil
	}
	if _, err := (Loop{Rule: rule, Clock: c, Meter: &meter{}}).Run(context.Background(), zero); err == nil || !strings.Contains(err.Error(), "batch 1:") || !strings.Contains(err.Error(), "positive") {
		t.Fatalf("a batch of no time: %v", err)
	}
	if r := (Result{TimesMS: []float64{5}}).RSE(); r != 0 || math.IsInf(r, 0) {
		t.Fatalf("RSE of one batch = %v, want 0 (no estimate)", r)
	}
}
