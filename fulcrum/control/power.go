package control

import (
	"context"
	"sync"
	"time"
)

// PowerMonitor keeps recent board power readings for moving averages. The controller
// samples the board every Config.PowerSample and reads 1 s averages from here; the live
// profiler reads the mean over each profiled point from the same readings.
type PowerMonitor struct {
	mu       sync.Mutex
	at       []time.Time
	mw       []float64
	keep     time.Duration
	lastOK   time.Time
	lastErr  error
	failures int // consecutive failed reads
}

// NewPowerMonitor keeps readings for keep (at least 10 s, so a profiled point's mean can
// be taken after it ends).
func NewPowerMonitor(keep time.Duration) *PowerMonitor {
	return &PowerMonitor{keep: max(keep, 10*time.Second)}
}

// Sample reads board power once and records it (or the failure).
func (p *PowerMonitor) Sample(ctx context.Context, b Board, now time.Time) error {
	r, err := b.Power(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.lastErr = err
		p.failures++
		return err
	}
	p.failures = 0
	p.lastOK = now
	p.at = append(p.at, now)
	p.mw = append(p.mw, r.TotalMW)
	cut := now.Add(-p.keep)
	i := 0
	for i < len(p.at) && p.at[i].Before(cut) {
		i++
	}
	if i > 0 {
		p.at = append(p.at[:0], p.at[i:]...)
		p.mw = append(p.mw[:0], p.mw[i:]...)
	}
	return nil
}

// Mean is the mean of the readings taken in [from, to] and how many there were.
func (p *PowerMonitor) Mean(from, to time.Time) (float64, int) {
	return p.MeanIn([]Interval{{From: from, To: to}})
}

// Interval is a span of time [From, To].
type Interval struct{ From, To time.Time }

// MeanIn is the mean of the readings taken within any of the intervals, and how many
// there were.
func (p *PowerMonitor) MeanIn(spans []Interval) (float64, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, n := 0.0, 0
	for i, at := range p.at {
		for _, iv := range spans {
			if !at.Before(iv.From) && !at.After(iv.To) {
				s += p.mw[i]
				n++
				break
			}
		}
	}
	if n == 0 {
		return 0, 0
	}
	return s / float64(n), n
}

// Average is the moving average over the window ending at now.
func (p *PowerMonitor) Average(now time.Time, window time.Duration) (float64, int) {
	return p.Mean(now.Add(-window), now)
}

// Health reports when power was last read successfully, how many reads in a row have
// failed since, and the last error.
func (p *PowerMonitor) Health() (lastOK time.Time, failures int, lastErr error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastOK, p.failures, p.lastErr
}
