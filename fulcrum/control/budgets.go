package control

import (
	"errors"
	"fmt"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
)

// reasonBudgets is the re-plan reason after a budget change.
const reasonBudgets = "budgets changed"

// Targets returns the operator's targets in force: the shared ones and every
// workload's own (a copy).
func (c *Controller) Targets() plan.Targets {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.targets.Clone()
}

// SetTargets validates and installs the shared targets of t (latency, rate, power,
// quantile, ρ cap); the next step re-plans from stored profiles. Each workload's own
// targets are SetStreamTarget's: t.Streams must be empty. Invalid targets change nothing.
func (c *Controller) SetTargets(t plan.Targets) error { return c.SetTargetsBy(t, nil) }

// SetTargetsBy is SetTargets on behalf of an API caller (recorded in the event).
func (c *Controller) SetTargetsBy(t plan.Targets, by *Caller) error {
	if len(t.Streams) > 0 {
		return errors.New("budgets not changed: a workload's own budgets are set one at a time (fulcrumctl budget set --workload NAME)")
	}
	t = t.WithDefaults()
	if err := t.Validate(); err != nil {
		return fmt.Errorf("budgets not changed: %w", err)
	}
	c.mu.Lock()
	old := c.targets.Shared()
	t.Streams = c.targets.Streams
	c.targets = t
	c.badPoint = nil // every stream's: the pair's rule 4 forgot its points on a budget change
	c.held = false
	if c.cur != nil || c.pair != nil {
		c.needPlan = reasonBudgets
	}
	c.takeBack(c.base, "budgets changed", by) // a stand-down ends: the new budgets are enforced
	c.mu.Unlock()
	c.sharedDeadline(t)
	if !old.WithDefaults().Equal(t.Shared()) {
		// The same budgets again still re-plan and end a stand-down, but "changed from X
		// to X" would only fill the log.
		c.events.Add(Event{Kind: KindBudget, Reason: fmt.Sprintf("budgets changed from %s to %s", old, t.Shared()), Caller: by})
	}
	c.persistSettings() // kept across a restart (settings.go)
	return nil
}

// The scheduler's deadlines and training shares come from the controller's targets
// only (docs/design.md §3): sharedDeadline gives it the shared latency budget,
// streamDeadlines every workload's own latency budget and training weight.
func (c *Controller) sharedDeadline(t plan.Targets) { c.sched.SetLatencyBudget(msDur(t.LatencyMS)) }

func (c *Controller) streamDeadlines(t plan.Targets) error {
	lat := map[string]time.Duration{}
	for w, l := range t.StreamLatenciesMS() {
		lat[w] = msDur(l)
	}
	return errors.Join(c.sched.SetStreamLatencyBudgets(lat), c.sched.SetTrainWeights(t.TrainWeights()))
}

// setDeadlines gives the scheduler every deadline and weight of t.
func (c *Controller) setDeadlines(t plan.Targets) error {
	c.sharedDeadline(t)
	if len(t.Streams) == 0 {
		return nil
	}
	return c.streamDeadlines(t)
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
