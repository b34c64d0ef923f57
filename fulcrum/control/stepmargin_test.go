package control

import (
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// budgetMW is the power budget of planAt1020's controller.
const budgetMW = 35000

// planAt1020 is a controller with the step margins given over three stored modes (GPU
// 408, 918 and 1020 MHz), 200 ms and 35 W budgets, planned at GPU 1020 MHz (its plan).
func planAt1020(t *testing.T, stepMargin, stepMarginMin float64) (*env, *Controller, *Choice) {
	t.Helper()
	e := newEnv(t, sched.NewFakeClock())
	e.modes = []powermode.Mode{e.modes[0], e.modes[3], e.modes[4]} // GPU 408, 918, 1020 MHz
	e.seed()
	c := e.controller(Config{StepMargin: stepMargin, StepMarginMin: stepMarginMin, Cooldown: 500 * time.Millisecond},
		plan.Targets{LatencyMS: 200, PowerMW: budgetMW, RateRPS: 20})
	e.register(nil)
	e.board.set(20000, nil)
	e.tick(c, 100*time.Millisecond)
	planned := c.Status().Current
	if planned == nil || planned.Mode != e.modes[2] {
		t.Fatalf("step margins %g, %g: want the plan at GPU 1020 MHz: %+v", stepMargin, stepMarginMin, planned)
	}
	return e, c, planned
}

// overBudgetStep runs planAt1020's controller 1.5 s with the board drawing 7 % over the
// budget and returns the last step_down after event seq (nil: none) and the
// configuration in force then.
func overBudgetStep(e *env, c *Controller, seq uint64) (*Event, *Choice) {
	e.board.set(budgetMW*1.07, nil)
	e.tick(c, 1500*time.Millisecond)
	var step *Event
	for _, ev := range c.Events().List(seq) {
		if ev.Kind == KindStepDown {
			step = &ev
		}
	}
	return step, c.Status().Current
}

// TestPowerStepNearerTheBudgetBeforePausing: the board draws 7 % over the power budget
// at the plan's GPU 1020 MHz; scaled by what the board draws, nothing that keeps the
// 200 ms latency budget is predicted under budget·(1−step_margin), but GPU 918 MHz is
// under budget·(1−step_margin_min). The step goes there, training on; with the fallback
// off (step_margin_min = step_margin) it goes to the lowest-power configuration, GPU 408
// MHz, whose latency breaks the budget, so training pauses. Traced before: the Orin NX at
// 10 W, 30 req/s, 75 ms, paused training 3,576 s of an hour this way.
func TestPowerStepNearerTheBudgetBeforePausing(t *testing.T) {
	for _, least := range []float64{0.02, 0.08} {
		e, c, _ := planAt1020(t, 0.08, least)
		seq := c.Status().LastEvent
		step, down := overBudgetStep(e, c, seq)
		if step == nil || down == nil {
			t.Fatalf("step_margin_min %g: no step down: %v", least, kinds(c.Events().List(seq)))
		}
		t.Logf("step_margin_min %g: %s", least, step.Reason)
		if least < 0.08 {
			if down.Mode != e.modes[1] || !down.Predicted.Feasible || !strings.Contains(step.Reason, "nearer target") {
				t.Fatalf("stepped to %s (feasible %v): want GPU 918 MHz with training, within the nearer target", down.Mode.Human(), down.Predicted.Feasible)
			}
			continue
		}
		if down.Mode != e.modes[0] || down.Predicted.Feasible || !strings.Contains(step.Reason, "lowest-power") {
			t.Fatalf("without the fallback: stepped to %s (feasible %v), want the lowest-power GPU 408 MHz", down.Mode.Human(), down.Predicted.Feasible)
		}
	}
}

// TestStepMarginMinDefaultsAndBounds: unset, step_margin_min is 5 % — or step_margin
// where that is smaller (no fallback, not an error: a config written before the key
// keeps validating); set above step_margin it is refused with what to do.
func TestStepMarginMinDefaultsAndBounds(t *testing.T) {
	if got := (Config{}).withDefaults().StepMarginMin; got != 0.05 {
		t.Fatalf("default step_margin_min %g, want 0.05", got)
	}
	c := DefaultConfig()
	c.StepMargin, c.StepMarginMin = 0.03, 0 // as a file that sets step_margin alone
	c = c.withDefaults()
	// (Validate here covers the fields this package defaults; the daemon fills the rest.)
	if err := c.Validate(); c.StepMarginMin != 0.03 || err != nil && strings.Contains(err.Error(), "StepMargin") {
		t.Fatalf("step_margin 0.03 alone: step_margin_min %g, validate %v; want 0.03 and no complaint about it", c.StepMarginMin, err)
	}
	c.StepMarginMin = 0.04
	err := c.withDefaults().Validate()
	if err == nil || !strings.Contains(err.Error(), "StepMarginMin") || !strings.Contains(err.Error(), "step_margin") {
		t.Fatalf("step_margin_min over step_margin: %v, want a refusal naming both", err)
	}
}

// TestPowerStepLearnsTheMeanDrawNotTheSpike: the board draws the plan's prediction for
// ten seconds, then one second 7 % over the budget. Rule 2 fires on that second, and the
// correction it learns and scales every candidate by is the mean draw at the mode since
// it settled, not the second that broke the budget (the highest of those seen, which
// overshoots: traced on the Orin NX at 10 W, 1.07× learned where the mode drew 1.04×).
// With targets of 29.75 W and 30.8 W (step margins 15 % and 12 %) the step goes to GPU
// 918 MHz with training (predicted 27.3 W, ×1.01); learned from the spike (×1.14: 31.2 W)
// nothing with training was under either and it went to GPU 408 MHz. With a 32.2 W
// target (8 %) the configuration in force (30.9 W, ×1.01) is within it too: the step
// still goes below what broke the budget.
func TestPowerStepLearnsTheMeanDrawNotTheSpike(t *testing.T) {
	for _, margins := range [][2]float64{{0.15, 0.12}, {0.08, 0.02}} {
		e, c, planned := planAt1020(t, margins[0], margins[1])
		e.board.set(planned.Predicted.PowerMW, nil)
		e.tick(c, 10*time.Second)
		seq := c.Status().LastEvent
		step, down := overBudgetStep(e, c, seq)
		if step == nil || down == nil {
			t.Fatalf("margins %v: no step down: %v", margins, kinds(c.Events().List(seq)))
		}
		t.Logf("margins %v: %s; predicted %.0f mW there, %.0f mW at the plan", margins, step.Reason, down.Predicted.PowerMW, planned.Predicted.PowerMW)
		if down.Mode != e.modes[1] || !down.Predicted.Feasible {
			t.Fatalf("margins %v: stepped to %s (feasible %v): want GPU 918 MHz with training", margins, down.Mode.Human(), down.Predicted.Feasible)
		}
	}
}
