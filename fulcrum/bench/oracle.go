package bench

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/truthprof"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/search"
)

// oracleRate holds, for one pair and one arrival rate, every configuration's
// budget-independent figures (latency, power, throughput, GPU share), so that the
// oracle for any latency and power budget is one scan over flat slices.
type oracleRate struct {
	pt                *truthprof.PairTruth
	rate, q           float64
	lat, pow, thr, rh []float64 // index (i*TrainChoices()+c)*len(Batches)+j
}

func newOracleRate(pt *truthprof.PairTruth, rateRPS, quantile float64) (*oracleRate, error) {
	// Latency and power budgets do not change these figures; any valid ones will do.
	m, err := plan.NewModel(plan.Budgets{RateRPS: rateRPS, LatencyMS: 1000, PowerMW: 10000, Quantile: quantile}, pt.Batches)
	if err != nil {
		return nil, err
	}
	nb, nc := len(pt.Batches), pt.TrainChoices()
	n := pt.Len() * nc * nb
	o := &oracleRate{pt: pt, rate: rateRPS, q: m.Budgets().Quantile, lat: make([]float64, n), pow: make([]float64, n), thr: make([]float64, n), rh: make([]float64, n)}
	for i := range pt.Len() {
		_, infer := pt.Points(i)
		for c := range nc {
			t := pt.TrainAt(i, c)
			for j := range nb {
				e := m.Evaluate(pt.ModeAt(i), t, infer[j])
				k := (i*nc+c)*nb + j
				o.lat[k], o.pow[k], o.thr[k], o.rh[k] = e.LatencyMS, e.PowerMW, e.ThroughputSPS, e.Rho
			}
		}
	}
	return o, nil
}

// at returns the configuration of flat index k: its mode, training turn and
// inference point.
func (o *oracleRate) at(k int) (int, plan.TrainPoint, plan.InferPoint) {
	nb, nc := len(o.pt.Batches), o.pt.TrainChoices()
	i, c := k/nb/nc, k/nb%nc
	_, infer := o.pt.Points(i)
	return i, o.pt.TrainAt(i, c), infer[k%nb]
}

// best returns the optimum under model's budgets (whose rate and quantile must be the
// oracle's): the feasible configuration with the highest throughput, ties to lower
// power. ok is false when nothing is feasible.
func (o *oracleRate) best(model *plan.Model) (plan.Eval, bool) {
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
		return plan.Eval{}, false
	}
	i, t, ip := o.at(bestK)
	return model.Evaluate(o.pt.ModeAt(i), t, ip), true
}

// Oracle is the exhaustive baseline: the optimum over the noise-free truth of a pair.
// When nothing meets the budgets it returns the least-violating configuration with
// Feasible false (Result.Choice), so that infeasible configurations can be reported.
func Oracle(pt *truthprof.PairTruth, b plan.Budgets) (search.Result, error) {
	model, err := plan.NewModel(b, pt.Batches)
	if err != nil {
		return search.Result{}, fmt.Errorf("oracle: budgets: %w", err)
	}
	o, err := newOracleRate(pt, model.Budgets().RateRPS, model.Budgets().Quantile)
	if err != nil {
		return search.Result{}, fmt.Errorf("oracle: %w", err)
	}
	return o.answer(model), nil
}

func (o *oracleRate) answer(model *plan.Model) search.Result {
	if e, ok := o.best(model); ok {
		return search.Result{Choice: e, Found: true, Feasible: true, Stop: "exhaustive"}
	}
	best := plan.Eval{Violation: math.Inf(1)}
	for k := range o.thr {
		i, t, ip := o.at(k)
		if e := model.Evaluate(o.pt.ModeAt(i), t, ip); e.Better(best) {
			best = e
		}
	}
	return search.Result{Choice: best, Found: true, Feasible: false, Stop: "exhaustive: nothing meets the budgets"}
}

// MarginOracle is the oracle with a safety margin (over every training micro-batch the
// pair's truth has, as the decision chooses among them): it is given the noise-free truth of
// the pair at construction (only the benchmark has it) and claims only configurations
// that still fit with every time and power raised by MarginRel. It profiles nothing: the
// profiler it is handed is ignored. It measures what a margin alone costs, whatever the
// search: the ceiling of any searcher that keeps that margin (benchmark name
// oracle-m<percent>).
type MarginOracle struct {
	pt        *truthprof.PairTruth
	MarginRel float64
	// Admission is the scheduler's room the decision keeps (plan.Rules.Admission): the
	// oracle claims only what fits with it too, so that it is the ceiling of the
	// daemon's decision, not of model v1 alone. Zero: model v1 alone.
	Admission plan.Admission
}

// NewMarginOracle returns the margin oracle of pair pt.
func NewMarginOracle(pt *truthprof.PairTruth, marginRel float64) *MarginOracle {
	return &MarginOracle{pt: pt, MarginRel: marginRel}
}

// Name implements search.Searcher.
func (o *MarginOracle) Name() string {
	return "oracle-m" + strconv.FormatFloat(100*o.MarginRel, 'f', -1, 64)
}

// Search implements search.Searcher.
func (o *MarginOracle) Search(ctx context.Context, p search.Problem, _ search.Profiler) (search.Result, error) {
	pt := o.pt
	if pt == nil {
		return search.Result{}, fmt.Errorf("%s: no ground truth: build it with NewMarginOracle", o.Name())
	}
	model, err := plan.NewModel(p.Budgets, pt.Batches)
	if err != nil {
		return search.Result{}, fmt.Errorf("%s: budgets: %w", o.Name(), err)
	}
	if err := ctx.Err(); err != nil {
		return search.Result{}, err
	}
	up := 1 + o.MarginRel
	var best plan.Eval
	found := false
	// Over the truth's flat slices, as the oracle scans: no profile is copied per mode.
	for i := range pt.Len() {
		m := pt.ModeAt(i)
		_, infer := pt.Points(i)
		for c := range pt.TrainChoices() {
			tt := pt.TrainAt(i, c)
			t := tt
			t.TimeMS, t.PowerMW = t.TimeMS*up, t.PowerMW*up
			for _, ip := range infer {
				raised := ip
				raised.TimeMS, raised.PowerMW = ip.TimeMS*up, ip.PowerMW*up
				re := model.Evaluate(m, t, raised)
				if !re.Feasible || o.Admission.LatencyMS(model.Budgets().LatencyMS, re.LatencyMS-t.TimeMS-raised.TimeMS, t.TimeMS, raised.TimeMS) > model.Budgets().LatencyMS {
					continue
				}
				// Ranked by the true throughput, as the plain oracle ranks.
				if e := model.Evaluate(m, tt, ip); !found || e.Better(best) {
					best, found = e, true
				}
			}
		}
	}
	if !found {
		return search.Result{Stop: "exhaustive: nothing fits with the margin"}, nil
	}
	return search.Result{Choice: best, Found: true, Feasible: true, Stop: "exhaustive with a margin"}, nil
}
