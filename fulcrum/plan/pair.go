package plan

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// ForMulti returns the decider of these rules for several workloads (issue 19): the
// budgets of every stream and the batch sizes the fill quantiles are cached for.
func (r Rules) ForMulti(b MultiBudgets, batches []int) MultiDecider {
	return MultiDecider{Budgets: b, Batches: batches, Rules: r}
}

// MultiDecider is Decider for several inference streams and training jobs (model v1 for
// several workloads, docs/design.md §2): every configuration (a mode and a batch size per
// stream) is scored with each stream's latency, the power mix and the GPU share as
// predicted quantities with their standard deviations, claimed when P(every budget met)
// ≥ Confidence, and the claimable one with the highest training objective wins. With
// one stream and one training job it decides exactly as Decider (TestMultiDecideIsDecider).
type MultiDecider struct {
	Budgets MultiBudgets
	Batches []int
	Rules
	// LatencyRatio is, per stream in stream order, the ratio of its measured p99 to the
	// model's prediction that the decision expects at every configuration (what fulcrumd's
	// controller learned where a stream broke its budget): each stream's latency terms are
	// scaled by it before the admission room is added. Missing or below 1 counts as 1.
	LatencyRatio []float64
}

// ratio is stream i's latency ratio (≥ 1).
func (d MultiDecider) ratio(i int) float64 {
	if i < len(d.LatencyRatio) && d.LatencyRatio[i] > 1 {
		return d.LatencyRatio[i]
	}
	return 1
}

// MultiScored is one configuration as a MultiDecider sees it.
type MultiScored struct {
	MultiEval
	// LatencyAdmMS is each stream's latency with the admission room, in stream order.
	LatencyAdmMS []float64
	// PStreams is each stream's P(latency within its budget).
	PStreams  []float64
	PFeasible float64 // P(every budget met)
	// ViolationAdm is the sum of relative excesses with the admission room.
	ViolationAdm float64
	// BindingAdm is the constraint (and stream) least likely to hold.
	BindingAdm MultiBinding
}

// MultiDecision is a MultiDecider's answer.
type MultiDecision struct {
	MultiPlan
	PFeasible    float64   `json:"p_feasible"`
	PStreams     []float64 `json:"p_streams"`      // per stream, P(its latency within budget)
	LatencyAdmMS []float64 `json:"latency_adm_ms"` // per stream, with the admission room
	Candidates   int       `json:"candidates"`     // claimable configurations
	Confidence   float64   `json:"confidence"`
}

// Validate rejects a decider that cannot decide: bad budgets or rules.
func (d MultiDecider) Validate() error {
	var errs []error
	if err := d.Budgets.WithDefaults().Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, d.Rules.check()...)
	return errors.Join(errs...)
}

func (d MultiDecider) confidence() float64 {
	if d.Confidence <= 0 {
		return DefaultConfidence
	}
	return d.Confidence
}

// score scores one configuration. Each term is Decider.score's, generalised: a stream's
// measured latency is g·(the longest turn ahead of it + its own service), the power the
// share-weighted mix of every measured power; each σ is taken at the budget edge.
// Streams' latencies share measured terms (the training minibatch ahead of every one),
// so their events are positively correlated and the product of their probabilities is a
// lower bound of P(all): the claim errs on the safe side.
func (d MultiDecider) score(m *MultiModel, p MultiProfile, train []TrainPoint, shares []float64, pts []InferPoint) MultiScored {
	b := m.b
	e := m.evaluate(p.Mode, train, shares, pts)
	e.Streams = slices.Clone(e.Streams)
	e.TrainSPS = slices.Clone(e.TrainSPS)
	e.MicroBatches = slices.Clone(e.MicroBatches)
	e.TrainShares = slices.Clone(shares)
	s := MultiScored{MultiEval: e, LatencyAdmMS: make([]float64, len(pts)), PStreams: make([]float64, len(pts))}
	sd := d.NoiseRel / math.Sqrt(float64(max(p.Repeats, 1)))
	g := 1 + d.Admission.DevRel
	type term struct {
		c      Constraint
		stream string
		x, p   float64
	}
	var terms []term
	s.PFeasible = 1
	for i, st := range e.Streams {
		lim := b.Streams[i].LatencyMS
		// k·(fill + wait + own service): the model's latency as the stream measured it
		// (k = 1 exactly without a learned ratio, so the single-pair terms are unchanged).
		k := d.ratio(i)
		s.LatencyAdmMS[i] = d.Admission.LatencyMS(lim, k*st.FillMS, k*st.WaitMS, k*pts[i].TimeMS)
		meas := g * k * (st.WaitMS + pts[i].TimeMS)
		sdLat := g * sd * k * math.Hypot(st.WaitMS, pts[i].TimeMS) * edgeScale(lim-(s.LatencyAdmMS[i]-meas), meas)
		s.PStreams[i] = phi(lim-s.LatencyAdmMS[i], sdLat)
		s.PFeasible *= s.PStreams[i]
		terms = append(terms, term{ConstraintLatency, st.Name, s.LatencyAdmMS[i]/lim - 1, s.PStreams[i]})
	}
	// The power mix's terms, as evaluate weighs them; Hypot folds them so that one
	// stream and one job give Decider's value to the bit.
	share := min(e.Rho, 1)
	var mix float64
	for i, ip := range pts {
		ri := e.Streams[i].Rho
		if e.Rho > 1 {
			ri /= e.Rho
		}
		mix = math.Hypot(mix, ri*ip.PowerMW)
	}
	for j, t := range train {
		mix = math.Hypot(mix, (1-share)*shares[j]*t.PowerMW)
	}
	pp := phi(b.PowerMW-e.PowerMW, sd*mix*edgeScale(b.PowerMW, e.PowerMW))
	pr := phi(b.RhoMax-e.Rho, sd*b.RhoMax)
	s.PFeasible *= pp * pr
	terms = append(terms, term{ConstraintPower, "", e.PowerMW/b.PowerMW - 1, pp}, term{ConstraintRho, "", e.Rho/b.RhoMax - 1, pr})
	least := math.Inf(1)
	for _, x := range terms {
		if x.x > 0 {
			s.ViolationAdm += x.x
		}
		if key := x.p - 1e-9*x.x; key < least {
			least, s.BindingAdm = key, MultiBinding{Constraint: x.c, Stream: x.stream}
		}
	}
	return s
}

// Claims reports whether a scored configuration may be claimed.
func (d MultiDecider) Claims(s MultiScored) bool { return s.PFeasible >= d.confidence() }

// better is Decider.better with the training objective in place of the throughput.
func (d MultiDecider) better(a, b MultiScored) bool {
	return ranksAbove(d.Claims(a), d.Claims(b),
		rankKey{a.ObjectiveSPS, a.PowerMW, a.ViolationAdm, a.PFeasible},
		rankKey{b.ObjectiveSPS, b.PowerMW, b.ViolationAdm, b.PFeasible})
}

// Decide chooses over every profiled mode and every batch vector, jointly. Best carries
// the model's figures against the exact budgets, with Feasible set only when claimed.
func (d MultiDecider) Decide(profiles []MultiProfile) (MultiDecision, error) {
	if err := d.Validate(); err != nil {
		return MultiDecision{}, fmt.Errorf("decide: %w", err)
	}
	if len(profiles) == 0 {
		return MultiDecision{}, errNoProfiles
	}
	m, err := NewMultiModel(d.Budgets, d.Batches)
	if err != nil {
		return MultiDecision{}, err
	}
	var best MultiScored
	n, claimable := 0, 0
	for _, p := range profiles {
		shares := m.shares(len(p.Train))
		err := m.eachTrainCombo(p, func(train []TrainPoint, pts []InferPoint) {
			s := d.score(m, p, train, shares, pts)
			if d.Claims(s) {
				claimable++
			}
			if n == 0 || d.better(s, best) {
				best = s
			}
			n++
		})
		if err != nil {
			return MultiDecision{}, fmt.Errorf("decide: %w", err)
		}
	}
	ok := d.Claims(best)
	e := best.MultiEval
	e.Feasible = ok
	out := MultiDecision{MultiPlan: MultiPlan{Best: e, Feasible: ok}, PFeasible: best.PFeasible, PStreams: best.PStreams,
		LatencyAdmMS: best.LatencyAdmMS, Candidates: claimable, Confidence: d.confidence()}
	if !ok {
		out.Binding, out.Best.Binding = best.BindingAdm, best.BindingAdm
	}
	return out, nil
}
