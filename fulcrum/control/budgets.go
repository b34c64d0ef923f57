package control

import (
	"fmt"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/internal/budgettext"
)

// reasonBudgets is the re-plan reason after a budget change.
const reasonBudgets = "budgets changed"

// noPowerMW stands for "no power budget" in model v1 (its largest valid budget).
const noPowerMW = 1e6

// modelBudgets returns model v1's budgets for the operator's targets b (where power 0
// is "none" and rate 0 "measured") at the given rate.
func modelBudgets(b plan.Budgets, rateRPS float64) plan.Budgets {
	p := b.PowerMW
	if p <= 0 {
		p = noPowerMW
	}
	return plan.Budgets{RateRPS: max(rateRPS, 1e-3), LatencyMS: b.LatencyMS, PowerMW: p, Quantile: b.WithDefaults().Quantile, RhoMax: b.WithDefaults().RhoMax}.WithDefaults()
}

// Budgets returns the budgets in force.
func (c *Controller) Budgets() plan.Budgets {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.budgets
}

// SetBudgets validates and installs new budgets; the next step re-plans from stored
// profiles. Invalid budgets change nothing.
func (c *Controller) SetBudgets(b plan.Budgets) error { return c.SetBudgetsBy(b, nil) }

// SetBudgetsBy is SetBudgets on behalf of an API caller (recorded in the event).
func (c *Controller) SetBudgetsBy(b plan.Budgets, by *Caller) error {
	b = b.WithDefaults()
	if err := b.ValidateTargets(); err != nil {
		return fmt.Errorf("budgets not changed: %w", err)
	}
	c.mu.Lock()
	old := c.budgets
	c.budgets = b
	c.badLat = map[cfgKey]bool{}
	c.held = false
	if c.cur != nil || c.pair != nil {
		c.needPlan = reasonBudgets
	}
	c.takeBack(c.base, "budgets changed", by) // a stand-down ends: the new budgets are enforced
	c.mu.Unlock()
	c.sched.SetLatencyBudget(msDur(b.LatencyMS))
	if old.WithDefaults() != b {
		// The same budgets again still re-plan and end a stand-down, but "changed from X
		// to X" would only fill the log.
		c.events.Add(Event{Kind: KindBudget, Reason: fmt.Sprintf("budgets changed from %s to %s", budgetsString(old), budgetsString(b)), Caller: by})
	}
	c.persistSettings() // kept across a restart (settings.go)
	return nil
}

// budgetsString is the operator's targets in an event's words, as fulcrumctl budget get
// prints them (one way to print budgets everywhere).
func budgetsString(b plan.Budgets) string {
	b = b.WithDefaults()
	return "{" + budgettext.Shared(b.LatencyMS, b.Quantile, b.PowerMW, b.RateRPS, b.RateRPS == 0) + "}"
}

// admissionBudgets returns the budgets as the scheduler's admission test sees them: it
// starts a training minibatch only if every request still meets its deadline with each
// expected time raised by DevK deviations (ExpectedDevRel until measured) and its margin
// added. Model v1's latency (fill + training + inference time) has neither, so a plan
// feasible by the model alone can leave training no room to run: in the demo a plan at
// 136 ms of a 142.5 ms planning budget starved training, as the scheduler needed 155 of
// 150 ms. With times raised by g = 1 + DevK·ExpectedDevRel, the latency test
// g·(T_train + T_infer) + fill ≤ L − margin is, to within fill's share, model v1's test
// against (L − margin)/g, which is what is returned. Searches and plans both use it;
// predictions and reports use the exact budgets.
func (c *Controller) admissionBudgets(b plan.Budgets) plan.Budgets {
	return c.Rules().Admission.Budgets(b)
}
