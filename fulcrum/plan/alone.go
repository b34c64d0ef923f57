package plan

import (
	"math"
	"slices"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// ServeAlone scores the streams at p's mode with training paused and returns the batch
// vector that serves them best there: what the controller runs while no configuration
// meets the budgets with training (docs/design.md §2 "Serving alone"). Each stream's
// p99 is model v1's with no training turn ahead — fill + the longest other stream's
// batch + the queue of batches + its own batch —, the power an upper bound: the streams'
// time-weighted power plus the idle share at the least power measured at the mode (the
// profiles hold no idle power; a board waiting for the next batch draws no more than it
// did running any of the measured turns there). Training throughput is 0. The order (AloneBetter): within every budget
// first, then the lowest worst latency as a share of its budget (the most room for what
// the model does not see), then the lower power; among the rest, the smaller violation.
func (m *MultiModel) ServeAlone(p MultiProfile) (MultiEval, error) {
	var best MultiEval
	n := 0
	idle := idleBoundMW(p)
	err := m.eachCombo(p, func(pts []InferPoint) {
		if e := m.evalAlone(p.Mode, pts, idle); n == 0 || m.AloneBetter(e, best) {
			best = e
		}
		n++
	})
	if err != nil {
		return MultiEval{}, err
	}
	return best, nil
}

// EvaluateAlone scores the profile at the given batch size per stream (in stream order)
// with training paused, as ServeAlone does.
func (m *MultiModel) EvaluateAlone(p MultiProfile, batches []int) (MultiEval, error) {
	pts, err := m.pointsAt(p, batches)
	if err != nil {
		return MultiEval{}, err
	}
	return m.evalAlone(p.Mode, pts, idleBoundMW(p)), nil
}

// idleBoundMW bounds the board's power at p's mode with the GPU idle: the least power
// measured there, over every training turn and inference batch.
func idleBoundMW(p MultiProfile) float64 {
	low := math.Inf(1)
	for _, t := range p.Train {
		low = min(low, t.PowerMW)
	}
	for _, ts := range p.Micro {
		for _, t := range ts {
			low = min(low, t.PowerMW)
		}
	}
	for _, ips := range p.Infer {
		for _, ip := range ips {
			low = min(low, ip.PowerMW)
		}
	}
	return low
}

// evalAlone is evalInto with no training job: a fresh MultiEval (it keeps nothing of pts).
func (m *MultiModel) evalAlone(mode powermode.Mode, pts []InferPoint, idleMW float64) MultiEval {
	b := &m.b
	streams := make([]StreamEval, len(pts))
	e := MultiEval{Mode: mode, Streams: streams}
	for i, ip := range pts {
		rho := b.Streams[i].RateRPS * (ip.TimeMS / 1000) / float64(ip.Batch)
		streams[i] = StreamEval{Name: b.Streams[i].Name, Batch: ip.Batch, Rho: rho, FillMS: m.fill(i, ip.Batch)}
		e.Rho += rho
	}
	m.latencies(pts, streams, 0) // no training turn ahead
	share := min(e.Rho, 1)
	for i, ip := range pts {
		ri := streams[i].Rho
		if e.Rho > 1 {
			ri /= e.Rho
		}
		e.PowerMW += ri * ip.PowerMW
	}
	e.PowerMW += (1 - share) * idleMW
	m.judge(&e)
	return e
}

// AloneBetter reports whether e serves the streams better than o with training paused
// (ServeAlone's order): within every budget first; then the lower worst latency as a
// share of its stream's budget, ties to lower power; among configurations over a budget,
// the smaller violation, ties to lower power.
func (m *MultiModel) AloneBetter(e, o MultiEval) bool {
	if e.Feasible != o.Feasible {
		return e.Feasible
	}
	if !e.Feasible && e.Violation != o.Violation {
		return e.Violation < o.Violation
	}
	if we, wo := m.WorstLatencyShare(e), m.WorstLatencyShare(o); e.Feasible && we != wo {
		return we < wo
	}
	return e.PowerMW < o.PowerMW
}

// WorstLatencyShare is the largest of e's streams' predicted p99 over their budgets.
func (m *MultiModel) WorstLatencyShare(e MultiEval) float64 {
	return slices.Max(slices.Collect(func(yield func(float64) bool) {
		for i, s := range e.Streams {
			if !yield(s.LatencyMS / m.b.Streams[i].LatencyMS) {
				return
			}
		}
	}))
}
