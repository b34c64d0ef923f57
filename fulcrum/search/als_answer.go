package search

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/fulcrum-edge/fulcrum/fulcrum/gp"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
)

// candidate is one (mode, batch) configuration scored by model v1 on derated values.
type candidate struct {
	pos      int
	batch    int
	eval     plan.Eval // on derated values: what ranks
	measured bool
}

// posterior is the prediction at one mode: mean and sd of every log output.
type posterior struct{ mu, sd []float64 }

// Answer implements Answerer: the best configuration for b by model v1 over the
// predicted profiles of every mode, derated for their uncertainty, confirming an
// unprofiled choice by profiling it, at most Confirm times. The answer always rests on
// a profiled mode.
func (m *ALSModel) Answer(ctx context.Context, b plan.Budgets, prof Profiler) (Result, error) {
	model, err := plan.NewModel(b, m.batches)
	if err != nil {
		return Result{}, fmt.Errorf("als: %w", err)
	}
	measured := make(map[int]bool, len(m.profiles))
	for _, mp := range m.profiles {
		measured[m.pos[mp.Mode]] = true
	}
	// Profiles the campaign did not use (another campaign's, or confirmations kept by
	// a store) join the GP data for this answer.
	var extra []plan.ModeProfile
	for _, mp := range prof.Known() {
		if i, ok := m.pos[mp.Mode]; ok && !measured[i] {
			if _, ok := outputsOf(mp, m.batches); ok {
				measured[i] = true
				extra = append(extra, mp.Clone())
			}
		}
	}
	post, err := m.posteriors(extra)
	if err != nil {
		return Result{}, err
	}
	var res Result
	// confirm profiles the mode at pos and adds it to the GP data.
	confirm := func(pos int) error {
		md := m.modes[pos]
		mp, err := prof.Profile(ctx, md)
		if err != nil {
			return fmt.Errorf("als: confirming mode %s: %w", md, err)
		}
		mp.Mode = md
		if _, ok := outputsOf(mp, m.batches); !ok {
			return fmt.Errorf("als: the confirming profile of mode %s lacks a batch size of %v or has a non-positive value: fix the profiler", md, m.batches)
		}
		measured[pos] = true
		extra = append(extra, mp)
		res.Profiled = append(res.Profiled, md)
		post, err = m.posteriors(extra)
		return err
	}
	for {
		best, ok := m.bestConfig(model, measured, post, nil)
		if !ok {
			return Result{}, errors.New("als: no configuration to evaluate: the model has no modes")
		}
		// Tight budgets: when nothing is feasible with the margins, the least-violating
		// candidate is confirmed (Better ranks infeasible ones by violation). Nominating
		// the best candidate at narrower margins instead was worse on the benchmark.
		if best.measured || len(res.Profiled) >= m.opts.Confirm {
			break
		}
		if err := confirm(best.pos); err != nil {
			return Result{}, err
		}
	}
	onlyMeasured := func(i int) bool { return measured[i] }
	best, ok := m.bestConfig(model, measured, post, onlyMeasured)
	if !ok {
		return Result{}, errors.New("als: no profiled mode to answer from")
	}
	// A confirm left over goes to the unprofiled mode that would beat the answer if
	// its profile matched the prediction (derated as a profiled mode would be).
	for len(res.Profiled) < m.opts.Confirm && !m.opts.KeepLeftover {
		c, ok := m.bestAt(model, measured, post, m.opts.SafetySigmas, 0, m.opts.SafetySigmas*m.opts.NoiseFloor, false)
		if !ok || c.measured || !c.eval.Better(best.eval) {
			break
		}
		if err := confirm(c.pos); err != nil {
			return Result{}, err
		}
		best, _ = m.bestConfig(model, measured, post, onlyMeasured)
	}
	how := fmt.Sprintf("feasible with the safety margin (z = %g)", m.opts.SafetySigmas)
	if !best.eval.Feasible {
		// Tight budgets: narrow the margin step by step (FallbackSigmas) before giving up.
		how = "nothing profiled meets the budgets even with the reduced margins; least-violating by the margin"
		for _, z := range m.opts.FallbackSigmas {
			if c, ok := m.bestAt(model, measured, post, z, 0, 0, true); ok && c.eval.Feasible {
				best = c
				how = fmt.Sprintf("feasible only with a reduced safety margin (z = %g)", z)
				break
			}
		}
	}
	res.Found = true
	res.Feasible = best.eval.Feasible
	res.Choice = m.meanEval(model, best.pos, best.batch, post)
	res.Stop = fmt.Sprintf("als: answered from the learned model (campaign: %d profiles, %s) with %d confirming profile(s); %s", len(m.profiles), m.stop, len(res.Profiled), how)
	return res, nil
}

// posteriors conditions the GPs on the campaign's data plus extra profiles (at the
// stored hyper-parameters) and returns the posterior at the extra profiles' modes.
// Other modes keep the campaign's predictions: an answer stays a scan, not a refit.
func (m *ALSModel) posteriors(extra []plan.ModeProfile) (map[int]posterior, error) {
	if len(extra) == 0 {
		return nil, nil
	}
	x, ys := slices.Clone(m.xData), slices.Clone(m.yData)
	for _, mp := range extra {
		idx, _ := m.space.Index(mp.Mode)
		y, _ := outputsOf(mp, m.batches)
		x, ys = append(x, m.in.at(idx)), append(ys, y)
	}
	nb, no := len(m.batches), m.nOut()
	out := make(map[int]posterior, len(extra))
	for _, mp := range extra {
		out[m.pos[mp.Mode]] = posterior{mu: make([]float64, no), sd: make([]float64, no)}
	}
	buf := make([]float64, nb)
	var sc gp.Scratch
	for g := range numGroups {
		gp, err := gp.New(x, groupOutputs(ys, g, nb), m.hyper[g])
		if err != nil {
			return nil, fmt.Errorf("als: %s surrogate with the confirming profiles: %w", groupName(g), err)
		}
		off, cnt := groupSlot(g, nb)
		for i, p := range out {
			idx, _ := m.space.Index(m.modes[i])
			s := gp.Predict(m.in.at(idx), buf[:cnt], &sc)
			for o := range cnt {
				p.mu[off+o], p.sd[off+o] = buf[o], s*gp.Scale(o)
			}
		}
	}
	return out, nil
}
func (m *ALSModel) at(i int, post map[int]posterior) (mu, sd []float64) {
	if p, ok := post[i]; ok {
		return p.mu, p.sd
	}
	no := m.nOut()
	return m.mu[i*no : (i+1)*no], m.sd[i*no : (i+1)*no]
}

// bestConfig ranks every (mode, batch) by model v1 on derated predictions: each time
// and power is taken at exp(μ + s·σ), with s = SafetySigmas and σ at least NoiseFloor
// for profiled modes, s = MarginSigmas for the others. A non-nil filter restricts the
// modes considered.
func (m *ALSModel) bestConfig(model *plan.Model, measured map[int]bool, post map[int]posterior, filter func(int) bool) (candidate, bool) {
	no, nb := m.nOut(), len(m.batches)
	bud := model.Budgets()
	var best candidate
	found := false
	fill := make([]float64, nb)
	for j, b := range m.batches {
		fill[j] = plan.FillQuantileMS(b, bud.RateRPS, bud.Quantile)
	}
	buf := make([]float64, no)
	for i := range m.modes {
		if filter != nil && !filter(i) {
			continue
		}
		isMeas := measured[i]
		vals := buf
		_, changed := post[i]
		switch {
		case !changed && isMeas && m.campaignMeasured(i):
			vals = m.derMeas[i*no : (i+1)*no]
		case !changed && !isMeas:
			vals = m.derUnmeas[i*no : (i+1)*no]
		default:
			mu, sd := m.at(i, post)
			m.derate(vals, mu, sd, isMeas)
		}
		for j, b := range m.batches {
			if found && best.eval.Feasible && lowerThroughput(bud, m.trainBatch, b, vals[0], vals[2+j], best.eval.ThroughputSPS) {
				continue // cannot beat a feasible best: skip the constraint checks
			}
			e := fastEval(bud, m.trainBatch, b, fill[j], vals[0], vals[1], vals[2+j], vals[2+nb+j])
			if !found || e.Better(best.eval) {
				best, found = candidate{pos: i, batch: b, eval: e, measured: isMeas}, true
			}
		}
	}
	if found {
		best.eval.Mode = m.modes[best.pos]
	}
	return best, found
}

// bestAt is bestConfig with explicit margins (z for profiled modes, k for the others)
// and no precomputation: the slow path for tight budgets.
func (m *ALSModel) bestAt(model *plan.Model, measured map[int]bool, post map[int]posterior, z, k, addU float64, measuredOnly bool) (candidate, bool) {
	nb, bud := len(m.batches), model.Budgets()
	var best candidate
	found := false
	vals := make([]float64, m.nOut())
	fills := make([]float64, nb)
	for j, b := range m.batches {
		fills[j] = plan.FillQuantileMS(b, bud.RateRPS, bud.Quantile)
	}
	for i := range m.modes {
		isMeas := measured[i]
		if measuredOnly && !isMeas {
			continue
		}
		mu, sd := m.at(i, post)
		for o := range vals {
			if isMeas {
				vals[o] = math.Exp(mu[o] + z*max(sd[o], m.opts.NoiseFloor))
			} else {
				vals[o] = math.Exp(mu[o] + k*sd[o] + addU)
			}
		}
		for j, b := range m.batches {
			if found && best.eval.Feasible && lowerThroughput(bud, m.trainBatch, b, vals[0], vals[2+j], best.eval.ThroughputSPS) {
				continue // cannot beat a feasible best: skip the constraint checks
			}
			e := fastEval(bud, m.trainBatch, b, fills[j], vals[0], vals[1], vals[2+j], vals[2+nb+j])
			if !found || e.Better(best.eval) {
				best, found = candidate{pos: i, batch: b, eval: e, measured: isMeas}, true
			}
		}
	}
	return best, found
}

// derate writes exp(μ + s·σ) per output: s = SafetySigmas (σ ≥ NoiseFloor) for a
// profiled mode, MarginSigmas for an unprofiled one.
func (m *ALSModel) derate(dst, mu, sd []float64, measured bool) {
	for o := range dst {
		if measured {
			dst[o] = math.Exp(mu[o] + m.opts.SafetySigmas*max(sd[o], m.opts.NoiseFloor))
		} else {
			dst[o] = math.Exp(mu[o] + m.opts.MarginSigmas*sd[o])
		}
	}
}
func (m *ALSModel) campaignMeasured(i int) bool { return m.inData[i] }

// meanEval is model v1 at the posterior mean (no margin): the expected outcome.
func (m *ALSModel) meanEval(model *plan.Model, i, batch int, post map[int]posterior) plan.Eval {
	mu, _ := m.at(i, post)
	nb := len(m.batches)
	j, _ := slices.BinarySearch(m.batches, batch)
	return model.Evaluate(m.modes[i],
		plan.TrainPoint{Batch: m.trainBatch, TimeMS: math.Exp(mu[0]), PowerMW: math.Exp(mu[1])},
		plan.InferPoint{Batch: batch, TimeMS: math.Exp(mu[2+j]), PowerMW: math.Exp(mu[2+nb+j])})
}

// lowerThroughput reports whether a configuration's training throughput (as fastEval
// computes it) is strictly below bestSPS.
func lowerThroughput(b plan.Budgets, trainBatch, batch int, tT, tI, bestSPS float64) bool {
	rho := b.RateRPS * (tI / 1000) / float64(batch)
	return max(0, 1-rho)*float64(trainBatch)/(tT/1000) < bestSPS
}

// fastEval is Model.Evaluate without the map and the mode, for scanning thousands of
// modes per answer; a test checks that it agrees with Evaluate.
func fastEval(b plan.Budgets, trainBatch, batch int, fillMS, tT, pT, tI, pI float64) plan.Eval {
	rho := b.RateRPS * (tI / 1000) / float64(batch)
	e := plan.Eval{Batch: batch, Rho: rho}
	e.LatencyMS = fillMS + tT + tI
	share := min(rho, 1)
	e.PowerMW = share*pI + (1-share)*pT
	e.ThroughputSPS = max(0, 1-rho) * float64(trainBatch) / (tT / 1000)
	exc := [3]float64{e.LatencyMS/b.LatencyMS - 1, e.PowerMW/b.PowerMW - 1, rho/b.RhoMax - 1}
	cons := [3]plan.Constraint{plan.ConstraintLatency, plan.ConstraintPower, plan.ConstraintRho}
	worst := math.Inf(-1)
	for c, x := range exc {
		if x > 0 {
			e.Violation += x
		}
		if x > worst {
			worst, e.Binding = x, cons[c]
		}
	}
	e.Feasible = e.Violation == 0
	return e
}
