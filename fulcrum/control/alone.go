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
// the streams best with no training turn (plan.MultiModel.ServeAlone) instead; and the
// latency rule, while they are served alone and nothing with training is predicted
// within, steps to another configuration alone. (The power rule keeps its lowest-power
// step: serving alone there held training paused where that step let the latency rule
// find a configuration that trains within both budgets, TestPausedTrainingSearchesAgain.)

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

// bestAlone is the configuration of ps that serves the streams best alone (AloneBetter)
// among those keep accepts (nil: all).
func bestAlone(mod *plan.MultiModel, ps []plan.MultiProfile, keep func(plan.MultiEval) bool) (plan.MultiEval, bool) {
	var best plan.MultiEval
	found := false
	for _, p := range ps {
		// Every batch vector at the mode, not only its best alone: keep may refuse that one.
		_ = mod.EachBatchVector(p, func(batches []int) {
			e, err := mod.EvaluateAlone(p, batches)
			if err == nil && (keep == nil || keep(e)) && (!found || mod.AloneBetter(e, best)) {
				best, found = e, true
			}
		})
	}
	return best, found
}

// aloneChoice is e, a configuration scored alone, as the Choice of a paused plan: no
// training throughput, not feasible, binding on what kept training out.
func (c *Controller) aloneChoice(e plan.MultiEval, mb plan.MultiBudgets, binding string) Choice {
	ch := c.choiceOf(e, mb)
	ch.Predicted.ThroughputSPS = 0
	ch.Predicted.Feasible, ch.Predicted.Binding = false, binding
	return ch
}

// aloneWords describe e, scored alone, in an event.
func aloneWords(e plan.MultiEval, mb plan.MultiBudgets) string {
	st := make([]string, 0, len(e.Streams))
	for i, s := range e.Streams {
		st = append(st, fmt.Sprintf("%s batch %d, p99 %.1f ms against %.0f ms", s.Name, s.Batch, s.LatencyMS, mb.Streams[i].LatencyMS))
	}
	how := "within every budget"
	if !e.Feasible {
		how = "the least over a budget"
	}
	return fmt.Sprintf("mode %s, %s, at most %.1f W (%s with training paused)", e.Mode.Human(), strings.Join(st, ", "), e.PowerMW/1000, how)
}

// servingAlone is the configuration to run instead of ch, a decision's answer that meets
// the budgets only without training, with the words for its event: when ch's
// configuration, served alone, is still predicted over a budget, the stored configuration
// that serves the streams best alone. ok is false when ch stands (feasible, predicted
// within every budget alone, switched off, nothing stored scores, or nothing better).
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
	best, found := bestAlone(mod, ps, nil)
	batches := choiceBatches(ch)
	var at plan.MultiEval
	atFound := false
	if i := slices.IndexFunc(ps, func(p plan.MultiProfile) bool { return p.Mode == ch.Mode }); i >= 0 {
		e, err := mod.EvaluateAlone(ps[i], batches)
		at, atFound = e, err == nil
	}
	if !found || (atFound && (at.Feasible || !mod.AloneBetter(best, at))) {
		return ch, "", false
	}
	out := c.aloneChoice(best, mb, ch.Predicted.Binding)
	if best.Mode == ch.Mode && sameBatches(ch.Streams, out.Streams) {
		return ch, "", false
	}
	was := "has no profile to judge it by"
	if atFound {
		w := slices.MaxFunc(at.Streams, func(a, b plan.StreamEval) int { return cmp.Compare(a.LatencyMS, b.LatencyMS) })
		was = fmt.Sprintf("would break a budget even with training paused (p99 %.1f ms, %.1f W)", w.LatencyMS, at.PowerMW/1000)
	}
	return out, fmt.Sprintf("that configuration %s, so the streams are served at the stored configuration that serves them best alone: %s", was, aloneWords(best, mb)), true
}

// servedAlone says the configuration in force is a paused plan's: nothing claimed and
// training paused for it (not by the latency rule's last resort, not waiting on a
// micro-batch fit). Called with c.mu held.
func (c *Controller) servedAlone() bool {
	return c.cur != nil && !c.cur.Predicted.Feasible && !c.microKeep && !c.latPause.active && c.sched.Snapshot().TrainingPaused
}

// stepDownAlone is the latency rule while the streams are served alone (servedAlone): a
// step to a configuration with a shorter training turn would resume training where
// nothing meets the budgets with it, so the rule steps to another configuration served
// alone — the one that serves the streams best among those within the power budget
// (less the step margin) whose every stream's latency, scaled by this step's ratio
// (ratio), is within budget·(1−PlanMargin); else the fastest alone. what words the
// broken streams. It reports whether it stepped. Called with c.mu held.
func (c *Controller) stepDownAlone(ctx context.Context, what string, ratio func(string) float64) bool {
	mod, ps, mb, ok := c.aloneSpace()
	if !ok {
		return false
	}
	cur := *c.cur
	names := c.plannedStreams()
	worst := func(e plan.MultiEval) float64 {
		w := 0.0
		for i, st := range e.Streams {
			w = max(w, st.LatencyMS*ratio(names[i])/mb.Streams[i].LatencyMS)
		}
		return w
	}
	var fastest plan.MultiEval
	haveFastest := false
	power := c.targets.PowerMW
	best, found := bestAlone(mod, ps, func(e plan.MultiEval) bool {
		if e.Mode == cur.Mode && slices.Equal(e.Batches(), choiceBatches(cur)) {
			return false
		}
		if e.Rho > mb.RhoMax || (power > 0 && e.PowerMW > power*(1-c.cfg.StepMargin)) {
			return false
		}
		if w := worst(e); !haveFastest || w < worst(fastest) {
			fastest, haveFastest = e, true
		}
		return worst(e) <= 1-c.cfg.PlanMargin
	})
	how := "the configuration that serves them best alone predicted within the budget at this step's ratio"
	if !found {
		best, found = fastest, haveFastest
		how = "none is predicted within the budget at this step's ratio: the fastest alone"
	}
	if !found {
		return false
	}
	c.noteStep(stepCause{latency: true})
	c.belowSince = time.Time{}
	reason := fmt.Sprintf("%s%s while the streams are served alone (training waits: nothing meets the budgets with it); stepping to %s: %s",
		what, c.heatNote(), how, aloneWords(best, mb))
	c.applyDecision(ctx, KindStepDown, reason, c.aloneChoice(best, mb, cur.Predicted.Binding))
	return true
}

// choiceBatches is every stream's batch of ch, in order.
func choiceBatches(ch Choice) []int {
	out := make([]int, len(ch.Streams))
	for i, s := range ch.Streams {
		out[i] = s.Batch
	}
	return out
}
