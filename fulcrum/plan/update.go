package plan

import (
	"errors"
	"fmt"
)

// TargetsUpdate is one change to the operator's targets, as the control API's
// PUT /v1/budgets takes it (docs/api.md): a nil field keeps what is held. With Workload
// (or Shared, or TrainWeight) it changes that workload's own targets; without, the
// shared ones.
type TargetsUpdate struct {
	Workload    string
	LatencyMS   *float64
	PowerMW     *float64 // 0: no power budget
	RateRPS     *float64
	RateAuto    *bool // true: measure the rate (shared or the workload's own: back to the shared one)
	Quantile    *float64
	RhoMax      *float64
	TrainWeight *float64 // a training workload's weight; 1 is the default
	Shared      bool     // drop Workload's own targets
}

// The update's fields besides the budgets', as the API's JSON names them.
const (
	FieldWorkload    = "workload"
	FieldRateAuto    = "rate_auto"
	FieldShared      = "shared"
	FieldTrainWeight = "train_weight"
	FieldStreams     = "streams"
)

// FieldError is a change to the targets refused for what it asks rather than a value
// out of range: Field names the field at fault as the API's JSON does.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Msg }

func fieldErrorf(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Apply returns t with u applied: the update rules of the targets, in one place. A
// contradiction or a field that is not one workload's is a *FieldError; a value given
// must be in range, and 0 counts as given — rate, quantile, ρ cap, a workload's latency,
// rate and weight are opened or reset by rate_auto and shared, not by 0 — except the
// power budget (0: none). The result is then checked with Validate, the one check of
// targets (its first error names the field: a *RangeError, *WeightRangeError,
// *FieldError or ErrWorkloadName). On error t is returned unchanged; t is never
// modified.
func (t Targets) Apply(u TargetsUpdate) (Targets, error) {
	if u.Workload != "" || u.Shared || u.TrainWeight != nil {
		return t.applyStream(u)
	}
	if err := u.rateRules("the"); err != nil {
		return t, err
	}
	out := t.Clone()
	if u.rateAuto() {
		out.RateRPS = 0 // the controller measures it
	}
	if err := errors.Join(setGiven(&out.LatencyMS, FieldLatency, u.LatencyMS), setGiven(&out.PowerMW, FieldPower, u.PowerMW),
		setGiven(&out.RateRPS, FieldRate, u.RateRPS), setGiven(&out.Quantile, FieldQuantile, u.Quantile),
		setGiven(&out.RhoMax, FieldRhoMax, u.RhoMax)); err != nil {
		return t, err
	}
	if err := out.Validate(); err != nil {
		return t, err
	}
	return out, nil
}

// rateAuto reports an update that asks for the measured (or, for a workload, the
// shared) rate.
func (u TargetsUpdate) rateAuto() bool { return u.RateAuto != nil && *u.RateAuto }

// rateRules refuses a rate and rate_auto = true together, and rate_auto = false without
// a rate (whose: "the" or "the stream's" arrival rate).
func (u TargetsUpdate) rateRules(whose string) error {
	switch {
	case u.RateRPS != nil && u.rateAuto():
		return fieldErrorf(FieldRate, "rate_rps = %v and rate_auto = true contradict each other: set one", *u.RateRPS)
	case u.RateAuto != nil && !*u.RateAuto && u.RateRPS == nil:
		return fieldErrorf(FieldRateAuto, "rate_auto = false needs rate_rps: give %s arrival rate to plan for", whose)
	}
	return nil
}

// setGiven writes a given value v of field into dst; a given 0 is a *RangeError (the field's
// range starts above it), except the power budget's, which is none.
func setGiven(dst *float64, field string, v *float64) error {
	if v == nil {
		return nil
	}
	if *v == 0 && field != FieldPower {
		return CheckField(field, 0)
	}
	*dst = *v
	return nil
}

// applyStream is Apply for one workload's own targets (u.Workload).
func (t Targets) applyStream(u TargetsUpdate) (Targets, error) {
	if err := (StreamTarget{}).Validate(u.Workload); err != nil {
		return t, err
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{FieldPower, u.PowerMW != nil}, {FieldQuantile, u.Quantile != nil}, {FieldRhoMax, u.RhoMax != nil}} {
		if f.set {
			return t, fieldErrorf(f.name, "%s is shared by every workload, not one stream's: set it without workload", f.name)
		}
	}
	if u.Shared && (u.LatencyMS != nil || u.RateRPS != nil || u.RateAuto != nil || u.TrainWeight != nil) {
		return t, fieldErrorf(FieldShared, "shared = true drops the workload's own budgets; give it alone, or give latency_ms / rate_rps / train_weight without it")
	}
	if err := u.rateRules("the stream's"); err != nil {
		return t, err
	}
	st, held := t.Streams[u.Workload]
	if u.Shared {
		st = StreamTarget{}
	}
	if u.rateAuto() {
		st.RateRPS = 0 // the shared rate
	}
	if err := errors.Join(setGiven(&st.LatencyMS, FieldLatency, u.LatencyMS), setGiven(&st.RateRPS, FieldRate, u.RateRPS)); err != nil {
		return t, err
	}
	if u.TrainWeight != nil {
		if *u.TrainWeight == 0 {
			return t, &WeightRangeError{Value: 0}
		}
		st.TrainWeight = *u.TrainWeight
		if st.TrainWeight == 1 {
			st.TrainWeight = 0 // the default
		}
	}
	out := t.Clone()
	switch {
	case st == StreamTarget{}:
		delete(out.Streams, u.Workload)
		if len(out.Streams) == 0 {
			out.Streams = nil
		}
	case !held && len(t.Streams) >= MaxStreamTargets:
		return t, fieldErrorf(FieldWorkload, "%d streams have budgets of their own (the limit): drop one first (shared = true)", MaxStreamTargets)
	default:
		if out.Streams == nil {
			out.Streams = map[string]StreamTarget{}
		}
		out.Streams[u.Workload] = st
	}
	if err := out.Validate(); err != nil {
		return t, err
	}
	return out, nil
}
