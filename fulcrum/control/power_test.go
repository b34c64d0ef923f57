package control

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
)

type stepBoard struct {
	fakeBoard
	mw float64
}

func (b *stepBoard) Power(context.Context) (powermode.PowerReading, error) {
	return powermode.PowerReading{TotalMW: b.mw}, nil
}

// MeanIn averages only the readings inside the given spans: a batch's power, not the
// gaps around it.
func TestPowerMonitorMeanIn(t *testing.T) {
	pm := NewPowerMonitor(10 * time.Second)
	b := &stepBoard{}
	t0 := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	// 20 readings 100 ms apart: 40 W during two batches (300–600 ms, 1200–1500 ms), 10 W
	// otherwise.
	for i := range 20 {
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		b.mw = 10000
		if ms := i * 100; ms >= 300 && ms <= 600 || ms >= 1200 && ms <= 1500 {
			b.mw = 40000
		}
		if err := pm.Sample(context.Background(), b, at); err != nil {
			t.Fatal(err)
		}
	}
	spans := []Interval{
		{From: t0.Add(300 * time.Millisecond), To: t0.Add(600 * time.Millisecond)},
		{From: t0.Add(1200 * time.Millisecond), To: t0.Add(1500 * time.Millisecond)},
	}
	if mw, n := pm.MeanIn(spans); mw != 40000 || n != 8 {
		t.Errorf("in batches: %.0f mW over %d readings, want 40000 over 8", mw, n)
	}
	if mw, n := pm.Mean(t0, t0.Add(2*time.Second)); n != 20 || mw >= 40000 {
		t.Errorf("whole window: %.0f mW over %d readings", mw, n)
	}
	if _, n := pm.MeanIn(nil); n != 0 {
		t.Errorf("no spans: %d readings", n)
	}
}

func TestCombineRepeats(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Batches 9, 11 ms and 13, 15 ms; power readings 1000 mW once, 2000 mW three times.
	reps := []store.Profile{
		{Samples: 2, TimeMS: store.TimeStats{Mean: 10, P50: 9, P95: 11, Stddev: math.Sqrt2}, PowerMW: store.PowerStats{Mean: 1000}, PowerSamples: 1, StartedAt: t0, FinishedAt: t0.Add(time.Second)},
		{Samples: 2, TimeMS: store.TimeStats{Mean: 14, P50: 13, P95: 15, Stddev: math.Sqrt2}, PowerMW: store.PowerStats{Mean: 2000}, PowerSamples: 3, StartedAt: t0.Add(2 * time.Second), FinishedAt: t0.Add(3 * time.Second)},
	}
	got := combineRepeats(reps)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if got.Samples != 4 || got.PowerSamples != 4 || !near(got.TimeMS.Mean, 12) || !near(got.TimeMS.Stddev, math.Sqrt(20.0/3)) ||
		!near(got.PowerMW.Mean, 1750) || !near(got.TimeMS.P50, 11) || !near(got.TimeMS.P95, 13) ||
		!got.StartedAt.Equal(t0) || !got.FinishedAt.Equal(t0.Add(3*time.Second)) || !near(got.RSE, math.Sqrt(20.0/3)/2/12) {
		t.Fatalf("combined %+v", got)
	}
}
