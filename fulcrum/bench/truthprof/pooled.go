package truthprof

import (
	"context"
	"fmt"
	"slices"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// PooledProfiler is the search.Profiler a pair searcher walks for several streams, as
// fulcrumd's live search does (control.pooledLive): each mode asked for is measured for
// every workload (MultiTruth.MeasureRep, noise per repeat), kept as a plan.MultiProfile for
// the joint decision, and answered as plan.PooledPair at the streams' rates. Remeasure
// pools repeats as TruthProfiler does. Count counts one profile per workload measured
// beyond the pair (a mode of k streams and m jobs counts k+m−1), as the daemon's live
// profiler spends them. Not safe for concurrent use.
type PooledProfiler struct {
	mt    *MultiTruth
	noise float64
	base  uint64
	rates []float64
	// weights are the jobs' time-share weights (nil: equal, as the bench shares them).
	weights []float64
	reps    map[powermode.Mode]uint64
	sums    map[powermode.Mode]plan.MultiProfile
	known   map[powermode.Mode]plan.MultiProfile
	order   []powermode.Mode
	count   int
}

// NewPooledProfiler measures mt's workloads with noise (relative standard deviation)
// seeded by base, pooling its streams at rates (one per stream).
func NewPooledProfiler(mt *MultiTruth, noise float64, base uint64, rates []float64) (*PooledProfiler, error) {
	if len(rates) != len(mt.Infers) {
		return nil, fmt.Errorf("pooled profiler: %d rates for %d streams", len(rates), len(mt.Infers))
	}
	return &PooledProfiler{mt: mt, noise: noise, base: base, rates: slices.Clone(rates), reps: map[powermode.Mode]uint64{},
		sums: map[powermode.Mode]plan.MultiProfile{}, known: map[powermode.Mode]plan.MultiProfile{}}, nil
}

func (p *PooledProfiler) cost() int { return len(p.mt.Infers) + len(p.mt.Trains) - 1 }

// Profile implements search.Profiler.
func (p *PooledProfiler) Profile(ctx context.Context, m powermode.Mode) (plan.ModeProfile, error) {
	if err := ctx.Err(); err != nil {
		return plan.ModeProfile{}, err
	}
	if mp, ok := p.known[m]; ok {
		return plan.PooledPair(mp, p.rates, p.weights), nil
	}
	mp, err := p.measure(m)
	if err != nil {
		return plan.ModeProfile{}, err
	}
	p.known[m] = mp
	p.order = append(p.order, m)
	return plan.PooledPair(mp, p.rates, p.weights), nil
}

// Remeasure implements search.Remeasurer: a new measurement of every workload at m,
// returned alone (pooled); Known and Multi then hold the mean of the repeats.
func (p *PooledProfiler) Remeasure(ctx context.Context, m powermode.Mode) (plan.ModeProfile, error) {
	if err := ctx.Err(); err != nil {
		return plan.ModeProfile{}, err
	}
	mp, err := p.measure(m)
	if err != nil {
		return plan.ModeProfile{}, err
	}
	sum := p.sums[m]
	plan.AddMultiRepeat(&sum, mp)
	p.sums[m] = sum
	mean := plan.MultiRepeatMean(sum)
	if _, had := p.known[m]; !had {
		p.order = append(p.order, m)
	}
	p.known[m] = mean
	return plan.PooledPair(mp, p.rates, p.weights), nil
}

func (p *PooledProfiler) measure(m powermode.Mode) (plan.MultiProfile, error) {
	r := p.reps[m]
	mp, err := p.mt.MeasureRep(m, p.noise, p.base, r)
	if err != nil {
		return plan.MultiProfile{}, err
	}
	p.reps[m] = r + 1
	p.count += p.cost()
	return mp, nil
}

// Known implements search.Profiler: every mode measured so far, pooled.
func (p *PooledProfiler) Known() []plan.ModeProfile {
	out := make([]plan.ModeProfile, 0, len(p.order))
	for _, m := range p.order {
		out = append(out, plan.PooledPair(p.known[m], p.rates, p.weights))
	}
	return out
}

// Multi returns every mode measured so far for every workload (repeats pooled), for the
// joint decision.
func (p *PooledProfiler) Multi() []plan.MultiProfile {
	out := make([]plan.MultiProfile, 0, len(p.order))
	for _, m := range p.order {
		out = append(out, p.known[m])
	}
	return out
}

// Count is the profiles spent: k+m−1 per mode measured (repeats included).
func (p *PooledProfiler) Count() int { return p.count }

// Fork returns a profiler that knows every mode p knows (free, not counted) and measures
// new ones with its own noise seed base: one per budget configuration of a campaign.
func (p *PooledProfiler) Fork(base uint64) *PooledProfiler {
	f := &PooledProfiler{mt: p.mt, noise: p.noise, base: base, rates: slices.Clone(p.rates), reps: map[powermode.Mode]uint64{},
		sums: map[powermode.Mode]plan.MultiProfile{}, known: make(map[powermode.Mode]plan.MultiProfile, len(p.known)), order: slices.Clone(p.order)}
	for m, mp := range p.known {
		f.known[m] = mp
		f.reps[m] = p.reps[m]
	}
	return f
}
