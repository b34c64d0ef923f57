package control

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// KindSearch: a search the controller started on its own after a hold — while training
// is paused because no known configuration meets the budgets, or after a search failed
// (docs/controller.md "When nothing is feasible"). The reason says which, and how long
// the next hold is.
const KindSearch Kind = "search"

// researchState is the back-off of the controller's own re-searches (issue 31). A paused
// controller trains nothing, so profiling there costs no training; a search that failed
// left the controller without what it searched for. Either way the only way out used to
// be the operator. The store answers every mode profiled before (and every mode recorded
// over the power budget), so a re-search spends its profile budget on modes not yet
// measured.
type researchState struct {
	since  time.Time // when the present hold began (zero: none running)
	n      int       // re-searches since the budgets, the rates or feasibility last changed
	key    string    // the budgets the re-searches are counted for (researchKey)
	rate   float64   // and the planned rate (researchRate)
	failed string    // the last search's error; "" when it succeeded
	// moved: the budgets or the rate changed since the last re-search (not the first
	// budgets set). A pause that follows is the change's, not a plan failing to hold,
	// and what is stored was measured for other budgets: the first re-search after it
	// starts without the hold.
	moved bool
}

// researchHold is the hold before re-search n+1: ResearchHold doubled n times, at most
// ResearchBackoffMax times ResearchHold.
func (c *Controller) researchHold() time.Duration {
	if c.research.moved && c.research.n == 0 {
		return 0
	}
	return c.backedOff(c.cfg.ResearchHold, c.research.n)
}

// backedOff is base doubled n times, at most to the power of two at or below
// ResearchBackoffMax times it (16 → 16×): the re-search hold and the latency rule's pause.
func (c *Controller) backedOff(base time.Duration, n int) time.Duration {
	capShift := bits.Len(uint(c.cfg.ResearchBackoffMax)) - 1 // 16 → 4
	return base << min(n, max(capShift, 0))
}

// researchKey is what resets the back-off when it changes: the budgets and, with several
// streams, each stream's own budgets. A rate change resets it too (researchRateMoved).
func (c *Controller) researchKey() string {
	key, _ := json.Marshal(c.targets) // map keys sorted: the same targets, the same key
	return string(key)
}

// researchRate is the planned arrival rate (summed over the streams with several): a
// re-plan after a search takes the meter's rate of the moment, so only a change the drift
// rule would call one (rateDrifted) resets the back-off.
func (c *Controller) researchRate() float64 {
	sum := 0.0
	for _, m := range c.meters {
		sum += m.planned
	}
	return sum
}

// searchFailed records how the last search ended for the retry: err nil clears it; an
// error that only says the daemon or the operator's request ended is not retried.
// Called with c.mu held.
func (c *Controller) searchFailed(err error) {
	switch {
	case err == nil:
		c.research.failed = ""
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || c.base.Err() != nil:
	default:
		c.research.failed = err.Error()
	}
}

// maybeResearch starts a search of the configured searcher when one is due: training has
// stayed paused by an infeasible plan, or the last search failed and left no plan that
// meets the budgets, for the hold
// (researchHold). It reports whether it started one. A feasible plan, a budget change or
// a rate change resets the back-off. Called with c.mu held from Step, after the degraded,
// external-change and refused-write checks and before the step rules; a broken budget
// is left to those rules.
func (c *Controller) maybeResearch(snap sched.Snapshot, now time.Time) bool {
	rate := c.researchRate()
	if key := c.researchKey(); key != c.research.key || rateDrifted(rate, c.research.rate, c.cfg.DriftRel, c.cfg.RateTau, false) {
		c.research.moved = c.research.key != "" && (key != c.research.key || c.research.rate > 0)
		c.research.key, c.research.rate, c.research.n = key, rate, 0
	}
	why, method := "", c.cfg.Searcher
	switch {
	case c.cfg.ResearchOff || c.board == nil || c.pair == nil || c.held || c.job || c.needPlan != "":
	case c.research.failed != "" && c.cur != nil && c.cur.Predicted.Feasible:
		// The failed search left a plan that meets the budgets in force (planned from
		// what was stored): nothing to retry for. Measured: retrying ALS there paused
		// training for its whole campaign (docs/benchmarks.md).
		c.research.failed = ""
	case c.research.failed != "":
		why = "the last search failed (" + c.research.failed + ")"
	case c.cur != nil && !c.cur.Predicted.Feasible && snap.TrainingPaused:
		why = fmt.Sprintf("training is paused: no known configuration meets the budgets (%s binds)", cmp.Or(c.cur.Predicted.Binding, "a budget"))
		if c.cfg.Searcher == "als" && !c.cfg.ResearchPausedALS {
			// ALS's campaign samples the whole space again (saturating modes included:
			// docs/benchmarks.md); GMD descends from what is stored, the Pareto set's
			// modes among it, toward the budgets in force.
			method = "gmd"
		}
	}
	if c.cur != nil && c.cur.Predicted.Feasible {
		c.research.n = 0
		if c.needPlan == "" { // not the plan of the old budgets, still in force until the re-plan
			c.research.moved = false
		}
	}
	if why == "" {
		c.research.since = time.Time{}
		return false
	}
	if _, over := c.powerOver(now); over || (c.latCount >= c.cfg.MinLatency && c.measured.LatencyP99MS > c.targets.LatencyMS) {
		return false // the step rules act first
	}
	if len(c.blocked()) > 0 {
		return false // no profile batches to search with (decline.go reports it)
	}
	hold := c.researchHold()
	if c.research.since.IsZero() {
		c.research.since = now
		return false
	}
	if now.Sub(c.research.since) < hold {
		return false
	}
	c.research.since = time.Time{}
	c.research.n++
	c.research.moved = false
	c.research.failed = ""
	stored := 0
	if ps, err := c.plannedProfiles(); err == nil {
		stored = len(ps)
	}
	held := "for " + hold.String()
	if hold == 0 {
		held = "since the budgets or the rate changed (no hold: what is stored was measured for others)"
	}
	reason := fmt.Sprintf("re-search %d: %s %s; %s searches again from the %d complete profiles stored (they and the modes recorded over the power budget answer from the store, so it measures modes not profiled yet); the next re-search waits %s unless a plan is feasible or a budget or rate changes",
		c.research.n, why, held, method, stored, c.researchHold())
	c.events.Add(Event{Kind: KindSearch, Reason: reason})
	c.log.Info("re-searching", "n", c.research.n, "why", why, "hold", hold)
	c.startSearch(c.base, method, reason, 0)
	return true
}
