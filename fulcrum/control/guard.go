package control

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// evalAll scores every stored configuration at rate with model v1 (exact budgets): each
// mode, inference batch and training turn (the minibatch, or a micro-batch of it, issue
// 32). Each owner is its profile with Train the turn scored.
func (c *Controller) evalAll(ps []plan.ModeProfile, rate float64) ([]plan.Eval, []plan.ModeProfile) {
	m, err := plan.NewModel(c.targets.Budgets(rate), c.cfg.InferBatches)
	if err != nil {
		return nil, nil
	}
	var es []plan.Eval
	var owners []plan.ModeProfile
	for _, p := range ps {
		for _, t := range p.TrainChoices() {
			owner := p
			owner.Train = t
			for _, ip := range p.Infer {
				es = append(es, m.Evaluate(p.Mode, t, ip))
				owners = append(owners, owner)
			}
		}
	}
	return es, owners
}

// stepDownPower moves to the highest-throughput stored configuration whose predicted
// power, scaled by how much the present one is under-predicted, is within
// budget·(1−StepMargin); failing that, to the lowest-power known configuration.
func (c *Controller) stepDownPower(ctx context.Context, rate float64) {
	now := c.clock.Now()
	c.lastStep = now
	ps, err := c.profiles()
	if err != nil || len(ps) == 0 {
		c.events.Add(Event{Kind: KindStepDown, Reason: "power over budget but no stored profile to step to", Err: fmt.Sprint(err)})
		return
	}
	avg := c.measured.PowerMW
	budget := c.targets.PowerMW
	k := 1.0
	if c.cur.Predicted.PowerMW > 0 {
		k = max(1, avg/c.cur.Predicted.PowerMW)
		c.corrP[c.cur.Mode] = max(c.corrP[c.cur.Mode], k*max(c.corrP[c.cur.Mode], 1))
	}
	target := budget * (1 - c.cfg.StepMargin)
	es, _ := c.evalAll(ps, rate)
	var best, lowest *plan.Eval
	for i := range es {
		e := &es[i]
		if e.Rho > c.targets.Budgets(rate).RhoMax {
			continue
		}
		if lowest == nil || e.PowerMW < lowest.PowerMW || (e.PowerMW == lowest.PowerMW && e.ThroughputSPS > lowest.ThroughputSPS) {
			lowest = e
		}
		if e.PowerMW*k > target || e.PowerMW*k >= avg || e.LatencyMS > c.targets.LatencyMS*(1-c.cfg.PlanMargin) {
			continue
		}
		if best == nil || e.ThroughputSPS > best.ThroughputSPS || (e.ThroughputSPS == best.ThroughputSPS && e.PowerMW < best.PowerMW) {
			best = e
		}
	}
	pick, how := best, "the highest-throughput stored configuration predicted within it"
	if pick == nil {
		pick, how = lowest, "no stored configuration is predicted within it: the lowest-power known configuration"
	}
	if pick == nil {
		c.events.Add(Event{Kind: KindStepDown, Reason: "power over budget and no stored configuration keeps inference within its GPU share"})
		return
	}
	c.stepped, c.held = true, false
	c.belowSince = time.Time{}
	reason := fmt.Sprintf("power %.1f W (1 s average) over the %.1f W budget at mode %s%s; the board draws %.2f× the predicted power; stepping to %s (target ≤ %.1f W)",
		avg/1000, budget/1000, c.cur.Mode.Human(), c.heatNote(), k, how, target/1000)
	c.decide(ctx, KindStepDown, reason, *pick, rate)
}

// stepDownLatency moves to a configuration with a shorter training minibatch or a
// smaller batch at this mode, within the power budget: the best predicted to meet the
// latency budget scaled by how much the present one is under-predicted, else the one
// with the lowest predicted latency.
func (c *Controller) stepDownLatency(ctx context.Context, rate float64) {
	now := c.clock.Now()
	c.lastStep, c.lastLatStep = now, now
	cur := *c.cur
	c.badLat[cfgKey{cur.Mode, cur.Batch}] = true
	ps, err := c.profiles()
	if err != nil || len(ps) == 0 {
		c.events.Add(Event{Kind: KindStepDown, Reason: "latency over budget but no stored profile to step to", Err: fmt.Sprint(err)})
		return
	}
	// "Shorter" is judged on the stored turn times where live evidence refined some
	// (storedTurnTimes says why); the predictions below use the refined profiles.
	stored := c.storedTurnTimes()
	turnMS := func(m powermode.Mode, t plan.TrainPoint) float64 {
		if ms, ok := stored[turnKey{m, t.MicroBatch()}]; ok {
			return ms
		}
		return t.TimeMS
	}
	// The turn in force is read from the store, not from ps: once every batch of its
	// mode broke the budget the mode is out of ps, yet its minibatch is as long as
	// stored. Unknown (nothing stored), no turn counts as shorter: only a smaller
	// batch at this mode would (an unknown time read as 0 made every mode "shorter",
	// slower ones too).
	curTrain, known := c.storedTurnInForce()
	p99 := c.measured.LatencyP99MS
	kL := 1.0
	if cur.Predicted.LatencyMS > 0 {
		kL = max(1, p99/cur.Predicted.LatencyMS)
	}
	es, owners := c.evalAll(ps, rate)
	power := c.targets.PowerMW
	var best, fastest *plan.Eval
	for i := range es {
		e := &es[i]
		shorter := (known && turnMS(e.Mode, owners[i].Train) < curTrain) || (e.Mode == cur.Mode && e.Batch < cur.Batch)
		// profiles() applied the learned power correction to every turn's power
		// (minibatch, micro-batch, inference) already: it is not applied again here.
		pw := e.PowerMW
		if !shorter || e.Rho > c.targets.Budgets(rate).RhoMax || (power > 0 && pw > power*(1-c.cfg.StepMargin)) {
			continue
		}
		if fastest == nil || e.LatencyMS < fastest.LatencyMS {
			fastest = e
		}
		if e.LatencyMS*kL > c.targets.LatencyMS*(1-c.cfg.PlanMargin) {
			continue
		}
		if best == nil || e.ThroughputSPS > best.ThroughputSPS {
			best = e
		}
	}
	pick, how := best, "the highest-throughput one predicted within the budget"
	if pick == nil {
		pick, how = fastest, "none is predicted within the budget: the one with the lowest predicted latency"
	}
	if pick == nil {
		why := ""
		if !known {
			why = fmt.Sprintf(" (the training turn in force at mode %s has no stored time: only a smaller batch there counts)", cur.Mode.Human())
		}
		c.events.Add(Event{Kind: KindStepDown, Reason: fmt.Sprintf("p99 latency %.1f ms over the %.0f ms budget, but no stored configuration has a shorter training minibatch or smaller batch within the power budget%s", p99, c.targets.LatencyMS, why)})
		return
	}
	c.stepped, c.held = true, false
	c.belowSince = time.Time{}
	reason := fmt.Sprintf("p99 latency %.1f ms over the %.0f ms budget at mode %s batch %d (%.2f× the predicted)%s; stepping to a shorter training minibatch or smaller batch: %s",
		p99, c.targets.LatencyMS, cur.Mode.Human(), cur.Batch, kL, c.heatNote(), how)
	c.decide(ctx, KindStepDown, reason, *pick, rate)
}

// stepUp re-plans from stored profiles, with what the steps learned (power corrections,
// latency-broken configurations left out), once the values stayed below
// budget·(1−Hysteresis) for Hold.
func (c *Controller) stepUp(ctx context.Context, rate float64) {
	ps, err := c.profiles()
	if err != nil || len(ps) == 0 {
		return
	}
	pl, err := c.choose(ps, c.targets.Budgets(rate))
	if err != nil || !pl.Feasible {
		return
	}
	if pl.Best.Mode == c.cur.Mode && pl.Best.Batch == c.cur.Batch {
		c.stepped = false
		return
	}
	if pl.Best.ThroughputSPS <= c.cur.Predicted.ThroughputSPS {
		c.stepped = false
		return
	}
	c.lastStep = c.clock.Now()
	c.stepped = false
	c.planRate = rate
	reason := fmt.Sprintf("power %.1f W and p99 %.1f ms stayed below %.0f%% of their budgets for %s; stepping back up: %s",
		c.measured.PowerMW/1000, c.measured.LatencyP99MS, (1-c.cfg.Hysteresis)*100, c.cfg.Hold, pl.Explain(c.targets.Budgets(rate)))
	c.decide(ctx, KindStepUp, reason, pl.Best, rate)
}

// checkDegraded falls back to the lowest-power known mode when power has not been
// readable for PowerFail (with a power budget), and leaves degraded mode when it is
// readable again. It reports whether the step should end here.
func (c *Controller) checkDegraded(ctx context.Context, now time.Time) bool {
	lastOK, fails, lastErr := c.power.Health()
	down := fails > 0 && (lastOK.IsZero() || now.Sub(lastOK) >= c.cfg.PowerFail)
	switch {
	case down && c.degraded == "":
		c.degraded = fmt.Sprintf("board power unreadable for %s (%d reads failed; last error: %v)", now.Sub(lastOK).Round(time.Millisecond), fails, lastErr)
		if lastOK.IsZero() {
			c.degraded = fmt.Sprintf("board power has never been readable (%d reads failed; last error: %v)", fails, lastErr)
		}
		ev := Event{Kind: KindDegraded, Reason: c.degraded + "; falling back to the lowest-power known mode (check fulcrumctl board power)"}
		if c.targets.PowerMW == 0 {
			ev.Reason = c.degraded + "; no power budget is set, so the mode is kept"
			c.events.Add(ev)
			return false
		}
		pick, ok := c.lowestPower()
		if !ok {
			ev.Reason = c.degraded + "; no stored profile to pick the lowest-power mode from: keeping the present mode"
			c.events.Add(ev)
			return true
		}
		c.stepped = true
		c.decide(ctx, KindDegraded, ev.Reason, pick, c.planRateOr())
		return true
	case down:
		return true
	case !down && c.degraded != "":
		c.events.Add(Event{Kind: KindDegraded, Reason: "board power is readable again; leaving degraded mode and re-planning"})
		c.degraded = ""
		c.needPlan = "power readable again"
		return false
	}
	return false
}

// lowestPower is the stored configuration with the lowest predicted power (inference
// within its GPU share).
func (c *Controller) lowestPower() (plan.Eval, bool) {
	if c.pair == nil {
		return plan.Eval{}, false
	}
	ps, err := c.profiles()
	if err != nil {
		return plan.Eval{}, false
	}
	rate := c.planRateOr()
	es, _ := c.evalAll(ps, rate)
	var best *plan.Eval
	for i := range es {
		e := &es[i]
		if e.Rho > c.targets.Budgets(rate).RhoMax {
			continue
		}
		if best == nil || e.PowerMW < best.PowerMW || (e.PowerMW == best.PowerMW && e.ThroughputSPS > best.ThroughputSPS) {
			best = e
		}
	}
	if best == nil {
		return plan.Eval{}, false
	}
	return *best, true
}

// latencySettled reports whether the scheduler's recent latency window (its
// RecentWindow) holds only requests served since the mode and batches in force were
// applied: a p99 over requests served at the previous configuration says nothing of this
// one, and judging it there left out a configuration that had not been tried (issue 34).
func (c *Controller) latencySettled(now time.Time) bool {
	return now.Sub(c.cfgSince) >= c.sched.Config().RecentWindow
}

// sameBatches reports whether a and b plan the same batch for every stream.
func sameBatches(a, b []StreamChoice) bool {
	return slices.EqualFunc(a, b, func(x, y StreamChoice) bool { return x.Workload == y.Workload && x.Batch == y.Batch })
}
