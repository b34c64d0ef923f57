package control

import (
	"context"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
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
