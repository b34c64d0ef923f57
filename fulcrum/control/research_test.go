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

// stepToResearch steps the controller every period for at most d of fake time without
// waiting for searches (a search on the fake clock does not end unless time moves), and
// returns the first re-search event and the event after it (the search it started), or
// nil. The started search is left parked on the fake clock.
func stepToResearch(e *env, c *Controller, d time.Duration) (re, next *Event) {
	for end := e.clock.Now().Add(d); e.clock.Now().Before(end); {
		e.clock.Advance(250 * time.Millisecond)
		_ = c.SamplePower(context.Background())
		c.Step(context.Background())
		evs := c.Events().List(0)
		for i := range evs {
			if evs[i].Kind == KindSearch && i+1 < len(evs) {
				return &evs[i], &evs[i+1]
			}
		}
	}
	return nil, nil
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

// TestPausedALSSearchesAgainWithGMD: with ALS, training paused by an infeasible plan is
// searched again with GMD, not ALS's campaign (which re-samples modes where inference
// saturates), unless research_paused_als is set. Before, ALS was not searched again at
// all and a budget change its Pareto set could not meet paused training until the next
// change (docs/benchmarks.md "Budgets changed every hour").
func TestPausedALSSearchesAgainWithGMD(t *testing.T) {
	for _, tc := range []struct {
		pausedALS bool
		want      string
	}{{false, "starting gmd"}, {true, "starting als"}} {
		e := newEnv(t, sched.NewFakeClock())
		e.seed()
		// 1 ms p99 with training running is impossible on any stored mode.
		c := e.controller(Config{Searcher: "als", ResearchPausedALS: tc.pausedALS}, plan.Targets{LatencyMS: 1, PowerMW: 35000, RateRPS: 20})
		e.board.set(20000, nil)
		e.register(nil)
		re, next := stepToResearch(e, c, 2*time.Minute)
		if !e.sched.Snapshot().TrainingPaused {
			t.Fatal("training runs although no configuration meets the budgets")
		}
		if re == nil {
			t.Fatalf("research_paused_als %v: no re-search in 2 min while paused: %v", tc.pausedALS, kinds(c.Events().List(0)))
		}
		if !strings.HasPrefix(next.Reason, tc.want) || !strings.Contains(re.Reason, strings.TrimPrefix(tc.want, "starting ")+" searches again") {
			t.Fatalf("research_paused_als %v: re-search %q followed by %q, want %q", tc.pausedALS, re.Reason, next.Reason, tc.want)
		}
	}
}

// TestBudgetChangeLeavingNothingFeasibleSearchesAtOnce: budgets that nothing stored
// meets, set on a running controller, are searched for at once — what is stored was
// measured for the old budgets, and waiting out the hold only paused training (8 h
// budget tours: 50 s after every such change). A pause that is not a change's waits the
// hold, and the re-search after the first is held as before.
func TestBudgetChangeLeavingNothingFeasibleSearchesAtOnce(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	c := e.controller(Config{}, plan.Targets{LatencyMS: 400, PowerMW: 35000, RateRPS: 20})
	e.board.set(20000, nil)
	e.register(nil)
	runFor(t, e, c, 30*time.Second)
	if st := c.Status(); st.Current == nil || !st.Current.Predicted.Feasible {
		t.Fatalf("plan %+v: want a feasible plan from the stored profiles", st.Current)
	}
	changed := e.clock.Now()
	if err := c.SetTargets(plan.Targets{LatencyMS: 1, PowerMW: 35000, RateRPS: 20}); err != nil {
		t.Fatal(err)
	}
	re, next := stepToResearch(e, c, 3*time.Minute)
	if re == nil {
		t.Fatalf("no re-search in 3 min after budgets nothing stored meets: %v", kinds(c.Events().List(0)))
	}
	if after := re.Time.Sub(changed); after > 5*time.Second || !strings.Contains(re.Reason, "no hold") || !strings.HasPrefix(next.Reason, "starting gmd") {
		t.Fatalf("re-search %s after the budgets changed (%q, then %q): want one within seconds saying it skipped the hold", after, re.Reason, next.Reason)
	}
}

// TestPausedWithoutAChangeWaitsTheHold: a plan that stops meeting the budgets with the
// budgets and rate unchanged (here: the first plan, from what was stored) waits the
// re-search hold (50 s) before searching: the budget-change rule is not every pause's.
func TestPausedWithoutAChangeWaitsTheHold(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	start := e.clock.Now()
	c := e.controller(Config{}, plan.Targets{LatencyMS: 1, PowerMW: 35000, RateRPS: 20})
	e.board.set(20000, nil)
	e.register(nil)
	re, _ := stepToResearch(e, c, 3*time.Minute)
	if re == nil {
		t.Fatalf("no re-search in 3 min while paused: %v", kinds(c.Events().List(0)))
	}
	if after := re.Time.Sub(start); after < 50*time.Second || strings.Contains(re.Reason, "no hold") {
		t.Fatalf("re-search %s after the start (%q): want the 50 s hold", after, re.Reason)
	}
}
