package control

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Serving alone (docs/design.md §2 "Serving alone"): when no known configuration meets
// the budgets with training running, training waits — or, where only latency binds and
// the trainer declared micro-batches, runs in the micro-batch turns the admission room
// holds (micro.go). What runs then is the decision's least-violating configuration *with*
// training, chosen for the training it would do, at a mode where the streams alone may
// still miss a budget. There the controller runs the stored configuration that serves
// the streams best with no training turn (plan.MultiModel.ServeAlone) instead, where one
// keeps every budget; and the latency rule, where training waits already and nothing
// with a shorter training turn is predicted within, steps to it (stepDownAlone). (The
// power rule keeps its lowest-power step: serving alone from it held training paused
// where that step let the latency rule find a configuration that trains within both
// budgets, TestPausedTrainingSearchesAgain.)

// aloneSpace is what serving alone is chosen from: the model at the streams' rates in
// force and the stored profiles under a thermal cap. ok is false when nothing is stored
// or the budgets cannot be modelled (serving alone then offers nothing). Called with c.mu
// held.
func (c *Controller) aloneSpace() (mod *plan.MultiModel, ps []plan.MultiProfile, mb plan.MultiBudgets, ok bool) {
	if c.cfg.ServeAloneOff || c.planned() == nil {
		return nil, nil, mb, false
	}
	ps, err := c.plannedProfiles()
	if err != nil || len(ps) == 0 {
		return nil, nil, mb, false
	}
	ps = underCap(c, ps, func(p plan.MultiProfile) powermode.Mode { return p.Mode })
	rates, _ := c.streamRates(c.clock.Now())
	mb = c.plannedBudgets(rates)
	mod, err = plan.NewMultiModel(mb, c.cfg.InferBatches)
	return mod, ps, mb, err == nil
}

// bestAlone is the configuration of ps that serves the streams best alone (AloneBetter).
func bestAlone(mod *plan.MultiModel, ps []plan.MultiProfile) (plan.MultiEval, bool) {
	var best plan.MultiEval
	found := false
	for _, p := range ps {
		if e, err := mod.ServeAlone(p); err == nil && (!found || mod.AloneBetter(e, best)) {
			best, found = e, true
		}
	}
	return best, found
}

// servingAlone is the configuration to run instead of ch, a decision's answer that meets
// the budgets only without training, with the words for its event: when ch's
// configuration, served alone, is still predicted over a budget, the stored configuration
// that serves the streams best alone, if it keeps every budget. ok is false when ch
// stands (feasible, predicted within every budget alone, switched off, nothing stored
// scores, or nothing keeps every budget alone either).
// The choice keeps ch's binding and stays not feasible: it is a paused plan (re-search,
// near-claim trials, the step rules and the micro-batch keep treat it as one). Called
// with c.mu held.
func (c *Controller) servingAlone(ch Choice) (Choice, string, bool) {
	if ch.Predicted.Feasible {
		return ch, "", false
	}
	mod, ps, mb, ok := c.aloneSpace()
	if !ok {
		return ch, "", false
	}
	best, found := bestAlone(mod, ps)
	batches := choiceBatches(ch)
	var at plan.MultiEval
	atFound := false
	if i := slices.IndexFunc(ps, func(p plan.MultiProfile) bool { return p.Mode == ch.Mode }); i >= 0 {
		e, err := mod.EvaluateAlone(ps[i], batches)
		at, atFound = e, err == nil
	}
	// Only towards a configuration that keeps every budget alone: between two that break
	// one, a switch buys a few predicted ms and moves the paused plan, and with it where
	// re-searches start (NX, 30 req/s, 25 ms, 10 W: a 0.2 ms gain, and a later re-search
	// walked into modes where inference saturates).
	if !found || !best.Feasible || (atFound && at.Feasible) {
		return ch, "", false
	}
	// A paused plan: no training throughput, not claimed, binding on what kept training out.
	out := c.choiceOf(best, mb)
	out.Predicted.ThroughputSPS = 0
	out.Predicted.Feasible, out.Predicted.Binding = false, ch.Predicted.Binding
	was := "has no profile to judge it by"
	if atFound {
		w := slices.MaxFunc(at.Streams, func(a, b plan.StreamEval) int { return cmp.Compare(a.LatencyMS, b.LatencyMS) })
		was = fmt.Sprintf("would break a budget even with training paused (p99 %.1f ms, %.1f W)", w.LatencyMS, at.PowerMW/1000)
	}
	st := make([]string, 0, len(best.Streams))
	for i, x := range best.Streams {
		st = append(st, fmt.Sprintf("%s batch %d, p99 %.1f ms against %.0f ms", x.Name, x.Batch, x.LatencyMS, mb.Streams[i].LatencyMS))
	}
	return out, fmt.Sprintf("that configuration %s, so the streams are served at the stored configuration that serves them best alone: mode %s, %s, at most %.1f W (within every budget with training paused)",
		was, best.Mode.Human(), strings.Join(st, ", "), best.PowerMW/1000), true
}

// choiceBatches is every stream's batch of ch, in order.
func choiceBatches(ch Choice) []int {
	out := make([]int, len(ch.Streams))
	for i, s := range ch.Streams {
		out[i] = s.Batch
	}
	return out
}

// stepDownAlone is the latency rule's step where training waits already (a paused plan,
// the micro-batch keep, the last resort) and no configuration with a shorter training
// turn is predicted within the budget: the rule's pause cannot help, and its fallback —
// the fastest configuration with a shorter turn — may serve the streams slower than what
// runs (NX, 30 req/s, 25 ms, 10 W: it stepped from a p99 of 26 ms to a mode predicted at
// 141 ms, read 55–85 ms, and stayed there the rest of the hour, since nothing shorter
// was left and no re-search starts while a budget is broken). It steps instead to the
// stored configuration that serves the streams best alone within the power budget (less
// the step margin), if that serves them faster than the configuration in force would
// alone, and reports whether it stepped. Called with c.mu held.
func (c *Controller) stepDownAlone(ctx context.Context, what string) bool {
	mod, ps, mb, ok := c.aloneSpace()
	if !ok {
		return false
	}
	cur := *c.cur
	batches := choiceBatches(cur)
	power := c.targets.PowerMW
	var best, now plan.MultiEval
	found, haveNow := false, false
	for _, p := range ps {
		_ = mod.EachBatchVector(p, func(bs []int) {
			e, err := mod.EvaluateAlone(p, bs)
			if err != nil {
				return
			}
			if p.Mode == cur.Mode && slices.Equal(bs, batches) {
				now, haveNow = e, true
				return
			}
			if e.Rho > mb.RhoMax || (power > 0 && e.PowerMW > power*(1-c.cfg.StepMargin)) {
				return
			}
			if !found || mod.AloneBetter(e, best) {
				best, found = e, true
			}
		})
	}
	if !found || (haveNow && mod.WorstLatencyShare(best) >= mod.WorstLatencyShare(now)) {
		return false
	}
	ch := c.choiceOf(best, mb)
	ch.Predicted.ThroughputSPS = 0
	ch.Predicted.Feasible, ch.Predicted.Binding = false, string(plan.ConstraintLatency)
	c.noteStep(stepCause{latency: true})
	c.belowSince = time.Time{}
	st := make([]string, 0, len(best.Streams))
	for i, x := range best.Streams {
		st = append(st, fmt.Sprintf("%s batch %d, p99 %.1f ms against %.0f ms", x.Name, x.Batch, x.LatencyMS, mb.Streams[i].LatencyMS))
	}
	reason := fmt.Sprintf("%s%s, with training waiting and no configuration with a shorter training turn predicted within: the streams are served alone at the stored configuration that serves them best, mode %s, %s, at most %.1f W",
		what, c.heatNote(), best.Mode.Human(), strings.Join(st, ", "), best.PowerMW/1000)
	c.applyDecision(ctx, KindStepDown, reason, ch)
	return true
}
