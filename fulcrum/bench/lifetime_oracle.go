package bench

import (
	"context"
	"fmt"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/search"
)

// best is the truth's best configuration under ph's budgets that still fits with every
// time and power raised by marginRel and keeps the admission room (the margin oracles,
// oracle.go and multi_oracle.go): its training samples per second (summed over the jobs),
// and the choice itself for holding it (a pair's plan.Eval or a set's plan.MultiEval).
// sps is 0 and choice nil when nothing fits so.
func (c *lifeConfig) best(ph lifePhase, marginRel float64, adm plan.Admission, q float64) (sps float64, choice any, err error) {
	if c.pt != nil {
		b := plan.Budgets{RateRPS: ph.rate, LatencyMS: ph.latMS, PowerMW: ph.powMW, Quantile: q}.WithDefaults()
		res, err := (&MarginOracle{pt: c.pt, MarginRel: marginRel, Admission: adm}).Search(context.Background(), search.Problem{Budgets: b}, nil)
		if err != nil || !res.Found || !res.Feasible {
			return 0, nil, err
		}
		return res.Choice.ThroughputSPS, res.Choice, nil
	}
	e, found, err := MultiMarginOracle(c.mt, c.multiBudgets(ph, q), marginRel, adm)
	if err != nil || !found {
		return 0, nil, err
	}
	return sumPos(e.TrainSPS), e, nil
}

func (c *lifeConfig) multiBudgets(ph lifePhase, q float64) plan.MultiBudgets {
	b := plan.MultiBudgets{PowerMW: ph.powMW, Quantile: q}
	for _, n := range c.mt.Infers {
		b.Streams = append(b.Streams, plan.StreamBudget{Name: n, RateRPS: ph.rate, LatencyMS: ph.latMS})
	}
	return b.WithDefaults()
}

// held evaluates choice (from best) on the truth under ph's budgets: its training samples
// per second and which budgets it breaks there (model v1 on the noise-free truth: a
// stream's latency or the GPU share over its cap breaks latency; power over the budget
// breaks power).
func (c *lifeConfig) held(choice any, ph lifePhase, q float64) (sps float64, latBroken, powBroken bool, err error) {
	if c.pt != nil {
		e := choice.(plan.Eval)
		b := plan.Budgets{RateRPS: ph.rate, LatencyMS: ph.latMS, PowerMW: ph.powMW, Quantile: q}.WithDefaults()
		model, err := plan.NewModel(b, c.pt.Batches)
		if err != nil {
			return 0, false, false, err
		}
		now, ok := c.pt.Score(model, e.Mode, e.Batch, e.MicroBatch)
		if !ok {
			return 0, false, false, fmt.Errorf("mode %s batch %d is not in the truth", e.Mode, e.Batch)
		}
		return max(0, now.ThroughputSPS), now.LatencyMS/b.LatencyMS-1 > 0 || now.Rho/b.RhoMax-1 > 0, now.PowerMW/b.PowerMW-1 > 0, nil
	}
	e := choice.(plan.MultiEval)
	b := c.multiBudgets(ph, q)
	model, err := plan.NewMultiModel(b, c.mt.AllBatches())
	if err != nil {
		return 0, false, false, err
	}
	tp, ok := c.mt.Lookup(e.Mode)
	if !ok {
		return 0, false, false, fmt.Errorf("mode %s is not in the truth", e.Mode)
	}
	micro := e.MicroBatches
	if micro == nil {
		micro = make([]int, len(tp.Train))
	}
	now, err := model.EvaluateMicro(tp, e.Batches(), micro)
	if err != nil {
		return 0, false, false, err
	}
	latBroken = now.Rho/b.RhoMax-1 > 0
	for i, s := range now.Streams {
		latBroken = latBroken || s.LatencyMS/b.Streams[i].LatencyMS-1 > 0
	}
	return sumPos(now.TrainSPS), latBroken, now.PowerMW/b.PowerMW-1 > 0, nil
}

// oneShot is the margin oracle's decision at t = 0 held for the whole run (m.replan:
// decided again at the start of every stretch), computed from the truth: no search, no
// profile, planned at t = 0; each stretch of the run trains at the configuration's true
// throughput there and breaks what it breaks there. With nothing fitting at t = 0 it never
// plans and trains nothing; a re-planning oracle with nothing fitting in a stretch trains
// nothing there and breaks nothing.
func oneShot(c *lifeConfig, m lifeMethod, spec LifetimeSpec, q float64) (LifeOutcome, error) {
	o := LifeOutcome{Config: c.name, IdealSamples: c.ideal}
	phases := phasesOf(spec.Duration, c.rate, c.latMS, c.powMW, c.changes)
	_, choice, err := c.best(phases[0], m.marginRel, spec.Admission, q)
	if err != nil || choice == nil && !m.replan {
		return o, err
	}
	o.Planned = choice != nil
	if len(phases) > 1 {
		o.PhaseSamples = make([]float64, len(phases))
	}
	for i, ph := range phases {
		if m.replan && i > 0 {
			if _, choice, err = c.best(ph, m.marginRel, spec.Admission, q); err != nil {
				return o, err
			}
		}
		if choice == nil {
			continue
		}
		if !o.Planned {
			// First planned in a later stretch: what came before trained nothing.
			o.Planned, o.FirstPlanS = true, phaseStartS(phases, i)
		}
		sps, lat, pow, err := c.held(choice, ph, q)
		if err != nil {
			return o, err
		}
		o.TrainSamples += sps * ph.lenS
		if o.PhaseSamples != nil {
			o.PhaseSamples[i] = sps * ph.lenS
		}
		o.TrainAfterPlan = o.TrainSamples // nothing trained before the first plan
		if lat {
			o.LatencyBrokenS += ph.lenS
		}
		if pow {
			o.PowerBrokenS += ph.lenS
		}
		o.LatencyBrokenAfterPlanS, o.PowerBrokenAfterPlanS = o.LatencyBrokenS, o.PowerBrokenS // nothing broken before it
	}
	return o, nil
}

// phaseStartS is when stretch i of phases starts, in seconds from the run's start.
func phaseStartS(phases []lifePhase, i int) float64 {
	s := 0.0
	for _, ph := range phases[:i] {
		s += ph.lenS
	}
	return s
}

func sumPos(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += max(0, x)
	}
	return s
}
