package plan

import (
	"errors"
	"fmt"
	"math"
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

// Decider is the one decision of docs/design.md §9 (issue 15): the daemon's controller
// and `fulcrumctl bench` both choose a configuration through it, from the profiles they
// hold. A profile's values are means of Repeats measurements, each with relative
// standard deviation NoiseRel; the decision combines each constraint's terms into one
// predicted quantity with its standard deviation and claims a configuration only when
// the probability that it meets every budget (with the admission room) is at least
// Confidence. Among the claimable configurations it takes the highest training
// throughput as measured; when none is claimable it takes the most likely to fit (the
// controller then pauses training).
type Decider struct {
	Budgets Budgets // the exact budgets (model v1, complete)
	Batches []int   // inference batch sizes the fill quantiles are cached for
	Rules
}

// Decision is a Decider's answer.
type Decision struct {
	Plan
	// PFeasible is the probability, under the noise model, that Best meets every budget
	// with the admission room.
	PFeasible float64 `json:"p_feasible"`
	// LatencyAdmMS is Best's latency as the admission test sees it (≥ Best.LatencyMS).
	LatencyAdmMS float64 `json:"latency_adm_ms"`
	// Candidates is how many configurations were claimable.
	Candidates int `json:"candidates"`
	// Confidence is the level a claim needed.
	Confidence float64 `json:"confidence"`
}

// Explain is Plan.Explain with the probability behind the claim.
func (d Decision) Explain(b Budgets) string {
	return fmt.Sprintf("%s; P(every budget met) %.1f%% (a claim needs %g%%)", d.Plan.Explain(b), 100*d.PFeasible, 100*d.Confidence)
}

// Scored is one configuration as a Decider sees it.
type Scored struct {
	Eval                 // model v1's figures against the exact budgets
	LatencyAdmMS float64 // latency with the admission room
	PFeasible    float64 // P(latency, power and GPU share all within budget)
	// ViolationAdm is the sum of relative excesses with the admission room (0 when it
	// fits as measured).
	ViolationAdm float64
	// BindingAdm is the constraint least likely to hold.
	BindingAdm Constraint
}

// Model returns the exact model the decider scores with.
func (d Decider) model() (*Model, error) { return NewModel(d.Budgets, d.Batches) }

func (d Decider) confidence() float64 {
	if d.Confidence <= 0 {
		return DefaultConfidence
	}
	return d.Confidence
}

// Validate rejects a decider that cannot decide: bad budgets, a confidence outside
// (0, 1), a negative noise or admission room.
func (d Decider) Validate() error {
	var errs []error
	if err := d.Budgets.WithDefaults().Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, d.Rules.check()...)
	return errors.Join(errs...)
}

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

// Score scores one configuration: training turn t (the whole minibatch or a micro-batch)
// and inference point ip at the mode of p.
func (d Decider) score(m *Model, p ModeProfile, t TrainPoint, ip InferPoint) Scored {
	b := m.Budgets()
	e := m.Evaluate(p.Mode, t, ip)
	s := Scored{Eval: e}
	n := float64(max(p.Repeats, 1))
	sd := d.NoiseRel / math.Sqrt(n) // relative σ of each profiled mean
	g := 1 + d.Admission.DevRel
	fill := m.fill(ip.Batch)
	// The admission room counts the turn that runs: a micro-batch's, when t is one.
	s.LatencyAdmMS = d.Admission.LatencyMS(b.LatencyMS, fill, t.TimeMS, ip.TimeMS)
	// The training and inference times are measured independently: their errors add as
	// variances. The fill quantile and the margin are computed, not measured. Each σ is
	// taken where the measured part would sit exactly on its budget (the test of "the
	// truth is at the edge"): σ from the measured value itself is smaller whenever the
	// measurement came out low, which let optimistic draws through (1.4% claims at the
	// edge for a 99% confidence, TestDecideCalibratedAtTheEdge).
	measLat := g * (t.TimeMS + ip.TimeMS)
	sdLat := g * sd * math.Hypot(t.TimeMS, ip.TimeMS) * edgeScale(b.LatencyMS-(s.LatencyAdmMS-measLat), measLat)
	share := min(e.Rho, 1)
	sdPow := sd * math.Hypot(share*ip.PowerMW, (1-share)*t.PowerMW) * edgeScale(b.PowerMW, e.PowerMW)
	sdRho := sd * b.RhoMax
	pl := phi(b.LatencyMS-s.LatencyAdmMS, sdLat)
	pp := phi(b.PowerMW-e.PowerMW, sdPow)
	pr := phi(b.RhoMax-e.Rho, sdRho)
	s.PFeasible = pl * pp * pr
	exc := []struct {
		c Constraint
		x float64
		p float64
	}{
		{ConstraintLatency, s.LatencyAdmMS/b.LatencyMS - 1, pl},
		{ConstraintPower, e.PowerMW/b.PowerMW - 1, pp},
		{ConstraintRho, e.Rho/b.RhoMax - 1, pr},
	}
	least := math.Inf(1)
	for _, x := range exc {
		if x.x > 0 {
			s.ViolationAdm += x.x
		}
		// The least likely to hold; among certain ones, the largest relative excess.
		if key := x.p - 1e-9*x.x; key < least {
			least, s.BindingAdm = key, x.c
		}
	}
	return s
}

// ScoreAll scores every configuration of the profiles.
func (d Decider) ScoreAll(profiles []ModeProfile) ([]Scored, error) {
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("decide: %w", err)
	}
	m, err := d.model()
	if err != nil {
		return nil, err
	}
	var out []Scored
	for _, p := range profiles {
		for _, t := range p.TrainChoices() {
			for _, ip := range p.Infer {
				out = append(out, d.score(m, p, t, ip))
			}
		}
	}
	return out, nil
}

// Claims reports whether a scored configuration may be claimed.
func (d Decider) Claims(s Scored) bool { return s.PFeasible >= d.confidence() }

// better ranks two scored configurations for the decision: claimable first, then the
// higher training throughput (ties: lower power); among unclaimable ones the one that
// fits as measured, then the more likely to fit, then the smaller excess, then lower
// power.
func (d Decider) better(a, b Scored) bool {
	return ranksAbove(d.Claims(a), d.Claims(b),
		rankKey{a.ThroughputSPS, a.PowerMW, a.ViolationAdm, a.PFeasible},
		rankKey{b.ThroughputSPS, b.PowerMW, b.ViolationAdm, b.PFeasible})
}

// rankKey is what a decision ranks a configuration by.
type rankKey struct{ objective, powerMW, violation, pFeasible float64 }

// ranksAbove is the decision's order (Decider.better, MultiDecider.better).
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

// Decide chooses over the profiles. The answer's Best carries model v1's figures
// against the exact budgets, with Feasible set only when it is claimed; Binding names
// the constraint least likely to hold when it is not.
func (d Decider) Decide(profiles []ModeProfile) (Decision, error) {
	all, err := d.ScoreAll(profiles)
	if err != nil {
		return Decision{}, err
	}
	if len(all) == 0 {
		return Decision{}, errNoProfiles
	}
	best, claimable := all[0], 0
	for _, s := range all {
		if d.Claims(s) {
			claimable++
		}
		if d.better(s, best) {
			best = s
		}
	}
	return d.decision(best, claimable), nil
}

func (d Decider) decision(s Scored, claimable int) Decision {
	e := s.Eval
	ok := d.Claims(s)
	e.Feasible = ok
	if !ok {
		e.Binding = s.BindingAdm
	}
	out := Decision{Plan: Plan{Best: e, Feasible: ok}, PFeasible: s.PFeasible, LatencyAdmMS: s.LatencyAdmMS, Candidates: claimable, Confidence: d.confidence()}
	if !ok {
		out.Binding = s.BindingAdm
	}
	return out
}
