// Package plan is model v1 of docs/design.md §2 and the decision of §9: the budgets,
// profiles, the model's evaluation of a configuration against the budgets (one
// implementation, for k inference streams and m training jobs: MultiModel in model.go),
// the decision that claims a configuration only when P(every budget met) is high enough
// (one implementation: MultiDecider and Rules.scoreInto in decide.go), the pair-shaped
// view of both for one stream and one job (Model, Decider in pair.go), the one assembly
// of profiles and the Pareto helpers. The searchers (fulcrum/search), the controller
// (fulcrum/control) and the benchmark (fulcrum/bench) build on it.
package plan

import (
	"errors"
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
	// Estimated marks a profile that was not measured: a mode the live profiler
	// abandoned over the power budget answers with its power reading and times borrowed
	// from a neighbour (control.LiveProfiler). Its power is real, its times are not, so a
	// searcher fitting a model of the times leaves it out.
	Estimated bool `json:"estimated,omitempty"`
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

// FillQuantileMS is the q-quantile, in ms, of the time for b Poisson(λ) arrivals to fill
// a batch after its first request: Gamma(shape b−1, rate λ); 0 for b = 1.
func FillQuantileMS(b int, rateRPS, q float64) float64 {
	if b <= 1 {
		return 0
	}
	return 1000 * distuv.Gamma{Alpha: float64(b - 1), Beta: rateRPS}.Quantile(q)
}

// rhoQueueCap keeps QueueExcessMS finite where the inference share reaches 1 (the
// ρ ≤ ρ_max budget rejects such a configuration anyway; a finite figure keeps its
// evaluation printable and its violation ordered).
const rhoQueueCap = 0.999

// QueueExcessMS is how far, in ms, the q-quantile of a request's wait before its batch
// starts exceeds waitMS, the turn model v1 lets run ahead of it (docs/design.md §2 "The
// queue of batches"). The GPU serves inference batches whenever any is due and otherwise
// runs training turns: a queue with vacations, whose wait is the sum of two independent
// parts (the Fuhrmann–Cooper decomposition) — the residual of the turn running when the
// batch is ready (at most waitMS, taken as uniform on [0, waitMS]) and the M/G/1 wait
// behind earlier batches (0 with probability 1 − ρ, else exponential of mean
// residualMS/(2(1 − ρ)), the usual heavy-traffic tail; residualMS is E[S²]/E[S] of the
// batch service times). The sum's tail beyond waitMS has a closed form, solved here for
// its q-quantile. With ρ ≤ 1 − q the excess is 0 exactly, so a lightly loaded
// configuration keeps model v1's figure; at 30 req/s and 13.5 ms batches (ρ 0.4) it adds
// 35 ms to a 23 ms turn, as a simulation of the scheduler's discipline measures
// (TestQueueExcessAgainstASimulatedQueue).
func QueueExcessMS(rho, residualMS, waitMS, q float64) float64 {
	if rho <= 1-q || residualMS <= 0 || q <= 0 || q >= 1 {
		return 0
	}
	rho = min(rho, rhoQueueCap)
	mean := residualMS / (2 * (1 - rho)) // the M/G/1 wait's mean, given that there is one
	arg := rho / (1 - q)
	if waitMS > 0 {
		// P(U + W > x) for x ≥ waitMS is ρ·(mean/waitMS)·(1 − e^(−waitMS/mean))·e^(−(x−waitMS)/mean).
		arg *= mean * -math.Expm1(-waitMS/mean) / waitMS
	}
	return max(0, mean*math.Log(arg))
}

// errNoProfiles is returned by Choose and Decide when they are given nothing to choose
// from.
var errNoProfiles = errors.New("planner: no profiled modes to choose from")

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
