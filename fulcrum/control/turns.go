package control

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
)

// Trials of other training turns at the confirmed configuration (issue 31,
// docs/controller.md "Live refinement"). A configuration's key is its mode and
// inference batches; its figures are those of its claimed training turns that train most
// (scoreIn). A plan chooses the turns from the profiles before any live evidence, so the
// live evidence can make a larger micro-batch claimable at the very mode in force — and
// no trial ever moved to it, since trials go to other keys: traced on the AGX lifetime
// sweep (30 req/s, 75 ms, 20 W), the plan ran micro-batches of 4 at 117.8 samples/s
// because the stored power of micro-batches of 8 was over the budget; the first live
// windows pooled power ×0.85, after which micro-batches of 8 at the same mode were
// claimed at 132.6 samples/s, and the hour ran at micro-batches of 4 (ratio 0.797).

// microOfChoice is the training turns of a configuration applied: each job's micro-batch size
// (0: whole minibatches), nil when every job runs whole minibatches (as
// plan.MultiEval.MicroBatches).
func microOfChoice(ch Choice) []int {
	var out []int
	for j, t := range ch.Train {
		if t.MicroBatch > 0 && t.MicroBatch < t.Batch {
			if out == nil {
				out = make([]int, len(ch.Train))
			}
			out[j] = t.MicroBatch
		}
	}
	return out
}

// sameTurns reports that two MicroBatches lists name the same training turns (a missing
// entry is a whole minibatch).
func sameTurns(a, b []int) bool {
	for j := range max(len(a), len(b)) {
		var x, y int
		if j < len(a) {
			x = a[j]
		}
		if j < len(b) {
			y = b[j]
		}
		if x != y {
			return false
		}
	}
	return true
}

// turnsKey is the key a failed turns trial is backed off under: the configuration's key
// with its training turns, so that a failure backs off those turns alone.
func turnsKey(k cfgKey, micro []int) cfgKey {
	parts := make([]string, len(micro))
	for j, mb := range micro {
		parts[j] = strconv.Itoa(mb)
	}
	return cfgKey{m: k.m, batches: k.batches + "|turns " + strings.Join(parts, ",")}
}

// turnsWords names training turns in an event's words.
func turnsWords(micro []int) string {
	var parts []string
	for _, mb := range micro {
		if mb > 0 {
			parts = append(parts, fmt.Sprintf("micro-batches of %d", mb))
		} else {
			parts = append(parts, "whole minibatches")
		}
	}
	if len(parts) == 0 {
		return "whole minibatches"
	}
	return strings.Join(parts, ", ")
}

// scoreTurns is key scored by the refinement's decision with the training turns micro
// exactly (scoreKey takes the key's best claimed turns). Called with c.mu held.
func (c *Controller) scoreTurns(key cfgKey, micro []int, rates []float64) (plan.MultiScored, bool) {
	ps, err := c.plannedProfiles()
	if err != nil {
		return plan.MultiScored{}, false
	}
	all, _ := scoresAt(c.refineDecider(rates), ps, key)
	for _, s := range all {
		if keyOfScored(s) == key && sameTurns(s.MicroBatches, micro) {
			return s, true
		}
	}
	return plan.MultiScored{}, false
}

// tryTurns starts a trial of the confirmed key's best claimed training turns (cs) where
// the configuration in force runs other turns (cur, scoreTurns of them) and those train
// TrialGain more, as a trial of another key would start (bounded exposure, back at once
// if a budget breaks, backed off after a failure). It reports whether it started one.
// Called with c.mu held.
func (c *Controller) tryTurns(ctx context.Context, key cfgKey, cs, cur plan.MultiScored, now time.Time, rates []float64) bool {
	o := c.cfg.Refine
	in := microOfChoice(*c.cur)
	if sameTurns(in, cs.MicroBatches) {
		return false
	}
	if f := c.ref.failed[turnsKey(key, cs.MicroBatches)]; f != nil && now.Before(f.retryAt) {
		return false
	}
	if cs.ObjectiveSPS < cur.ObjectiveSPS*(1+o.TrialGain) {
		return false
	}
	from := refinePoint{key: key, eval: cur.MultiEval, at: c.ref.confirmed.at}
	c.ref.trial = &refineTrial{key: key, from: from, start: now, deadline: now.Add(o.TrialMax), turns: true}
	reason := fmt.Sprintf("trying %s with %s for at most %s (it runs %s): with the live evidence pooled they are claimed and predicted to train %.1f samples/s against %.1f, P(every budget met) %.1f%%; back at once if a budget breaks",
		c.keyWords(key), turnsWords(cs.MicroBatches), o.TrialMax, turnsWords(in), cs.ObjectiveSPS, cur.ObjectiveSPS, 100*cs.PFeasible)
	c.decideRefined(ctx, KindTrial, reason, cs.MultiEval, rates)
	return true
}
