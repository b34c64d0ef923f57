// Package plan is model v1 of docs/design.md §2: the budgets, profiles, the evaluation of a
// configuration against the budgets, the planner's choice over profiled modes, and the
// Pareto helpers. The searchers (fulcrum/search) and the benchmark (fulcrum/bench) build
// on it.
package plan

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/fulcrum-edge/fulcrum/internal/limits"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Defaults of model v1.
const (
	DefaultQuantile = 0.99
	DefaultRhoMax   = 0.95
	// DefaultLatencyMS is the latency budget fulcrumd starts with when its
	// configuration gives none.
	DefaultLatencyMS = limits.DefaultLatencyMS
)

// DefaultInferBatches are the inference batch sizes 𝔅 considered by default.
func DefaultInferBatches() []int { return []int{1, 2, 4, 8, 16, 32} }

// TrainPoint is a training workload's profile at one mode: τ_T and π_T at its fixed B_T,
// or (Minibatch set) one micro-batch turn of Batch samples of a minibatch of Minibatch
// samples run as Minibatch/Batch turns with gradient accumulation (issue 32).
type TrainPoint struct {
	Batch   int     `json:"batch"`
	TimeMS  float64 `json:"time_ms"`
	PowerMW float64 `json:"power_mw"`
	// Minibatch is the minibatch B_T this point is a micro-batch of; 0 (or Batch) when
	// Batch is the whole minibatch.
	Minibatch int `json:"minibatch,omitempty"`
}

// MicroBatch is the point's micro-batch size when it is one turn of several per
// minibatch, 0 when it is the whole minibatch.
func (t TrainPoint) MicroBatch() int {
	if t.Minibatch > t.Batch {
		return t.Batch
	}
	return 0
}

// InferPoint is an inference workload's profile at one mode and batch size.
type InferPoint struct {
	Batch   int     `json:"batch"`
	TimeMS  float64 `json:"time_ms"`
	PowerMW float64 `json:"power_mw"`
}

// ModeProfile is "a mode profiled": both workloads measured there.
type ModeProfile struct {
	Mode  powermode.Mode `json:"mode"`
	Train TrainPoint     `json:"train"`
	Infer []InferPoint   `json:"infer"`
	// Micro is the training workload at micro-batch sizes (issue 32): each point one turn
	// of Batch samples, Minibatch = Train.Batch, Batch a divisor of it below it. The
	// decision chooses among Train and these (TrainChoices); empty: k = 1 only.
	Micro []TrainPoint `json:"micro,omitempty"`
	// Repeats is how many measurements each value is the mean of (0 means 1): a mode
	// measured again to confirm it is known more precisely (Decider).
	Repeats int `json:"repeats,omitempty"`
}

// TrainChoices returns the training turns the decision may run at this mode: the whole
// minibatch first, then every micro-batch point that divides it (others are ignored).
// Without micro-batch points it is Train alone, so every choice is model v1's exactly.
func (p ModeProfile) TrainChoices() []TrainPoint {
	out := make([]TrainPoint, 1, 1+len(p.Micro))
	out[0] = p.Train
	for _, t := range p.Micro {
		if UsableMicro(p.Train.Batch, t) {
			t.Minibatch = p.Train.Batch
			out = append(out, t)
		}
	}
	return out
}

// UsableMicro reports whether t can be a micro-batch turn of a minibatch of whole
// samples: a positive size below it that divides it, with a positive, finite time.
func UsableMicro(whole int, t TrainPoint) bool {
	return t.Batch >= 1 && t.Batch < whole && whole%t.Batch == 0 && t.TimeMS > 0 && !math.IsInf(t.TimeMS, 0) && !math.IsNaN(t.PowerMW)
}

// Constraint names a budget.
type Constraint string

// The constraints of model v1.
const (
	ConstraintNone    Constraint = ""
	ConstraintLatency Constraint = "latency"
	ConstraintPower   Constraint = "power"
	ConstraintRho     Constraint = "gpu_share"
)

// Eval is one configuration (mode, inference batch) scored by model v1.
type Eval struct {
	Mode  powermode.Mode `json:"mode"`
	Batch int            `json:"batch"`
	// MicroBatch is the training micro-batch size when each minibatch runs as several
	// turns (issue 32); 0 when it runs as one turn (k = 1).
	MicroBatch    int     `json:"micro_batch,omitempty"`
	Rho           float64 `json:"rho"`
	LatencyMS     float64 `json:"latency_ms"`
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
// power; among infeasible ones, smaller violation.
func (e Eval) Better(o Eval) bool {
	if e.Feasible != o.Feasible {
		return e.Feasible
	}
	if !e.Feasible {
		if e.Violation != o.Violation {
			return e.Violation < o.Violation
		}
		return e.PowerMW < o.PowerMW
	}
	if e.ThroughputSPS != o.ThroughputSPS {
		return e.ThroughputSPS > o.ThroughputSPS
	}
	return e.PowerMW < o.PowerMW
}

// Model evaluates model v1 for fixed budgets. It caches the batch-fill quantiles, which
// depend only on λ, q and b, so it is cheap to call over thousands of modes. A Model is
// immutable and safe for concurrent use.
type Model struct {
	b     Budgets
	fills map[int]float64 // batch -> fill quantile in ms
}

// NewModel validates the budgets (after defaults) and precomputes fill quantiles.
func NewModel(b Budgets, batches []int) (*Model, error) {
	b = b.WithDefaults()
	if err := b.Validate(); err != nil {
		return nil, err
	}
	m := &Model{b: b, fills: make(map[int]float64, len(batches))}
	for _, n := range batches {
		if n < 1 {
			return nil, fmt.Errorf("inference batch size %d: must be at least 1", n)
		}
		m.fills[n] = FillQuantileMS(n, b.RateRPS, b.Quantile)
	}
	return m, nil
}

// Budgets returns the budgets the model checks against.
func (m *Model) Budgets() Budgets { return m.b }

// FillQuantileMS is the q-quantile, in ms, of the time for b Poisson(λ) arrivals to fill
// a batch after its first request: Gamma(shape b−1, rate λ); 0 for b = 1.
func FillQuantileMS(b int, rateRPS, q float64) float64 {
	if b <= 1 {
		return 0
	}
	return 1000 * distuv.Gamma{Alpha: float64(b - 1), Beta: rateRPS}.Quantile(q)
}

func (m *Model) fill(b int) float64 {
	if f, ok := m.fills[b]; ok {
		return f
	}
	return FillQuantileMS(b, m.b.RateRPS, m.b.Quantile)
}

// Evaluate scores inference batch point ip at the mode of train point t. A micro-batch
// point t (Minibatch set) is one turn of t.Batch samples: the request waits for that
// shorter turn, and a minibatch of B samples takes B/t.Batch of them, so the training
// throughput (1−ρ)·B/(k·τ_T(B/k)) is (1−ρ)·t.Batch/τ_T(t.Batch), the same expression.
func (m *Model) Evaluate(mode powermode.Mode, t TrainPoint, ip InferPoint) Eval {
	b := m.b
	rho := b.RateRPS * (ip.TimeMS / 1000) / float64(ip.Batch)
	e := Eval{Mode: mode, Batch: ip.Batch, MicroBatch: t.MicroBatch(), Rho: rho}
	e.LatencyMS = m.fill(ip.Batch) + t.TimeMS + ip.TimeMS
	share := min(rho, 1)
	e.PowerMW = share*ip.PowerMW + (1-share)*t.PowerMW
	e.ThroughputSPS = max(0, 1-rho) * float64(t.Batch) / (t.TimeMS / 1000)
	exc := map[Constraint]float64{
		ConstraintLatency: e.LatencyMS/b.LatencyMS - 1,
		ConstraintPower:   e.PowerMW/b.PowerMW - 1,
		ConstraintRho:     rho/b.RhoMax - 1,
	}
	worst := math.Inf(-1)
	for _, c := range []Constraint{ConstraintLatency, ConstraintPower, ConstraintRho} {
		if exc[c] > 0 {
			e.Violation += exc[c]
		}
		if exc[c] > worst {
			worst, e.Binding = exc[c], c
		}
	}
	e.Feasible = e.Violation == 0
	return e
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

// errNoProfiles is returned by Choose when it is given nothing to choose from.
var errNoProfiles = errors.New("planner: no profiled modes to choose from")

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

// Explain says in words why a plan is what it is.
func (p Plan) Explain(b Budgets) string {
	e := p.Best
	if p.Feasible {
		return fmt.Sprintf("mode %s, inference batch %d%s: training %.1f samples/s, p%g latency %.1f ms ≤ %.0f ms, power %.1f W ≤ %.1f W, GPU share for inference %.0f%%",
			e.Mode.Human(), e.Batch, e.microWords(), e.ThroughputSPS, b.Quantile*100, e.LatencyMS, b.LatencyMS, e.PowerMW/1000, b.PowerMW/1000, e.Rho*100)
	}
	var what string
	switch p.Binding {
	case ConstraintLatency:
		what = fmt.Sprintf("latency: the best reachable p%g is %.1f ms against a budget of %.0f ms", b.Quantile*100, e.LatencyMS, b.LatencyMS)
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

// SortedBatches returns the batch sizes of a profile, ascending.
func (p ModeProfile) SortedBatches() []int {
	out := make([]int, len(p.Infer))
	for i, ip := range p.Infer {
		out[i] = ip.Batch
	}
	slices.Sort(out)
	return out
}

// Clone returns a copy of p that shares no memory with it.
func (p ModeProfile) Clone() ModeProfile {
	p.Infer = slices.Clone(p.Infer)
	p.Micro = slices.Clone(p.Micro)
	return p
}
