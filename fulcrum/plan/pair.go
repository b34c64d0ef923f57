package plan

import (
	"errors"
	"fmt"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// The pair-shaped view of the model and of the decision: one training job and one
// inference stream, as the pair searchers (GMD, ALS), the pair bench and the daemon's
// pair path speak. Nothing here computes a figure or a probability of its own: Model
// evaluates through MultiModel.evalInto and Decider scores through Rules.scoreInto with
// k = m = 1, on arrays on the stack (no allocation per configuration), so the pair is
// the several-workload model's and decision's k = m = 1 case by construction.

// Eval is one configuration (mode, inference batch) of the pair, scored by the model.
type Eval struct {
	Mode  powermode.Mode `json:"mode"`
	Batch int            `json:"batch"`
	// MicroBatch is the training micro-batch size when each minibatch runs as several
	// turns (issue 32); 0 when it runs as one turn (k = 1).
	MicroBatch int     `json:"micro_batch,omitempty"`
	Rho        float64 `json:"rho"`
	LatencyMS  float64 `json:"latency_ms"`
	// QueueMS is the part of LatencyMS spent queued behind earlier inference batches
	// (StreamEval.QueueMS).
	QueueMS       float64 `json:"queue_ms,omitempty"`
	PowerMW       float64 `json:"power_mw"`
	ThroughputSPS float64 `json:"throughput_sps"` // training samples per second
	Feasible      bool    `json:"feasible"`
	// Violation is the sum of relative excesses over the budgets (0 when feasible).
	Violation float64 `json:"violation"`
	// Binding is the constraint with the largest relative excess (infeasible), or the one
	// with the least relative slack (feasible).
	Binding Constraint `json:"binding,omitempty"`
}

// Better reports whether e beats o: feasible first, then higher throughput, ties to lower
// power; among infeasible ones, smaller violation, then lower power (MultiEval.Better's
// order).
func (e Eval) Better(o Eval) bool {
	return ranksAbove(e.Feasible, o.Feasible, rankKey{objective: e.ThroughputSPS, powerMW: e.PowerMW, violation: e.Violation},
		rankKey{objective: o.ThroughputSPS, powerMW: o.PowerMW, violation: o.Violation})
}

// Model is the model for one training job and one stream with fixed budgets: a view of a
// MultiModel of one stream, which caches the batch-fill quantiles (they depend only on λ,
// q and b), so it is cheap to call over thousands of modes. A Model is immutable and
// safe for concurrent use.
type Model struct {
	b  Budgets
	mm *MultiModel // one stream, the pair's
}

// NewModel validates the budgets (after defaults) and precomputes fill quantiles.
func NewModel(b Budgets, batches []int) (*Model, error) {
	b = b.WithDefaults()
	if err := b.Validate(); err != nil {
		return nil, err
	}
	mm, err := newMultiModel(pairBudgets(b), batches)
	if err != nil {
		return nil, err
	}
	return &Model{b: b, mm: mm}, nil
}

// pairBudgets are b as the budgets of one stream (validated by the caller).
func pairBudgets(b Budgets) MultiBudgets {
	return MultiBudgets{Streams: []StreamBudget{{RateRPS: b.RateRPS, LatencyMS: b.LatencyMS}}, PowerMW: b.PowerMW, Quantile: b.Quantile, RhoMax: b.RhoMax}
}

// Pair is b, budgets of one stream, in the pair's view (pairBudgets' inverse).
func (b MultiBudgets) Pair() Budgets {
	out := Budgets{PowerMW: b.PowerMW, Quantile: b.Quantile, RhoMax: b.RhoMax}
	if len(b.Streams) > 0 {
		out.RateRPS, out.LatencyMS = b.Streams[0].RateRPS, b.Streams[0].LatencyMS
	}
	return out
}

// Budgets returns the budgets the model checks against.
func (m *Model) Budgets() Budgets { return m.b }

// pairBuf holds one configuration of the pair as the several-workload model and decision
// take it: slices of these arrays, on the caller's stack.
type pairBuf struct {
	train   [1]TrainPoint
	infer   [1]InferPoint
	shares  [1]float64 // the one job's share: 1, as MultiModel.shares(1)
	streams [1]StreamEval
	sps     [1]float64
}

// eval evaluates training turn t and inference point ip at mode with the one model
// (binding: the binding term, termConstraint).
func (m *Model) eval(buf *pairBuf, mode powermode.Mode, t TrainPoint, ip InferPoint) (e MultiEval, binding int) {
	buf.train[0], buf.infer[0], buf.shares[0] = t, ip, 1
	return m.mm.evalInto(mode, buf.train[:], buf.shares[:], buf.infer[:], buf.streams[:], buf.sps[:])
}

// Evaluate scores inference batch point ip at the mode of train point t. A micro-batch
// point t (Minibatch set) is one turn of t.Batch samples: the request waits for that
// shorter turn, and a minibatch of B samples takes B/t.Batch of them, so the training
// throughput (1−ρ)·B/(k·τ_T(B/k)) is (1−ρ)·t.Batch/τ_T(t.Batch), the same expression.
func (m *Model) Evaluate(mode powermode.Mode, t TrainPoint, ip InferPoint) Eval {
	var buf pairBuf
	e, binding := m.eval(&buf, mode, t, ip)
	return pairEval(e, binding, t)
}

// pairEval is the pair's view of a one-stream, one-job evaluation of training turn t
// whose binding term is binding. It reads only numbers of e, so that e's buffers stay on
// the caller's stack.
func pairEval(e MultiEval, binding int, t TrainPoint) Eval {
	return Eval{Mode: e.Mode, Batch: e.Streams[0].Batch, MicroBatch: t.MicroBatch(), Rho: e.Rho, LatencyMS: e.Streams[0].LatencyMS,
		QueueMS: e.Streams[0].QueueMS, PowerMW: e.PowerMW, ThroughputSPS: e.TrainSPS[0], Feasible: e.Feasible, Violation: e.Violation, Binding: termConstraint(binding, 1)}
}

// Multi is the model of one stream and one job the pair's model is a view of: its
// evaluations are the pair's to the bit (Pair).
func (m *Model) Multi() *MultiModel { return m.mm }

// Pair is a one-stream, one-job evaluation in the pair's view (what Model.Evaluate
// answers for the same configuration).
func (e MultiEval) Pair() Eval {
	micro := 0
	if len(e.MicroBatches) > 0 {
		micro = e.MicroBatches[0]
	}
	return Eval{Mode: e.Mode, Batch: e.Streams[0].Batch, MicroBatch: micro, Rho: e.Rho, LatencyMS: e.Streams[0].LatencyMS,
		QueueMS: e.Streams[0].QueueMS, PowerMW: e.PowerMW, ThroughputSPS: e.TrainSPS[0], Feasible: e.Feasible, Violation: e.Violation, Binding: e.Binding.Constraint}
}

// BestAtMode returns the best inference batch size and training micro-batch at a
// profiled mode, chosen jointly.
func (m *Model) BestAtMode(p ModeProfile) (Eval, bool) {
	var best Eval
	found := false
	for _, t := range p.TrainChoices() {
		for _, ip := range p.Infer {
			e := m.Evaluate(p.Mode, t, ip)
			if !found || e.Better(best) {
				best, found = e, true
			}
		}
	}
	return best, found
}

// Plan is the planner's answer over a set of profiled modes.
type Plan struct {
	// Best is the best configuration: the feasible one with the highest training
	// throughput, or, when Feasible is false, the least-violating one.
	Best     Eval `json:"best"`
	Feasible bool `json:"feasible"`
	// Binding names the constraint that Best violates most (when infeasible).
	Binding Constraint `json:"binding,omitempty"`
}

// Choose returns the best configuration over the profiled modes.
func (m *Model) Choose(profiles []ModeProfile) (Plan, error) {
	var best Eval
	found := false
	for _, p := range profiles {
		e, ok := m.BestAtMode(p)
		if ok && (!found || e.Better(best)) {
			best, found = e, true
		}
	}
	if !found {
		return Plan{}, errNoProfiles
	}
	pl := Plan{Best: best, Feasible: best.Feasible}
	if !best.Feasible {
		pl.Binding = best.Binding
	}
	return pl, nil
}

// queueWords says how much of a predicted latency is the queue of batches ahead of the
// request (docs/design.md §2), so that an operator reading a high p99 sees why; "" below
// half a millisecond.
func queueWords(queueMS float64) string {
	if queueMS < 0.5 {
		return ""
	}
	return fmt.Sprintf(" (%.1f ms of it queued behind earlier batches)", queueMS)
}

// Explain says in words why a plan is what it is.
func (p Plan) Explain(b Budgets) string {
	e := p.Best
	if p.Feasible {
		// No power budget is MaxPowerMW to the model; "≤ 1000.0 W" read as a budget nobody set.
		power := fmt.Sprintf("power %.1f W ≤ %.1f W", e.PowerMW/1000, b.PowerMW/1000)
		if b.PowerMW >= MaxPowerMW {
			power = fmt.Sprintf("power %.1f W (no power budget)", e.PowerMW/1000)
		}
		return fmt.Sprintf("mode %s, inference batch %d%s: training %.1f samples/s, p%g latency %.1f ms%s ≤ %.0f ms, %s, GPU share for inference %.0f%%",
			e.Mode.Human(), e.Batch, e.microWords(), e.ThroughputSPS, b.Quantile*100, e.LatencyMS, queueWords(e.QueueMS), b.LatencyMS, power, e.Rho*100)
	}
	var what string
	switch p.Binding {
	case ConstraintLatency:
		what = fmt.Sprintf("latency: the best reachable p%g is %.1f ms%s against a budget of %.0f ms", b.Quantile*100, e.LatencyMS, queueWords(e.QueueMS), b.LatencyMS)
	case ConstraintPower:
		what = fmt.Sprintf("power: the least-violating configuration draws %.1f W against a budget of %.1f W", e.PowerMW/1000, b.PowerMW/1000)
	default:
		what = fmt.Sprintf("arrival rate: inference alone would take %.0f%% of the GPU (cap %.0f%%)", e.Rho*100, b.RhoMax*100)
	}
	return fmt.Sprintf("no profiled configuration meets the budgets; binding constraint is %s. Least-violating: mode %s, inference batch %d%s", what, e.Mode.Human(), e.Batch, e.microWords())
}

// microWords says the training micro-batch in a plan's explanation ("" for k = 1, so
// explanations without micro-batches read as before).
func (e Eval) microWords() string {
	if e.MicroBatch == 0 {
		return ""
	}
	return fmt.Sprintf(", training micro-batch %d", e.MicroBatch)
}

// Decider is the decision (MultiDecider, docs/design.md §9) for one training job and
// one stream: the pair's configurations are scored by Rules.scoreInto, claimed by
// Rules.claims and ranked by Rules.better, as MultiDecider's with k = m = 1. The pair searchers (GMD, ALS) score their candidates
// with ScoreAll and Claims in their inner loops; the daemon's controller and
// `fulcrumctl bench` choose the pair's configuration through Decide.
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

// Pair is a one-stream, one-job decision in the pair's view: what Decider.Decide answers
// over the same profiles (TestMultiDecideIsDecider).
func (d MultiDecision) Pair() Decision {
	out := Decision{Plan: Plan{Best: d.Best.Pair(), Feasible: d.Feasible, Binding: d.Binding.Constraint},
		PFeasible: d.PFeasible, Candidates: d.Candidates, Confidence: d.Confidence}
	if len(d.LatencyAdmMS) > 0 {
		out.LatencyAdmMS = d.LatencyAdmMS[0]
	}
	return out
}

// Explain is Plan.Explain with the probability behind the claim.
func (d Decision) Explain(b Budgets) string {
	return fmt.Sprintf("%s; P(every budget met) %.1f%% (a claim needs %g%%)", d.Plan.Explain(b), 100*d.PFeasible, 100*d.Confidence)
}

// Scored is one configuration as a Decider sees it.
type Scored struct {
	Eval                 // the model's figures against the exact budgets
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

// score scores one configuration, training turn t (the whole minibatch or a
// micro-batch) and inference point ip at the mode of p, with the one scoring
// (Rules.scoreInto) of the one model.
func (d Decider) score(m *Model, p ModeProfile, t TrainPoint, ip InferPoint) Scored {
	var buf pairBuf
	var latAdm, pStream [1]float64
	e, binding := m.eval(&buf, p.Mode, t, ip)
	s, bindingAdm := d.Rules.scoreInto(m.mm, e, buf.train[:], buf.infer[:], p.Repeats, latAdm[:], pStream[:])
	return Scored{Eval: pairEval(e, binding, t), LatencyAdmMS: latAdm[0], PFeasible: s.PFeasible, ViolationAdm: s.ViolationAdm, BindingAdm: termConstraint(bindingAdm, 1)}
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

// Claims reports whether a scored configuration may be claimed: the several-workload
// decision's claim (Rules.claims, as MultiDecider.Claims).
func (d Decider) Claims(s Scored) bool { return d.claims(s.PFeasible) }

// rank is what the decision ranks s by (Rules.better, MultiScored.rank's key): the
// pair's objective is its training throughput.
func (s Scored) rank() rankKey {
	return rankKey{s.ThroughputSPS, s.PowerMW, s.ViolationAdm, s.PFeasible}
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
		if d.better(s.rank(), best.rank()) {
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
