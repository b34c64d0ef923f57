package bench

import (
)

// oracleRate holds, for one pair and one arrival rate, every configuration's
// budget-independent figures (latency, power, throughput, GPU share), so that the
// oracle for any latency and power budget is one scan over flat slices.
type oracleRate struct {
	pt                *PairTruth
	rate, q           float64
	lat, pow, thr, rh []float64 // index i*len(Batches)+j
}

func newOracleRate(pt *PairTruth, rateRPS, quantile float64) (*oracleRate, error) {
	// Latency and power budgets do not change these figures; any valid ones will do.
	m, err := NewModel(Budgets{RateRPS: rateRPS, LatencyMS: 1000, PowerMW: 10000, Quantile: quantile}, pt.Batches)
	if err != nil {
		return nil, err
	}
	n := len(pt.infer)
	o := &oracleRate{pt: pt, rate: rateRPS, q: m.Budgets().Quantile, lat: make([]float64, n), pow: make([]float64, n), thr: make([]float64, n), rh: make([]float64, n)}
	nb := len(pt.Batches)
	for i := range pt.modes {
		for j := range nb {
			e := m.Evaluate(pt.modes[i], pt.train[i], pt.infer[i*nb+j])
			k := i*nb + j
			o.lat[k], o.pow[k], o.thr[k], o.rh[k] = e.LatencyMS, e.PowerMW, e.ThroughputSPS, e.Rho
		}
	}
	return o, nil
}

// best returns the optimum under model's budgets (whose rate and quantile must be the
// oracle's): the feasible configuration with the highest throughput, ties to lower
// power. ok is false when nothing is feasible.
func (o *oracleRate) best(model *Model) (Eval, bool) {
	b := model.Budgets()
	bestK := -1
	for k := range o.thr {
		// The same tests as Model.Evaluate, so the two agree at the budget edges.
		if o.lat[k]/b.LatencyMS-1 > 0 || o.pow[k]/b.PowerMW-1 > 0 || o.rh[k]/b.RhoMax-1 > 0 {
			continue
		}
		if bestK < 0 || o.thr[k] > o.thr[bestK] || (o.thr[k] == o.thr[bestK] && o.pow[k] < o.pow[bestK]) {
			bestK = k
		}
	}
	if bestK < 0 {
		return Eval{}, false
	}
	i := bestK / len(o.pt.Batches)
	return model.Evaluate(o.pt.modes[i], o.pt.train[i], o.pt.infer[bestK]), true
}

// Oracle is the exhaustive baseline: the optimum over the noise-free truth of a pair.
// When nothing meets the budgets it returns the least-violating configuration with
// Feasible false (Result.Choice), so that infeasible configurations can be reported.
func Oracle(pt *PairTruth, b Budgets) (Result, error) {
	model, err := NewModel(b, pt.Batches)
	if err != nil {
		return Result{}, fmt.Errorf("oracle: budgets: %w", err)
	}
	o, err := newOracleRate(pt, model.Budgets().RateRPS, model.Budgets().Quantile)
	if err != nil {
		return Result{}, fmt.Errorf("oracle: %w", err)
	}
	return o.answer(model), nil
}

func (o *oracleRate) answer(model *Model) Result {
	if e, ok := o.best(model); ok {
		return Result{Choice: e, Found: true, Feasible: true, Stop: "exhaustive"}
	}
	best := Eval{Violation: math.Inf(1)}
	nb := len(o.pt.Batches)
	for i := range o.pt.modes {
		for j := range nb {
			if e := model.Evaluate(o.pt.modes[i], o.pt.train[i], o.pt.infer[i*nb+j]); e.Better(best) {
				best = e
			}
		}
	}
	return Result{Choice: best, Found: true, Feasible: false, Stop: "exhaustive: nothing meets the budgets"}
}

// MarginOracle is the oracle with a safety margin: it knows the noise-free truth (it
// needs a profiler that holds one, such as TruthProfiler) but claims only configurations
// that still fit with every time and power raised by MarginRel. It profiles nothing.
// It measures what a margin alone costs, whatever the search: the ceiling of any
// searcher that keeps that margin (benchmark name oracle-m<percent>).
type MarginOracle struct {
	MarginRel float64
}

// Name implements Searcher.
func (o MarginOracle) Name() string {
	return "oracle-m" + strconv.FormatFloat(100*o.MarginRel, 'f', -1, 64)
}

// Search implements Searcher.
func (o MarginOracle) Search(ctx context.Context, p Problem, prof Profiler) (Result, error) {
	tp, ok := prof.(interface{ Truth() *PairTruth })
	if !ok {
		return Result{}, fmt.Errorf("%s: needs the noise-free truth; run it in fulcrumctl bench", o.Name())
	}
	pt := tp.Truth()
	model, err := NewModel(p.Budgets, pt.Batches)
	if err != nil {
		return Result{}, fmt.Errorf("%s: budgets: %w", o.Name(), err)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	up := 1 + o.MarginRel
	nb := len(pt.Batches)
	var best Eval
	found := false
	// Over the flat slices, as the oracle scans: no profile is copied per mode.
	for i, m := range pt.modes {
		t := pt.train[i]
		t.TimeMS, t.PowerMW = t.TimeMS*up, t.PowerMW*up
		for _, ip := range pt.infer[i*nb : (i+1)*nb] {
			raised := ip
			raised.TimeMS, raised.PowerMW = ip.TimeMS*up, ip.PowerMW*up
			if !model.Evaluate(m, t, raised).Feasible {
				continue
			}
			// Ranked by the true throughput, as the plain oracle ranks.
			if e := model.Evaluate(m, pt.train[i], ip); !found || e.Better(best) {
				best, found = e, true
			}
		}
	}
	if !found {
		return Result{Stop: "exhaustive: nothing fits with the margin"}, nil
	}
	return Result{Choice: best, Found: true, Feasible: true, Stop: "exhaustive with a margin"}, nil
}
