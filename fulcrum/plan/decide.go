package plan

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Admission is the room the scheduler's admission test needs beyond model v1's latency
// (docs/design.md §4): it starts a training minibatch only if every waiting request
// still meets its deadline with each expected time raised by DevRel (DevK deviations of
// the turn times, relative to their mean) and MarginMS kept free before the deadline. A
// configuration that fits model v1 but not this room starves training. The zero value
// is no room (the model alone).
type Admission struct {
	MarginMS float64 `json:"margin_ms"`
	DevRel   float64 `json:"dev_rel"`
}

// LatencyMS is the latency the admission test needs for a configuration whose fill
// quantile is fillMS and whose training and inference times are trainMS and inferMS.
// The margin applies only to budgets above twice it, as the controller has always
// applied it (a tiny budget is not made impossible by the margin alone).
func (a Admission) LatencyMS(budgetMS, fillMS, trainMS, inferMS float64) float64 {
	lat := fillMS + (1+a.DevRel)*(trainMS+inferMS)
	if budgetMS > 2*a.MarginMS {
		lat += a.MarginMS
	}
	return lat
}

// Budgets returns b with the latency budget shrunk to what model v1's latency may use
// inside the room: g·(T_train + T_infer) + fill + margin ≤ L is, to within fill's
// share, model v1's test against (L − margin)/g with g = 1 + DevRel. Searchers walk
// against it; the decision itself tests LatencyMS exactly.
func (a Admission) Budgets(b Budgets) Budgets {
	if b.LatencyMS > 2*a.MarginMS {
		b.LatencyMS -= a.MarginMS
	}
	b.LatencyMS /= 1 + a.DevRel
	return b
}

// DefaultConfidence is the probability of meeting every budget that a decision needs
// before it claims a configuration (docs/benchmarks.md "The decision").
const DefaultConfidence = 0.99

// Rules are what a decision needs beyond the budgets: the profiling noise, the
// confidence a claim needs, and the scheduler's admission room. fulcrumd's controller
// holds them from its configuration (control.DecisionRules); `fulcrumctl bench` uses the
// same defaults (flags set them).
type Rules struct {
	NoiseRel   float64   `json:"noise_rel"`  // relative σ of one measurement of a time or power; 0: exact
	Confidence float64   `json:"confidence"` // claim when P(every budget met) ≥ this; 0: DefaultConfidence
	Admission  Admission `json:"admission"`  // the scheduler's room on latency
}

// For returns the decider of these rules for budgets b and the batch sizes.
func (r Rules) For(b Budgets, batches []int) Decider {
	return Decider{Budgets: b, Batches: batches, Rules: r}
}

// confidence is the level a claim needs.
func (r Rules) confidence() float64 {
	if r.Confidence <= 0 {
		return DefaultConfidence
	}
	return r.Confidence
}

// claims reports whether a configuration met every budget with probability p may be
// claimed: the one claim of both deciders.
func (r Rules) claims(p float64) bool { return p >= r.confidence() }

// check lists what is wrong with the rules themselves.
func (r Rules) check() []error {
	var errs []error
	d := r
	if c := d.Confidence; math.IsNaN(c) || c < 0 || c >= 1 {
		errs = append(errs, fmt.Errorf("confidence = %v is out of range: want a probability in (0, 1), e.g. 0.99", c))
	}
	if n := d.NoiseRel; math.IsNaN(n) || n < 0 || n > 1 {
		errs = append(errs, fmt.Errorf("noise = %v is out of range: want a relative standard deviation 0 to 1 (0.03 = 3%%)", n))
	}
	if d.Admission.MarginMS < 0 || d.Admission.DevRel < 0 || math.IsNaN(d.Admission.MarginMS+d.Admission.DevRel) {
		errs = append(errs, fmt.Errorf("admission room margin %v ms, deviation %v: want both ≥ 0", d.Admission.MarginMS, d.Admission.DevRel))
	}
	return errs
}

// phi is the standard normal CDF of a slack measured in standard deviations; an exact
// measurement (sd 0) fits when the slack is not negative.
func phi(slack, sd float64) float64 {
	if sd <= 0 || math.IsInf(sd, 0) {
		if slack >= 0 {
			return 1
		}
		return 0
	}
	return 0.5 * math.Erfc(-slack/sd/math.Sqrt2)
}

// edgeScale is the factor that moves a measured quantity to the value its budget
// leaves it (its σ scales with it); 1 when either is not positive.
func edgeScale(edge, measured float64) float64 {
	if edge <= 0 || measured <= 0 {
		return 1
	}
	return edge / measured
}

// rankKey is what a decision ranks a configuration by.
type rankKey struct{ objective, powerMW, violation, pFeasible float64 }

// ranksAbove is the order of evaluations (Eval.Better, MultiEval.Better) and of the
// decision (Rules.better).
func ranksAbove(ca, cb bool, a, b rankKey) bool {
	if ca != cb {
		return ca
	}
	if ca {
		if a.objective != b.objective {
			return a.objective > b.objective
		}
		return a.powerMW < b.powerMW
	}
	if a.violation != b.violation {
		return a.violation < b.violation
	}
	if a.pFeasible != b.pFeasible {
		return a.pFeasible > b.pFeasible
	}
	return a.powerMW < b.powerMW
}

// ForMulti returns the decider of these rules for several workloads (issue 19): the
// budgets of every stream and the batch sizes the fill quantiles are cached for.
func (r Rules) ForMulti(b MultiBudgets, batches []int) MultiDecider {
	return MultiDecider{Budgets: b, Batches: batches, Rules: r}
}

// MultiDecider is the one decision of docs/design.md §9 (issue 15; several workloads,
// issue 19): the daemon's controller and `fulcrumctl bench` both choose a configuration
// through it (the pair through its view, Decider), from the profiles they hold. A
// profile's values are means of Repeats measurements, each with relative standard
// deviation NoiseRel; every configuration (a mode, a batch size per stream, a training
// turn per job) is scored with each stream's latency, the power mix and the GPU share
// as predicted quantities with their standard deviations (Rules.scoreInto), and claimed
// only when the probability that it meets every budget (with the admission room) is at
// least Confidence. Among the claimable configurations it takes the highest training
// objective as measured; when none is claimable it takes the most likely to fit (the
// controller then pauses training). With one stream and one training job it decides
// exactly as Decider (TestMultiDecideIsDecider).
type MultiDecider struct {
	Budgets MultiBudgets
	Batches []int
	Rules
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

// kept is s, scored into buffers that the next configuration reuses, with slices of its
// own (train are its training turns).
func (s MultiScored) kept(train []TrainPoint) MultiScored {
	s.Streams = slices.Clone(s.Streams)
	s.TrainShares = slices.Clone(s.TrainShares)
	s.TrainSPS = slices.Clone(s.TrainSPS)
	s.MicroBatches = microBatches(train)
	s.LatencyAdmMS = slices.Clone(s.LatencyAdmMS)
	s.PStreams = slices.Clone(s.PStreams)
	return s
}

// scoreInto is the decision's scoring (docs/design.md §9), the one place P(every budget
// met) is computed: for k streams and m jobs here, for the pair through Decider.score.
// e is the model's evaluation of the configuration (train and pts at the mode of a
// profile whose values are means of repeats measurements). latAdm and pStreams, one slot
// per stream, receive each stream's latency with the admission room and its P(within
// budget), and come back in the answer; binding is the term least likely to hold
// (termConstraint).
//
// A stream's measured latency is g·(the longest turn ahead of it + its own service),
// the power the share-weighted mix of every measured power; the training and inference
// times are measured independently, so their errors add as variances, while the fill
// quantile and the margin are computed, not measured (the queue of batches is computed
// from the measured times and moves with them: queueSensitivity). Each σ is taken where the
// measured part would sit exactly on its budget (the test of "the truth is at the
// edge"): σ from the measured value itself is smaller whenever the measurement came out
// low, which let optimistic draws through (1.4% claims at the edge for a 99% confidence,
// TestDecideCalibratedAtTheEdge). Streams' latencies share measured terms (the training
// minibatch ahead of every one), so their events are positively correlated and the
// product of their probabilities is a lower bound of P(all): the claim errs on the safe
// side.
func (r Rules) scoreInto(m *MultiModel, e MultiEval, train []TrainPoint, pts []InferPoint, repeats int, latAdm, pStreams []float64) (s MultiScored, binding int) {
	b := &m.b
	s = MultiScored{MultiEval: e, LatencyAdmMS: latAdm, PStreams: pStreams, PFeasible: 1}
	sd := r.NoiseRel / math.Sqrt(float64(max(repeats, 1))) // relative σ of each profiled mean
	g := 1 + r.Admission.DevRel
	least, at := math.Inf(1), -1
	for i, st := range e.Streams {
		lim := b.Streams[i].LatencyMS
		// fill + wait + own service, with the admission room: the turn that runs counts,
		// a micro-batch's when it is one.
		latAdm[i] = r.Admission.LatencyMS(lim, st.FillMS+st.QueueMS, st.WaitMS, pts[i].TimeMS)
		// The queue is computed from the measured times, so it moves with them: its
		// sensitivities to the turn ahead and to the batches' service times join theirs.
		dqWait, dqServe := m.queueSensitivity(i, pts, e.Streams)
		meas := g*(st.WaitMS+pts[i].TimeMS) + st.QueueMS
		sdLat := sd * math.Hypot(g*st.WaitMS+dqWait, g*pts[i].TimeMS+dqServe) * edgeScale(lim-(latAdm[i]-meas), meas)
		pStreams[i] = phi(lim-latAdm[i], sdLat)
		s.PFeasible *= pStreams[i]
		s.ViolationAdm, least, at = term(s.ViolationAdm, least, at, i, latAdm[i]/lim-1, pStreams[i])
	}
	// The power mix's terms, as the model weighs them.
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
		mix = math.Hypot(mix, (1-share)*e.TrainShares[j]*t.PowerMW)
	}
	pp := phi(b.PowerMW-e.PowerMW, sd*mix*edgeScale(b.PowerMW, e.PowerMW))
	pr := phi(b.RhoMax-e.Rho, sd*b.RhoMax)
	s.PFeasible *= pp
	s.PFeasible *= pr
	k := len(e.Streams)
	s.ViolationAdm, least, at = term(s.ViolationAdm, least, at, k, e.PowerMW/b.PowerMW-1, pp)
	s.ViolationAdm, _, at = term(s.ViolationAdm, least, at, k+1, e.Rho/b.RhoMax-1, pr)
	s.BindingAdm = m.binding(at)
	return s, at
}

// term counts term i's relative excess x (with the admission room) into the violation,
// and makes it the binding one when it is the least likely to hold so far (p; least, at
// term at); among certain ones, the largest relative excess.
func term(violation, least float64, at, i int, x, p float64) (float64, float64, int) {
	if x > 0 {
		violation += x
	}
	if key := p - 1e-9*x; key < least {
		least, at = key, i
	}
	return violation, least, at
}

// Claims reports whether a scored configuration may be claimed (Rules.claims, as the
// pair's view's Decider.Claims).
func (d MultiDecider) Claims(s MultiScored) bool { return d.claims(s.PFeasible) }

// rank is what the decision ranks s by: its training objective.
func (s MultiScored) rank() rankKey {
	return rankKey{s.ObjectiveSPS, s.PowerMW, s.ViolationAdm, s.PFeasible}
}

// better is the decision's ranking of two scored configurations, claimable ones first
// (ranksAbove): MultiDecider's, and the pair view's (Decider) with the pair's
// throughput as the objective.
func (r Rules) better(a, b rankKey) bool {
	return ranksAbove(r.claims(a.pFeasible), r.claims(b.pFeasible), a, b)
}

// ScoreAll scores every configuration of the profiles — every vector of training turns
// and of batch sizes, profile by profile in the decision's order (Decide's) — each with
// slices of its own; a profile the model cannot score offers nothing. Live refinement
// ranks its candidates on it (control/refine.go); with one stream and one job its
// figures and probabilities are Decider.ScoreAll's to the bit.
func (d MultiDecider) ScoreAll(profiles []MultiProfile) ([]MultiScored, error) {
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("decide: %w", err)
	}
	m, err := NewMultiModel(d.Budgets, d.Batches)
	if err != nil {
		return nil, err
	}
	var out []MultiScored
	k := len(m.b.Streams)
	for _, p := range profiles {
		shares := m.shares(len(p.Train))
		streams, sps, latAdm, pStreams := make([]StreamEval, k), make([]float64, len(p.Train)), make([]float64, k), make([]float64, k)
		_ = m.eachTrainCombo(p, func(train []TrainPoint, pts []InferPoint) {
			e, _ := m.evalInto(p.Mode, train, shares, pts, streams, sps)
			s, _ := d.Rules.scoreInto(m, e, train, pts, p.Repeats, latAdm, pStreams)
			out = append(out, s.kept(train))
		})
	}
	return out, nil
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
	k := len(m.b.Streams)
	for _, p := range profiles {
		shares := m.shares(len(p.Train))
		// Every configuration is scored into these; the best so far is copied out.
		streams, sps, latAdm, pStreams := make([]StreamEval, k), make([]float64, len(p.Train)), make([]float64, k), make([]float64, k)
		err := m.eachTrainCombo(p, func(train []TrainPoint, pts []InferPoint) {
			e, _ := m.evalInto(p.Mode, train, shares, pts, streams, sps)
			s, _ := d.Rules.scoreInto(m, e, train, pts, p.Repeats, latAdm, pStreams)
			if d.Claims(s) {
				claimable++
			}
			if n == 0 || d.better(s.rank(), best.rank()) {
				best = s.kept(train)
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
