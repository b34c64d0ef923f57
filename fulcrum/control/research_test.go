package control

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// runFor steps the controller every period for d of fake time, letting each search it
// starts finish (on the real clock) before time moves on.
func runFor(t *testing.T, e *env, c *Controller, d time.Duration) {
	t.Helper()
	for end := e.clock.Now().Add(d); e.clock.Now().Before(end); {
		e.clock.Advance(250 * time.Millisecond)
		_ = c.SamplePower(context.Background())
		c.Step(context.Background())
		for deadline := time.Now().Add(30 * time.Second); c.Searching() != ""; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("a search did not end in 30 s")
			}
		}
	}
}

// TestFailedSearchIsRetried: a search that fails (here: the board refuses every mode
// change, so the first mode cannot be applied) left the controller with nothing to plan
// from and nothing that would ever search again (issue 28's note). Now it searches again
// after a hold, each re-search saying why, the holds doubling (50 s, 100 s, … capped at
// 16×): a few retries in half an hour, not one every control period.
func TestFailedSearchIsRetried(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	c := e.controller(Config{}, plan.Targets{LatencyMS: 400, PowerMW: 35000, RateRPS: 20})
	e.board.set(20000, nil)
	e.board.applyErr = errors.New("write /sys/.../cur_freq: permission denied")
	e.register(nil)
	start := e.clock.Now()
	runFor(t, e, c, 30*time.Minute)
	evs := c.Events().List(0)
	failed, starts := 0, 0
	var at []time.Duration
	for _, ev := range evs {
		switch {
		case ev.Kind == KindProfile && strings.HasPrefix(ev.Reason, "starting gmd"):
			starts++
		case ev.Kind == KindProfile && strings.HasPrefix(ev.Reason, "gmd search failed"):
			failed++
		case ev.Kind == KindSearch:
			at = append(at, ev.Time.Sub(start))
			if !strings.Contains(ev.Reason, "the last search failed") || !strings.Contains(ev.Reason, "permission denied") {
				t.Errorf("re-search event does not say the last search failed and why: %q", ev.Reason)
			}
		}
	}
	t.Logf("%d searches started, %d failed, re-searches at %v", starts, failed, at)
	if failed == 0 {
		t.Fatalf("no search failed: %v", kinds(evs))
	}
	if len(at) < 3 {
		t.Fatalf("%d re-searches in 30 minutes after a failed search: want it retried", len(at))
	}
	// 50 + 100 + 200 + 400 + 800 s: at most five in 30 minutes.
	if len(at) > 5 || starts != len(at)+1 || failed != starts {
		t.Fatalf("%d re-searches, %d searches started in 30 minutes: the back-off does not hold", len(at), starts)
	}
	for i := 1; i < len(at); i++ {
		if gap, prev := at[i]-at[i-1], at[i-1]; gap < 100*time.Second<<(i-1) && gap < 800*time.Second {
			t.Errorf("re-search %d came %s after the one at %s: want the hold doubled", i+1, gap, prev)
		}
	}
}

// TestResearchOff: research_off keeps today's behaviour — a failed search is not
// searched again.
func TestResearchOff(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	c := e.controller(Config{ResearchOff: true}, plan.Targets{LatencyMS: 400, PowerMW: 35000, RateRPS: 20})
	e.board.set(20000, nil)
	e.board.applyErr = errors.New("permission denied")
	e.register(nil)
	runFor(t, e, c, 10*time.Minute)
	if n := countKind(c.Events().List(0), KindSearch); n != 0 {
		t.Fatalf("%d re-searches with research_off", n)
	}
}

// TestPausedALSNotSearchedAgainByDefault: with ALS, training paused by an infeasible plan
// is not searched again unless research_paused_als is set (its campaign re-samples modes
// where inference saturates); GMD would be (TestPausedTrainingSearchesAgain,
// fulcrum/lifetime).
func TestPausedALSNotSearchedAgainByDefault(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	// 1 ms p99 with training running is impossible on any stored mode.
	c := e.controller(Config{Searcher: "als"}, plan.Targets{LatencyMS: 1, PowerMW: 35000, RateRPS: 20})
	e.board.set(20000, nil)
	e.register(nil)
	runFor(t, e, c, 5*time.Minute)
	if !e.sched.Snapshot().TrainingPaused {
		t.Fatal("training runs although no configuration meets the budgets")
	}
	if n := countKind(c.Events().List(0), KindSearch); n != 0 {
		t.Fatalf("%d re-searches of ALS while paused without research_paused_als", n)
	}
}

// TestFailedSearchNotRetriedUnderAFeasiblePlan: a search that fails while a plan meeting
// the budgets is in force (an operator's optimize, here refused by the board) is not
// searched again: the controller goes back to the plan, and training keeps running.
func TestFailedSearchNotRetriedUnderAFeasiblePlan(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	c := e.controller(Config{}, plan.Targets{LatencyMS: 400, PowerMW: 35000, RateRPS: 20})
	e.board.set(20000, nil)
	e.register(nil)
	runFor(t, e, c, time.Second)
	if st := c.Status(); st.Current == nil || !st.Current.Predicted.Feasible {
		t.Fatalf("plan %+v: want a feasible plan from the stored profiles", st.Current)
	}
	e.board.mu.Lock()
	e.board.applyErr = errors.New("permission denied")
	e.board.mu.Unlock()
	if _, err := c.Optimize(context.Background(), "gmd", 0); err == nil {
		t.Fatal("optimize succeeded on a board that refuses every mode change")
	}
	e.board.mu.Lock()
	e.board.applyErr = nil
	e.board.mu.Unlock()
	runFor(t, e, c, 10*time.Minute)
	if n := countKind(c.Events().List(0), KindSearch); n != 0 {
		t.Fatalf("%d re-searches after a failed optimize under a feasible plan", n)
	}
	if e.sched.Snapshot().TrainingPaused {
		t.Fatal("training paused under a feasible plan")
	}
}
