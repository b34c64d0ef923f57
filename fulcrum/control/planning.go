package control

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// planningRate is the fixed rate, or the measured one once it has been measured for
// RateWarmup.
func (c *Controller) planningRate(now time.Time) (float64, bool) {
	if c.targets.RateRPS > 0 {
		return c.targets.RateRPS, true
	}
	return c.rate.rate, c.rate.ready(now, c.cfg.RateWarmup)
}

// profiles returns the stored complete profiles of the pair with the learned power
// corrections applied, latency-broken configurations left out and the live evidence
// pooled in (refine.go).
func (c *Controller) profiles() ([]plan.ModeProfile, error) {
	ps, err := c.unrefinedProfiles()
	return c.refined(ps), err
}

// unrefinedProfiles is profiles without the live evidence.
func (c *Controller) unrefinedProfiles() ([]plan.ModeProfile, error) {
	if c.board == nil {
		return nil, nil
	}
	ps, err := StoredProfiles(c.store, c.board.Info().Name, *c.pair)
	if err != nil {
		return nil, err
	}
	if sp := c.board.Space(); sp != nil {
		ps = slices.DeleteFunc(ps, func(p plan.ModeProfile) bool { return !sp.Contains(p.Mode) })
	}
	for i := range ps {
		if k := c.corrP[ps[i].Mode]; k > 1 {
			ps[i].Train.PowerMW *= k
			for j := range ps[i].Infer {
				ps[i].Infer[j].PowerMW *= k
			}
			for j := range ps[i].Micro { // micro-batch turns draw at the same mode
				ps[i].Micro[j].PowerMW *= k
			}
		}
		ps[i].Infer = slices.DeleteFunc(ps[i].Infer, func(ip plan.InferPoint) bool { return c.isBad(c.pair.Infer, ps[i].Mode, ip.Batch) })
	}
	return slices.DeleteFunc(ps, func(p plan.ModeProfile) bool { return len(p.Infer) == 0 }), nil
}
func predictionOf(e plan.Eval, rate float64) Prediction {
	return Prediction{ThroughputSPS: e.ThroughputSPS, LatencyMS: e.LatencyMS, PowerMW: e.PowerMW, Rho: e.Rho, RateRPS: rate, Feasible: e.Feasible, Binding: string(e.Binding)}
}

// plan chooses from stored profiles (the decision, choose), or starts
// a search when too few are stored or one was asked for. Called with c.mu held.
func (c *Controller) plan(ctx context.Context, reason string, rate float64) {
	kind := KindReplan
	if c.cur == nil {
		kind = KindPlan
	}
	ps, err := c.profiles()
	if err != nil {
		c.events.Add(Event{Kind: kind, Reason: reason + ": reading stored profiles failed", Err: err.Error()})
		return
	}
	if b := c.blocked(); c.board != nil && (len(ps) < c.cfg.MinProfiles || c.forceSearch != "") && len(b) > 0 {
		c.forceSearch = ""
		c.searchRefused(reason, b)
		if len(ps) == 0 {
			return
		}
	} else if c.board != nil && (len(ps) < c.cfg.MinProfiles || c.forceSearch != "") {
		method := c.forceSearch
		if method == "" {
			method = c.cfg.Searcher
		}
		c.forceSearch = ""
		c.startSearch(c.base, method, fmt.Sprintf("%s; %d stored profiles (need %d)", reason, len(ps), c.cfg.MinProfiles), 0)
		return
	}
	if c.board == nil {
		return
	}
	pl, err := c.choose(ps, c.targets.Budgets(rate))
	if err != nil {
		c.events.Add(Event{Kind: kind, Reason: reason, Err: err.Error()})
		return
	}
	c.planRate = rate
	c.stepped = false
	why := reason + ": " + pl.Explain(c.targets.Budgets(rate))
	c.decide(ctx, kind, why, pl.Best, rate)
}

// choose is the decision (plan.Decider, the one `fulcrumctl bench` scores) over ps
// against the budgets b, with the controller's decision rules.
func (c *Controller) choose(ps []plan.ModeProfile, b plan.Budgets) (plan.Decision, error) {
	ps = underCap(c, ps, func(p plan.ModeProfile) powermode.Mode { return p.Mode })
	d, err := c.Rules().For(b, c.cfg.InferBatches).Decide(ps)
	if err != nil {
		return d, fmt.Errorf("no stored profile of this workload pair: run fulcrumctl optimize, or fulcrumctl profile: %w", err)
	}
	return d, nil
}

// Rules are the controller's decision rules: its configured profiling noise and
// confidence, and the room its scheduler's admission test needs — the configured margin
// plus the largest room the scheduler has learned from the streams' latency windows
// (room.go), so a plan is judged with the room the scheduler applies.
func (c *Controller) Rules() plan.Rules {
	r := DecisionRules(c.cfg, c.sched.Config())
	r.Admission.MarginMS += learnedRoomMS(c.sched.Snapshot())
	return r
}

// DecisionRules are the decision rules of a controller configured with cfg over a
// scheduler configured with sc: the admission room is sc's margin and DevK deviations
// of sched.ExpectedDevRel each (see admissionBudgets). fulcrumctl bench builds its
// defaults from the same function over the daemon's default configurations.
func DecisionRules(cfg Config, sc sched.Config) plan.Rules {
	cfg = cfg.withDefaults()
	return plan.Rules{NoiseRel: cfg.NoiseRel, Confidence: cfg.Confidence,
		Admission: plan.Admission{MarginMS: float64(sc.Margin) / float64(time.Millisecond), DevRel: max(sc.DevK, 0) * sched.ExpectedDevRel}}
}

// decide applies e and records the decision (kind) and the application.
func (c *Controller) decide(ctx context.Context, kind Kind, reason string, e plan.Eval, rate float64) {
	exact, err := plan.NewModel(c.targets.Budgets(rate), c.cfg.InferBatches)
	pred := predictionOf(e, rate)
	if err == nil {
		if ps, perr := c.profiles(); perr == nil {
			for _, p := range ps {
				if p.Mode == e.Mode {
					// The training turn the decision chose: the minibatch or one
					// micro-batch of it (issue 32).
					t := p.Train
					for _, x := range p.TrainChoices() {
						if x.MicroBatch() == e.MicroBatch {
							t = x
						}
					}
					for _, ip := range p.Infer {
						if ip.Batch == e.Batch {
							pred = predictionOf(exact.Evaluate(p.Mode, t, ip), rate)
						}
					}
				}
			}
		}
	}
	// A plan judged with the scheduler's admission room (choose) that does not fit in it
	// is not feasible, whatever the exact model says: training would starve.
	pred.Feasible = pred.Feasible && e.Feasible
	if !e.Feasible {
		pred.Binding = string(e.Binding) // what the decision's reason names
	}
	m := e.Mode
	meas := c.measured
	c.events.Add(Event{Kind: kind, Reason: reason, Mode: &m, Batch: e.Batch, Predicted: &pred, Measured: &meas})
	ch := Choice{Mode: e.Mode, Batch: e.Batch, MicroBatch: e.MicroBatch, Predicted: pred}
	c.keepStreams(&ch)
	c.apply(ctx, ch)
	// docs/design.md §2: when no known configuration meets the budgets with training running,
	// inference and power come first: training waits until a plan is feasible again —
	// unless only the latency budget binds and training can run in micro-batch turns
	// short enough for the admission room (issue 32, §9).
	c.dropLatencyPause(c.clock.Now())
	c.setTrainingPaused(c.trainingPausedFor(pred.Feasible, pred.Binding), reason)
}

// expectAt tells the scheduler how long the workers' turns take at mode m — the stored
// profile there of the workloads planned for (the pair, or every stream and job), nothing
// (measure afresh) for other workloads or an unprofiled mode — so that it does not judge admission on the previous mode's times: a slower
// mode's stale times starved training after a plan (found in the demo: 1–6 samples/s
// against 270 planned). Called with c.mu held, after a mode change.
func (c *Controller) expectAt(m powermode.Mode) {
	if c.grp != nil {
		var mp *plan.MultiProfile
		if ps, err := c.multiProfiles(); err == nil {
			if i := slices.IndexFunc(ps, func(p plan.MultiProfile) bool { return p.Mode == m }); i >= 0 {
				mp = &ps[i]
			}
		}
		c.expectAtGroup(c.grp, mp)
		return
	}
	// The pair as a group of one job and one stream.
	var g *group
	var mp *plan.MultiProfile
	if c.pair != nil {
		g = &group{Train: []TrainJob{{Workload: c.pair.Train, Batch: c.pair.TrainBatch, MicroBatches: c.pair.MicroBatches}}, Streams: []StreamSpec{{c.pair.Infer, c.pair.Batches}}}
		if ps, err := c.profiles(); err == nil {
			if i := slices.IndexFunc(ps, func(p plan.ModeProfile) bool { return p.Mode == m }); i >= 0 {
				x := plan.MultiOf(ps[i])
				mp = &x
			}
		}
	}
	c.expectAtGroup(g, mp)
}
func (c *Controller) planRateOr() float64 {
	if c.targets.RateRPS > 0 {
		return c.targets.RateRPS
	}
	if c.rate.rate > 0 {
		return c.rate.rate
	}
	return 1
}
