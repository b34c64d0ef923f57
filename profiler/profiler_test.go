package profiler

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

var m30w = powermode.Mode{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000}

func TestStats(t *testing.T) {
	tests := []struct {
		xs            []float64
		mean, sd      float64
		p50, p95, rse float64
		rseInf        bool
	}{
		{xs: []float64{7}, mean: 7, sd: 0, p50: 7, p95: 7, rseInf: true},
		{xs: []float64{1, 2, 3, 4}, mean: 2.5, sd: math.Sqrt(5.0 / 3), p50: 2.5, p95: 3.85, rse: math.Sqrt(5.0/3) / 2 / 2.5},
		{xs: []float64{10, 10, 10}, mean: 10, sd: 0, p50: 10, p95: 10, rse: 0},
		{xs: []float64{5, 1, 4, 2, 3}, mean: 3, sd: math.Sqrt(2.5), p50: 3, p95: 4.8, rse: math.Sqrt(2.5) / math.Sqrt(5) / 3},
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
	for _, tc := range tests {
		s := summarize(tc.xs)
		if s.n != len(tc.xs) || !near(s.mean, tc.mean) || !near(s.stddev, tc.sd) {
			t.Errorf("summarize(%v) = %+v, want mean %v sd %v", tc.xs, s, tc.mean, tc.sd)
		}
		if got := quantile(tc.xs, 0.5); !near(got, tc.p50) {
			t.Errorf("p50(%v) = %v, want %v", tc.xs, got, tc.p50)
		}
		if got := quantile(tc.xs, 0.95); !near(got, tc.p95) {
			t.Errorf("p95(%v) = %v, want %v", tc.xs, got, tc.p95)
		}
		if got := s.rse(); (tc.rseInf && !math.IsInf(got, 1)) || (!tc.rseInf && !near(got, tc.rse)) {
			t.Errorf("rse(%v) = %v, want %v (inf %v)", tc.xs, got, tc.rse, tc.rseInf)
		}
	}
}

// alternating gives 90, 110, 90, ... ms: the mean's RSE first reaches 0.021 at 24
// samples (0.1/√23 = 0.02085; at 23 it is 0.02139, at 22 0.02182).
func alternating(i int) time.Duration {
	if i%2 == 0 {
		return 90 * time.Millisecond
	}
	return 110 * time.Millisecond
}

func TestProfileStopRule(t *testing.T) {
	tests := []struct {
		name        string
		times       func(int) time.Duration
		opts        Options
		wantSamples int
		wantMean    float64
		rseAtMost   float64
	}{
		{"steady stops at the minimum", func(int) time.Duration { return 100 * time.Millisecond }, Options{}, 5, 100, 0},
		{"noisy runs until the target", alternating, Options{TargetRSE: 0.021}, 24, 100, 0.021},
		{"cap stops a noisy run", alternating, Options{TargetRSE: 0.021, MaxSamples: 10}, 10, 100, math.Inf(1)},
		{"larger minimum", func(int) time.Duration { return 100 * time.Millisecond }, Options{MinSamples: 8}, 8, 100, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			board := newFakeBoard(t)
			run := &fakeRunner{board: board, warmup: 2, times: tc.times}
			tc.opts.PowerSampleInterval = time.Millisecond
			p := &Profiler{Backend: board, Runner: run, Store: newStore(t), Options: tc.opts, Clock: &fixedClock{t: time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)}}
			prof, err := p.Profile(context.Background(), "resnet18", truth.Train, m30w, 32)
			if err != nil {
				t.Fatal(err)
			}
			if prof.Samples != tc.wantSamples || run.calls != tc.wantSamples+2 {
				t.Errorf("samples = %d (runner called %d times), want %d (+2 warm-up)", prof.Samples, run.calls, tc.wantSamples)
			}
			if math.Abs(prof.TimeMS.Mean-tc.wantMean) > 1e-9 {
				t.Errorf("time mean = %v, want %v (warm-up runs of 1 s must not count)", prof.TimeMS.Mean, tc.wantMean)
			}
			if prof.RSE > tc.rseAtMost {
				t.Errorf("rse = %v, want at most %v", prof.RSE, tc.rseAtMost)
			}
			if tc.opts.MaxSamples != 0 && prof.RSE <= tc.opts.TargetRSE {
				t.Errorf("capped run: rse = %v, want it above the target %v (the cap, not precision, stopped it)", prof.RSE, tc.opts.TargetRSE)
			}
			if prof.Warmup != 2 || prof.Source != store.SourceSim || prof.Board != "fake-orin" {
				t.Errorf("profile fields: %+v", prof)
			}
			for i, m := range run.modes {
				if m != m30w {
					t.Errorf("minibatch %d ran at %s, want the profiled mode %s", i+1, m, m30w)
				}
			}
			stored, err := p.Store.Get(prof.Key())
			if err != nil || stored != prof {
				t.Errorf("stored = %+v, %v; want the returned profile", stored, err)
			}
			if !prof.FinishedAt.After(prof.StartedAt) {
				t.Errorf("finished_at %v not after started_at %v", prof.FinishedAt, prof.StartedAt)
			}
		})
	}
}

func TestProfileSamplesPowerDuringRuns(t *testing.T) {
	board := newFakeBoard(t)
	// Readings alternate 19 W / 21 W; a reading during warm-up would be 99 W.
	board.powerFn = func(call int, warmup bool) float64 {
		if warmup {
			return 99000
		}
		return 19000 + 2000*float64(call%2)
	}
	run := &fakeRunner{board: board, warmup: 2, times: func(int) time.Duration { return 50 * time.Millisecond }}
	p := &Profiler{Backend: board, Runner: run, Store: newStore(t), Options: Options{PowerSampleInterval: time.Millisecond, WarmupTime: -1}}
	prof, err := p.Profile(context.Background(), "mobilenet", truth.Infer, m30w, 8)
	if err != nil {
		t.Fatal(err)
	}
	board.mu.Lock()
	got := append([]float64(nil), board.returned...)
	board.mu.Unlock()
	if prof.PowerSamples != len(got) || prof.PowerSamples < prof.Samples {
		t.Fatalf("power_samples = %d, board read %d times, %d minibatches: want every reading kept and at least one per minibatch", prof.PowerSamples, len(got), prof.Samples)
	}
	want := summarize(got)
	if prof.PowerMW.Mean != want.mean || prof.PowerMW.Stddev != want.stddev {
		t.Errorf("power = %+v, want mean %v sd %v of the readings", prof.PowerMW, want.mean, want.stddev)
	}
	for _, v := range got {
		if v == 99000 {
			t.Error("power was read during warm-up")
		}
	}
	if prof.PowerMW.Mean < 19000 || prof.PowerMW.Mean > 21000 || prof.PowerMW.Stddev == 0 {
		t.Errorf("power mean %v / sd %v: want within the readings' range with spread", prof.PowerMW.Mean, prof.PowerMW.Stddev)
	}
}

func TestProfileErrors(t *testing.T) {
	t.Run("no power readings", func(t *testing.T) {
		board := newFakeBoard(t)
		board.powerErr = errors.New("ina3221 gone")
		p := &Profiler{Backend: board, Runner: &fakeRunner{board: board, warmup: 2, times: alternating}, Store: newStore(t), Options: Options{PowerSampleInterval: time.Millisecond, WarmupTime: -1}}
		_, err := p.Profile(context.Background(), "resnet18", truth.Train, m30w, 32)
		if err == nil || !strings.Contains(err.Error(), "ina3221 gone") {
			t.Errorf("err = %v, want the power error", err)
		}
		if n, _ := p.Store.Count(); n != 0 {
			t.Errorf("stored %d profiles after a failure", n)
		}
	})
	t.Run("runner fails", func(t *testing.T) {
		board := newFakeBoard(t)
		p := &Profiler{Backend: board, Runner: &fakeRunner{board: board, warmup: 2, times: alternating, failAt: 4}, Store: newStore(t), Options: Options{PowerSampleInterval: time.Millisecond, WarmupTime: -1}}
		if _, err := p.Profile(context.Background(), "resnet18", truth.Train, m30w, 32); err == nil || !strings.Contains(err.Error(), "minibatch 2: worker crashed") {
			t.Errorf("err = %v", err)
		}
		if n, _ := p.Store.Count(); n != 0 {
			t.Errorf("stored %d profiles after a failure", n)
		}
	})
	t.Run("mode outside the space", func(t *testing.T) {
		board := newFakeBoard(t)
		run := &fakeRunner{board: board, warmup: 2, times: alternating}
		p := &Profiler{Backend: board, Runner: run, Store: newStore(t), Options: Options{PowerSampleInterval: time.Millisecond, WarmupTime: -1}}
		bad := powermode.Mode{Cores: 3, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000}
		if _, err := p.Profile(context.Background(), "resnet18", truth.Train, bad, 32); err == nil || run.calls != 0 || len(board.applied) != 0 {
			t.Errorf("err = %v, runner calls %d, applies %d: want refused before touching the board", err, run.calls, len(board.applied))
		}
	})
	t.Run("already stored", func(t *testing.T) {
		board := newFakeBoard(t)
		run := &fakeRunner{board: board, warmup: 2, times: func(int) time.Duration { return 10 * time.Millisecond }}
		p := &Profiler{Backend: board, Runner: run, Store: newStore(t), Options: Options{PowerSampleInterval: time.Millisecond, WarmupTime: -1}}
		first, err := p.Profile(context.Background(), "resnet18", truth.Train, m30w, 32)
		if err != nil {
			t.Fatal(err)
		}
		calls := run.calls
		if _, err := p.Profile(context.Background(), "resnet18", truth.Train, m30w, 32); !errors.Is(err, store.ErrExists) || run.calls != calls {
			t.Errorf("second Profile: err = %v, extra runner calls %d", err, run.calls-calls)
		}
		got, fresh, err := p.Ensure(context.Background(), "resnet18", truth.Train, m30w, 32)
		if err != nil || fresh || got != first || run.calls != calls {
			t.Errorf("Ensure of a stored key = %+v, fresh %v, %v", got, fresh, err)
		}
	})
}
