package control

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// planned is every workload planned for: the group of several streams or jobs, or the
// pair as a group of one job and one stream (nil before a pair is registered). Called
// with c.mu held.
func (c *Controller) planned() *group {
	if c.grp != nil {
		return c.grp
	}
	if c.pair == nil {
		return nil
	}
	return &group{Train: []TrainJob{{Workload: c.pair.Train, Batch: c.pair.TrainBatch, MicroBatches: c.pair.MicroBatches}},
		Streams: []StreamSpec{{Workload: c.pair.Infer, Batches: c.pair.Batches}}}
}

// plannedProfiles are the stored profiles of every workload planned for on the board's
// space, one per mode where every job and stream has one (StoredMultiProfiles), with the
// learned power corrections applied, the (stream, mode, batch) points that broke a
// latency budget left out and the live evidence of every stream and job pooled in
// (refine.go). Called with c.mu held.
func (c *Controller) plannedProfiles() ([]plan.MultiProfile, error) {
	ps, err := c.storedPlanned()
	if err != nil || !c.refining() {
		return ps, err
	}
	shares := c.shares()
	for i := range ps {
		if ws := c.ref.evidence[ps[i].Mode]; len(ws) > 0 {
			ps[i], _ = poolEvidence(ps[i], ws, shares, c.cfg.NoiseRel, c.cfg.Refine.MaxRepeats, c.powerFloor(ps[i].Mode))
		}
	}
	return ps, nil
}

// storedPlanned is plannedProfiles without the live evidence. Called with c.mu held.
func (c *Controller) storedPlanned() ([]plan.MultiProfile, error) {
	g := c.planned()
	if c.board == nil || g == nil {
		return nil, nil
	}
	ps, err := StoredMultiProfiles(c.store, c.board.Info().Name, g)
	if err != nil {
		return nil, err
	}
	if sp := c.board.Space(); sp != nil {
		ps = slices.DeleteFunc(ps, func(p plan.MultiProfile) bool { return !sp.Contains(p.Mode) })
	}
	for pi := range ps {
		p := &ps[pi]
		if k := c.corrP[p.Mode]; k > 1 {
			for j := range p.Train {
				p.Train[j].PowerMW *= k
			}
			for j := range p.Micro {
				for x := range p.Micro[j] {
					p.Micro[j][x].PowerMW *= k // micro-batch turns draw at the same mode
				}
			}
			for i := range p.Infer {
				for x := range p.Infer[i] {
					p.Infer[i][x].PowerMW *= k
				}
			}
		}
		for i := range p.Infer {
			name := g.Streams[i].Workload
			p.Infer[i] = slices.DeleteFunc(p.Infer[i], func(ip plan.InferPoint) bool { return c.isBad(name, p.Mode, ip.Batch) })
		}
	}
	return slices.DeleteFunc(ps, func(p plan.MultiProfile) bool {
		return slices.ContainsFunc(p.Infer, func(ips []plan.InferPoint) bool { return len(ips) == 0 })
	}), nil
}

// plannedBudgets are model v1's budgets for the workloads planned for at the streams'
// rates (streamRates). Called with c.mu held.
func (c *Controller) plannedBudgets(rates []float64) plan.MultiBudgets {
	g := c.planned()
	var streams, jobs []string
	for _, s := range g.Streams {
		streams = append(streams, s.Workload)
	}
	for _, j := range g.Train {
		jobs = append(jobs, j.Workload)
	}
	return c.targets.MultiBudgets(streams, rates, jobs)
}

// notePlanRates records the rates a plan was made for (the drift rule compares the
// measured ones with them). Called with c.mu held.
func (c *Controller) notePlanRates(rates []float64) {
	for i, s := range c.planned().Streams {
		c.meter(s.Workload, c.clock.Now()).planned = rates[i]
	}
}

// planRate is the rate the plan in force was made for on the pair's stream (the first
// planned; 0 before a plan). Called with c.mu held.
func (c *Controller) planRate() float64 {
	if c.pair == nil {
		return 0
	}
	if m := c.meters[c.pair.Infer]; m != nil {
		return m.planned
	}
	return 0
}

// plan decides from the stored profiles of every stream and job planned for (the pair:
// one of each), or starts a search when too few are stored — unless
// a search just ended (afterSearch: its plan, from what it stored). Called with c.mu
// held.
func (c *Controller) plan(ctx context.Context, reason string, afterSearch bool) {
	kind := KindReplan
	if c.cur == nil || afterSearch {
		kind = KindPlan
	}
	search := !afterSearch
	ps, err := c.plannedProfiles()
	if err != nil {
		c.events.Add(Event{Kind: kind, Reason: reason + ": reading stored profiles failed", Err: err.Error()})
		return
	}
	if c.board == nil {
		return
	}
	if b := c.blocked(); search && len(ps) < c.cfg.MinProfiles && len(b) > 0 {
		c.searchRefused(reason, b)
		if len(ps) == 0 {
			return
		}
	} else if search && len(ps) < c.cfg.MinProfiles {
		c.startSearch(c.base, c.cfg.Searcher, fmt.Sprintf("%s; %d modes stored for every workload (need %d)", reason, len(ps), c.cfg.MinProfiles), 0)
		return
	}
	rates, _ := c.streamRates(c.clock.Now())
	d, mb, err := c.choose(ps, rates)
	if err != nil {
		c.events.Add(Event{Kind: kind, Reason: reason, Err: err.Error()})
		return
	}
	c.stepped = false
	c.notePlanRates(rates)
	ch, reason := c.choiceOf(d.Best, mb), reason+": "+c.explain(d, mb)
	if alone, why, ok := c.servingAlone(ch); ok {
		ch, reason = alone, reason+"; "+why
	}
	c.applyDecision(ctx, kind, reason, ch)
}

// choose is the decision (plan.MultiDecider, the one `fulcrumctl bench` scores) over ps
// against the budgets of the workloads planned for at rates, with the controller's
// decision rules; mb are those budgets.
func (c *Controller) choose(ps []plan.MultiProfile, rates []float64) (d plan.MultiDecision, mb plan.MultiBudgets, err error) {
	mb = c.plannedBudgets(rates)
	ps = underCap(c, ps, func(p plan.MultiProfile) powermode.Mode { return p.Mode })
	d, err = c.Rules().ForMulti(mb, c.cfg.InferBatches).Decide(ps)
	if err != nil {
		return d, mb, fmt.Errorf("no stored profile of every workload: run fulcrumctl optimize, or fulcrumctl profile: %w", err)
	}
	return d, mb, nil
}

// explain is a decision in an event's words: the pair's as plan.Decision.Explain says
// it, several streams' or jobs' with each stream's batch and latency.
func (c *Controller) explain(d plan.MultiDecision, mb plan.MultiBudgets) string {
	if len(mb.Streams) == 1 && len(d.Best.TrainSPS) == 1 {
		return d.Pair().Explain(mb.Pair())
	}
	e := d.Best
	var st []string
	for i, s := range e.Streams {
		q := ""
		if s.QueueMS >= 0.5 {
			q = fmt.Sprintf(", %.0f ms of it queued", s.QueueMS)
		}
		st = append(st, fmt.Sprintf("%s batch %d (%.0f ms of %.0f ms at %.1f/s%s)", s.Name, s.Batch, s.LatencyMS, mb.Streams[i].LatencyMS, mb.Streams[i].RateRPS, q))
	}
	if mt := microText(trainChoices(c.planned(), e.MicroBatches)); mt != "" {
		st = append(st, mt)
	}
	head := fmt.Sprintf("mode %s, %s; %.1f W, GPU share %.2f, training %.1f samples/s (P(every budget) %.3f, %d claimable)",
		e.Mode.Human(), strings.Join(st, ", "), e.PowerMW/1000, e.Rho, e.ObjectiveSPS, d.PFeasible, d.Candidates)
	if !d.Feasible {
		b := string(d.Binding.Constraint)
		if d.Binding.Stream != "" {
			b += " of stream " + d.Binding.Stream
		}
		return "no known configuration meets every budget with training running (" + b + " binds); least violating: " + head
	}
	return head
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

// decide applies e — a configuration of every stream and job planned for, scored against
// mb: a decision's best or a step's configuration — and records it (kind). Called with
// c.mu held.
func (c *Controller) decide(ctx context.Context, kind Kind, reason string, e plan.MultiEval, mb plan.MultiBudgets) {
	c.applyDecision(ctx, kind, reason, c.choiceOf(e, mb))
}

// choiceOf is e, a configuration of every stream and job planned for scored against mb,
// as a Choice. Called with c.mu held.
func (c *Controller) choiceOf(e plan.MultiEval, mb plan.MultiBudgets) Choice {
	ch := Choice{Mode: e.Mode, Predicted: Prediction{ThroughputSPS: e.ObjectiveSPS, PowerMW: e.PowerMW, Rho: e.Rho,
		Feasible: e.Feasible, Binding: string(e.Binding.Constraint)}}
	for i, s := range e.Streams {
		ch.Streams = append(ch.Streams, StreamChoice{Workload: s.Name, Batch: s.Batch, LatencyBudgetMS: mb.Streams[i].LatencyMS,
			RateRPS: mb.Streams[i].RateRPS, PredLatencyMS: s.LatencyMS, Rho: s.Rho})
	}
	if len(ch.Streams) > 0 { // the pair's stream's, the first
		ch.Predicted.LatencyMS, ch.Predicted.RateRPS = ch.Streams[0].PredLatencyMS, ch.Streams[0].RateRPS
	}
	ch.Train = trainChoices(c.planned(), e.MicroBatches)
	return ch
}

// applyDecision records the decision ch (kind) and applies it; training waits while it
// is not feasible (trainingPausedFor). Called with c.mu held.
func (c *Controller) applyDecision(ctx context.Context, kind Kind, reason string, ch Choice) {
	m := ch.Mode
	meas := c.measured
	pred := ch.Predicted
	c.events.Add(Event{Kind: kind, Reason: reason, Mode: &m, Batch: ch.Batch(), Streams: streamBatchesOf(ch), Predicted: &pred, Measured: &meas})
	c.apply(ctx, ch)
	// docs/design.md §2: when no known configuration meets the budgets with training running,
	// inference and power come first: training waits until a plan is feasible again —
	// unless only the latency budget binds and training can run in micro-batch turns
	// short enough for the admission room (issue 32, §9).
	c.dropLatencyPause(c.clock.Now())
	c.setTrainingPaused(c.trainingPausedFor(pred.Feasible, pred.Binding), reason)
}

// streamBatchesOf is every stream's batch of ch (an event's Streams).
func streamBatchesOf(ch Choice) []StreamBatch {
	var out []StreamBatch
	for _, s := range ch.Streams {
		out = append(out, StreamBatch{Workload: s.Workload, Batch: s.Batch})
	}
	return out
}

// expectAt tells the scheduler how long the workers' turns take at mode m — the stored
// profile there of the workloads planned for, nothing (measure afresh) for other
// workloads or an unprofiled mode — so that it does not judge admission on the previous
// mode's times: a slower mode's stale times starved training after a plan (found in the
// demo: 1–6 samples/s against 270 planned). Called with c.mu held, after a mode change.
func (c *Controller) expectAt(m powermode.Mode) {
	var mp *plan.MultiProfile
	if ps, err := c.plannedProfiles(); err == nil {
		if i := slices.IndexFunc(ps, func(p plan.MultiProfile) bool { return p.Mode == m }); i >= 0 {
			mp = &ps[i]
		}
	}
	c.expectAtGroup(c.planned(), mp)
}

// planRateOr is the rate the pair's search plans for: the operator's, else the pair's
// stream's level (rateMeter), else 1/s. Called with c.mu held.
func (c *Controller) planRateOr() float64 {
	if c.targets.RateRPS > 0 {
		return c.targets.RateRPS
	}
	if m := c.meters[c.pair.Infer]; m != nil && m.init {
		if r := m.level; r > 0 {
			return r
		}
	}
	return 1
}
