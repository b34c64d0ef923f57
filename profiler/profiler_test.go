package profiler

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/internal/stats"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

var m30w = powermode.Mode{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000}

// TestStoredQuantilesMatchLive: the profiler stores p50/p95 by the one definition
// (internal/stats, nearest rank) that the controller's live profiler uses, so two
// profiles of the same samples agree. Before issue 14 the profiler interpolated: it
// stored p50 2.5 and p95 3.85 for these times where live profiling stored 2 and 4.
func TestStoredQuantilesMatchLive(t *testing.T) {
	times := []float64{4, 1, 3, 2} // ms, in the order the minibatches ran
	board := newFakeBoard(t)
	run := &fakeRunner{board: board, warmup: 2, times: func(i int) time.Duration { return time.Duration(times[i] * float64(time.Millisecond)) }}
	p := &Profiler{Backend: board, Runner: run, Store: newStore(t), Options: Options{PowerSampleInterval: time.Millisecond, MinSamples: 4, MaxSamples: 4, WarmupTime: -1}}
	prof, err := p.Profile(context.Background(), "resnet18", truth.Train, m30w, 32)
	if err != nil {
		t.Fatal(err)
	}
	want := stats.Summarize(times)
	if want.P50 != 2 || want.P95 != 4 {
		t.Fatalf("stats.Summarize(%v) = %+v, want nearest-rank p50 2, p95 4", times, want)
	}
	got := prof.TimeMS
	if got.P50 != want.P50 || got.P95 != want.P95 || got.Mean != want.Mean || got.Stddev != want.Stddev || prof.Samples != want.N {
		t.Errorf("stored time stats %+v (%d samples), want %+v: what live profiling stores for the same minibatches", got, prof.Samples, want)
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
	wantMean, wantSD := stats.MeanStddev(got)
	if prof.PowerMW.Mean != wantMean || prof.PowerMW.Stddev != wantSD {
		t.Errorf("power = %+v, want mean %v sd %v of the readings", prof.PowerMW, wantMean, wantSD)
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
