package lifetime

import (
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/internal/vclock"
)

// TestRecentAfterPlanRule: after the first plan the harness keeps the scheduler's
// recent-window rule (p99 of the requests released within the window, at least the
// controller's minimum count of them, over the budget) and only leaves out the requests
// that arrived before the plan: late ones of the plan's own still break it.
func TestRecentAfterPlanRule(t *testing.T) {
	const budgetMS, minCount = 50.0, 20
	span := 5 * time.Second
	plan := vclock.Epoch.Add(100 * time.Second)
	at := func(s float64) time.Time { return vclock.Epoch.Add(time.Duration(s * float64(time.Second))) }
	// served adds n requests released at end, each arrived latMS before it.
	served := func(wk *worker, end time.Time, n int, latMS float64) {
		for range n {
			wk.latMS = append(wk.latMS, latMS)
			wk.latAt = append(wk.latAt, end.Add(-time.Duration(latMS*float64(time.Millisecond))))
			wk.latEnd = append(wk.latEnd, end)
		}
	}
	for _, c := range []struct {
		name   string
		fill   func(*worker)
		now    time.Time
		broken bool
	}{
		{"the search's late requests released after the plan", func(wk *worker) {
			served(wk, at(100.05), 10, 180) // arrived 99.87 s: a profile turn's queue
			served(wk, at(101), 60, 20)
		}, at(103), false},
		{"the plan's own late requests", func(wk *worker) {
			served(wk, at(100.05), 10, 180)
			served(wk, at(101), 60, 20)
			served(wk, at(102), 3, 55)
		}, at(103), true},
		{"fewer than the minimum count after the plan", func(wk *worker) {
			served(wk, at(101), minCount-1, 80)
		}, at(103), false},
		{"late requests older than the window", func(wk *worker) {
			served(wk, at(101), 10, 80)
			served(wk, at(107), 60, 20)
		}, at(107), false},
		{"late requests just within the window", func(wk *worker) {
			served(wk, at(102), 10, 80)
			served(wk, at(107), 60, 20)
		}, at(107), true},
	} {
		wk := &worker{}
		c.fill(wk)
		if got := wk.recentAfterPlanBroken(c.now, span, plan, minCount, budgetMS); got != c.broken {
			t.Errorf("%s: broken %v, want %v", c.name, got, c.broken)
		}
	}
}

// spreadOf: mean, population standard deviation, nearest-rank 99.5th percentile and
// maximum of the 1 s averages (Result.PowerOneSecond).
func TestSpreadOf(t *testing.T) {
	xs := make([]float64, 1000)
	for i := range xs {
		xs[i] = float64(1000 + i%2*2) // 1000, 1002, … : mean 1001, sd 1
	}
	xs[17] = 5000 // one second far over
	s := spreadOf(xs)
	if s.MaxMW != 5000 || s.P995MW != 1002 || s.MeanMW <= 1001 || s.StdDevMW <= 1 {
		t.Fatalf("spread %+v", s)
	}
	if s := spreadOf(nil); s != (Spread{}) {
		t.Fatalf("no readings: %+v", s)
	}
}
