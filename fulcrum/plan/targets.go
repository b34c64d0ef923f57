package plan

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/internal/budgettext"
	"github.com/fulcrum-edge/fulcrum/internal/limits"
)

// Targets are what the operator asked for (docs/design.md §2), as fulcrumd's
// configuration, the control API and the settings file give them and the controller
// holds them. Unlike the model's Budgets they may leave things open: RateRPS 0 is
// "measure the arrival rate", PowerMW 0 "no power budget", Quantile and RhoMax 0 the
// defaults; and they hold every workload's own overrides. The controller turns them
// into the model's input with Budgets (one inference stream) or MultiBudgets (several),
// and gives the scheduler its deadlines from them (LatencyOf).
type Targets struct {
	RateRPS   float64 `json:"rate_rps"`   // λ; 0: the measured arrival rate
	LatencyMS float64 `json:"latency_ms"` // L, on the Quantile of per-request latency
	PowerMW   float64 `json:"power_mw"`   // P on the moving average of board power; 0: none
	Quantile  float64 `json:"quantile"`   // q; 0: DefaultQuantile
	RhoMax    float64 `json:"rho_max"`    // cap on the inference share of GPU time; 0: DefaultRhoMax
	// Streams are the workloads with targets of their own, by workload name: an
	// inference stream's latency budget and rate, a training job's weight. A workload not
	// named uses the shared targets above (and weight 1).
	Streams map[string]StreamTarget `json:"streams,omitempty"`
}

// StreamTarget is one workload's own targets. Zero fields use the shared ones: the
// shared latency budget, and the shared fixed rate or, without one, the stream's own
// measured rate.
//
// TrainWeight is a training workload's time-share weight instead (0: 1): with several
// training jobs, job j gets the share w_j/Σw of the GPU time training gets, in the plan
// (MultiBudgets.TrainWeights) and in the scheduler's turns.
type StreamTarget struct {
	LatencyMS   float64 `json:"latency_ms,omitempty"`
	RateRPS     float64 `json:"rate_rps,omitempty"`
	TrainWeight float64 `json:"train_weight,omitempty"`
}

// MaxStreamTargets bounds the workloads with targets of their own (the scheduler holds
// as many deadlines and weights).
const MaxStreamTargets = limits.MaxStreams

// WithDefaults fills a zero Quantile and RhoMax (the rate and power stay open).
func (t Targets) WithDefaults() Targets {
	if t.Quantile == 0 {
		t.Quantile = DefaultQuantile
	}
	if t.RhoMax == 0 {
		t.RhoMax = DefaultRhoMax
	}
	return t
}

// Shared returns t without its per-workload targets.
func (t Targets) Shared() Targets {
	t.Streams = nil
	return t
}

// Clone returns t with a copy of its per-workload targets (nil when none).
func (t Targets) Clone() Targets {
	if len(t.Streams) == 0 {
		t.Streams = nil
	} else {
		t.Streams = maps.Clone(t.Streams)
	}
	return t
}

// Equal reports whether t and o ask for the same (no per-workload targets and an empty
// map are the same).
func (t Targets) Equal(o Targets) bool {
	return reflect.DeepEqual(t.Clone(), o.Clone())
}

// Validate rejects targets the controller cannot hold: the latency budget in range, the
// rate, power, quantile and ρ cap in range or 0 (open / default), at most
// MaxStreamTargets workloads with their own targets, each valid (StreamTarget.Validate).
// Every message names the field and the valid range; errors come in the order latency,
// power, rate, quantile, ρ cap, workloads (the first is the one the control API
// answers). It is the one check of the operator's targets: configuration, control API
// (through Apply), settings file and controller.
func (t Targets) Validate() error {
	var errs []error
	check := func(field string, v float64) {
		if v == 0 && field != FieldLatency {
			return
		}
		if err := CheckField(field, v); err != nil {
			errs = append(errs, err)
		}
	}
	check(FieldLatency, t.LatencyMS)
	check(FieldPower, t.PowerMW)
	check(FieldRate, t.RateRPS)
	check(FieldQuantile, t.Quantile)
	check(FieldRhoMax, t.RhoMax)
	if len(t.Streams) > MaxStreamTargets {
		errs = append(errs, fieldErrorf(FieldStreams, "streams: %d workloads with targets of their own: at most %d", len(t.Streams), MaxStreamTargets))
	}
	for _, w := range slices.Sorted(maps.Keys(t.Streams)) {
		if err := t.Streams[w].Validate(w); err != nil {
			errs = append(errs, fmt.Errorf("stream %q: %w", w, err))
		}
	}
	return errors.Join(errs...)
}

// ErrWorkloadName is a workload name out of the protocol's bounds.
var ErrWorkloadName = fmt.Errorf("the workload name must be 1 to %d bytes (the name its inference worker registered)", proto.MaxNameLen)

// Validate checks one workload's own targets: its name, a latency budget and rate in
// range or 0 (shared), a training weight from MinTrainWeight to MaxTrainWeight or 0 (1).
func (s StreamTarget) Validate(workload string) error {
	if workload == "" || len(workload) > proto.MaxNameLen {
		return ErrWorkloadName
	}
	if s.LatencyMS != 0 {
		if err := CheckField(FieldLatency, s.LatencyMS); err != nil {
			return err
		}
	}
	if s.RateRPS != 0 {
		if err := CheckField(FieldRate, s.RateRPS); err != nil {
			return err
		}
	}
	return CheckTrainWeight(s.TrainWeight)
}

// WeightRangeError is a training weight out of its range.
type WeightRangeError struct{ Value float64 }

func (e *WeightRangeError) Error() string {
	return fmt.Sprintf("training weight: train_weight = %v: want %g to %d", e.Value, MinTrainWeight, MaxTrainWeight)
}

// CheckTrainWeight returns a *WeightRangeError for a training weight other than 0 (the
// default, 1) outside MinTrainWeight to MaxTrainWeight (or not a number).
func CheckTrainWeight(w float64) error {
	if w != 0 && (!(w >= MinTrainWeight) || w > MaxTrainWeight) {
		return &WeightRangeError{Value: w}
	}
	return nil
}

// String is the target in an event's words, as fulcrumctl budget get prints it.
func (s StreamTarget) String() string {
	return "{" + budgettext.Stream(s.LatencyMS, s.RateRPS, s.TrainWeight) + "}"
}

// String is the shared targets in an event's words, as fulcrumctl budget get prints them.
func (t Targets) String() string {
	t = t.WithDefaults()
	return "{" + budgettext.Shared(t.LatencyMS, t.Quantile, t.PowerMW, t.RateRPS, t.RateRPS == 0) + "}"
}

// minModelRateRPS is the rate the model plans for while none is measured yet (a
// measured 0): the model needs a rate in range.
const minModelRateRPS = MinRateRPS

// Budgets is the one conversion from the operator's targets to the model's input for
// one inference stream at rateRPS (the rate in force: the fixed one or the measured
// one): no power budget becomes MaxPowerMW, the largest the model takes, and the
// quantile and ρ cap their defaults.
//
// Not the board's maximum power: the code knows none (the catalog has no rating), and
// "no power budget" must never refuse a configuration, while a ceiling near what the
// board draws would make the decision's power term (P(power ≤ budget) under the
// profiling noise) fall below 1 at the top modes, refusing some, and name power as the
// binding constraint of plans made with no power budget.
func (t Targets) Budgets(rateRPS float64) Budgets {
	t = t.WithDefaults()
	p := t.PowerMW
	if p <= 0 {
		p = MaxPowerMW
	}
	return Budgets{RateRPS: max(rateRPS, minModelRateRPS), LatencyMS: t.LatencyMS, PowerMW: p, Quantile: t.Quantile, RhoMax: t.RhoMax}
}

// LatencyOf is the latency budget of a workload's requests: its own, else the shared one.
func (t Targets) LatencyOf(workload string) float64 {
	return cmp.Or(t.Streams[workload].LatencyMS, t.LatencyMS)
}

// WeightOf is a training workload's weight: its own, else 1.
func (t Targets) WeightOf(workload string) float64 {
	return cmp.Or(t.Streams[workload].TrainWeight, 1)
}

// MultiBudgets is Budgets for several workloads: the inference streams (by name, each
// at its rate in force, rates[i] for streams[i]) and the training jobs, in the order the
// model's profiles hold them.
func (t Targets) MultiBudgets(streams []string, ratesRPS []float64, jobs []string) MultiBudgets {
	b := t.Budgets(minModelRateRPS)
	mb := MultiBudgets{PowerMW: b.PowerMW, Quantile: b.Quantile, RhoMax: b.RhoMax}
	for i, s := range streams {
		mb.Streams = append(mb.Streams, StreamBudget{Name: s, RateRPS: max(ratesRPS[i], minModelRateRPS), LatencyMS: t.LatencyOf(s)})
	}
	for _, j := range jobs {
		mb.TrainWeights = append(mb.TrainWeights, t.WeightOf(j))
	}
	return mb
}

// StreamLatenciesMS are the per-workload latency budgets set (the scheduler's deadlines
// besides the shared one).
func (t Targets) StreamLatenciesMS() map[string]float64 {
	return t.setPerWorkload(func(s StreamTarget) float64 { return s.LatencyMS })
}

// TrainWeights are the training weights set, by workload (the scheduler's shares).
func (t Targets) TrainWeights() map[string]float64 {
	return t.setPerWorkload(func(s StreamTarget) float64 { return s.TrainWeight })
}

// setPerWorkload is one field of the workloads' own targets, by workload, where it is
// set (above 0: 0 is the shared value or the default); never nil.
func (t Targets) setPerWorkload(field func(StreamTarget) float64) map[string]float64 {
	out := map[string]float64{}
	for w, s := range t.Streams {
		if v := field(s); v > 0 {
			out[w] = v
		}
	}
	return out
}
