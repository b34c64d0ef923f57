package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

func outOfRange(field string, v, lo, hi float64, hint string) *Error {
	return Errorf(http.StatusBadRequest, CodeBadBudget, field,
		"%s = %v is out of range: want %g to %g%s", field, v, lo, hi, hint)
}

// checkRange validates one budget field against plan's limits (the only ones), with
// the API's own wording of the unit hint (it names rate_auto and power 0).
func checkRange(field string, v float64, hint string) *Error {
	var re *plan.RangeError
	if err := plan.CheckField(field, v); errors.As(err, &re) {
		return outOfRange(field, v, re.Lo, re.Hi, hint)
	}
	return nil
}

// Hints after the range in budget errors.
const (
	hintLatency  = " milliseconds"
	hintPower    = " milliwatts, or 0 for no power budget (a value below 1000 is probably watts given as mW)"
	hintRate     = " requests per second, or rate_auto to measure it"
	hintQuantile = " (e.g. 0.99 for p99)"
	hintRho      = " (share of GPU time inference may take)"
)

// Validate checks every budget; the first field out of range is an *Error naming it.
func (b Budgets) Validate() error {
	if e := checkRange("latency_ms", b.LatencyMS, hintLatency); e != nil {
		return e
	}
	if b.PowerMW != 0 {
		if e := checkRange("power_mw", b.PowerMW, hintPower); e != nil {
			return e
		}
	}
	if !b.RateAuto {
		if e := checkRange("rate_rps", b.RateRPS, hintRate); e != nil {
			return e
		}
	}
	if e := checkRange("quantile", b.Quantile, hintQuantile); e != nil {
		return e
	}
	if e := checkRange("rho_max", b.RhoMax, hintRho); e != nil {
		return e
	}
	if len(b.Streams) > MaxStreamBudgets {
		return Errorf(http.StatusBadRequest, CodeBadBudget, "streams", "%d streams with budgets of their own: at most %d", len(b.Streams), MaxStreamBudgets)
	}
	for _, s := range b.Streams {
		if e := checkWorkload(s.Workload); e != nil {
			return e
		}
		if s.LatencyMS != 0 {
			if e := checkRange("latency_ms", s.LatencyMS, hintLatency); e != nil {
				return e
			}
		}
		if s.RateRPS != 0 {
			if e := checkRange("rate_rps", s.RateRPS, hintRate); e != nil {
				return e
			}
		}
		if s.TrainWeight != 0 {
			if e := checkWeight(s.TrainWeight); e != nil {
				return e
			}
		}
	}
	return nil
}

// MaxTrainWeight is the largest training weight (weights are relative: 1000:1 is
// already all of the time).
const MaxTrainWeight = 1000

// MinTrainWeight is the smallest: a weight of 5e-324 was "above 0" yet starved the job
// (2 turns in 8 s); 0.01 against the default 1 is already 1 % of training's time.
const MinTrainWeight = 0.01

func checkWeight(w float64) *Error {
	if !(w >= MinTrainWeight) || w > MaxTrainWeight {
		return Errorf(http.StatusBadRequest, CodeBadBudget, "train_weight",
			"train_weight = %v is out of range: want a share weight from %g to %d (default 1; weights are relative)", w, MinTrainWeight, MaxTrainWeight)
	}
	return nil
}

// UnmarshalJSON decodes an update and notes whether the body named a workload: an
// empty or null "workload" must not fall back to the shared budgets.
func (u *BudgetsUpdate) UnmarshalJSON(b []byte) error {
	type plain BudgetsUpdate // no UnmarshalJSON: no recursion
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return err
	}
	_, p.workloadGiven = keys["workload"]
	*u = BudgetsUpdate(p)
	return nil
}

// Warnings returns what in u looks like a mistake although it is valid, given the
// workers registered now: a workload none of them registered (a misspelling, or one
// not started yet: budgets for it are kept), inference fields on a training workload
// and a training weight on an inference stream. They name the registered workloads.
func (u BudgetsUpdate) Warnings(workers []Worker) []string {
	if u.Workload == "" {
		return nil
	}
	roles := map[string]string{}
	var names []string
	for _, w := range workers {
		if _, ok := roles[w.Workload]; !ok {
			names = append(names, fmt.Sprintf("%s (%s)", w.Workload, w.Role))
		}
		roles[w.Workload] = w.Role
	}
	slices.Sort(names)
	registered := "none"
	if len(names) > 0 {
		registered = strings.Join(names, ", ")
	}
	role, ok := roles[u.Workload]
	switch {
	case !ok:
		return []string{fmt.Sprintf("no worker has registered workload %q (registered now: %s): its budgets are kept and apply when it registers; check the spelling", u.Workload, registered)}
	case role == "train" && (u.LatencyMS != nil || u.RateRPS != nil || u.RateAuto != nil):
		return []string{fmt.Sprintf("workload %q is a training workload: a latency or rate budget applies to inference streams only; a training job takes a weight (registered now: %s)", u.Workload, registered)}
	case role == "infer" && u.TrainWeight != nil:
		return []string{fmt.Sprintf("workload %q is an inference stream: a training weight applies to training workloads only; a stream takes a latency and a rate (registered now: %s)", u.Workload, registered)}
	}
	return nil
}

func checkWorkload(w string) *Error {
	if w == "" || len(w) > proto.MaxNameLen {
		return Errorf(http.StatusBadRequest, CodeBadBudget, "workload", "workload must be the name a worker registers (1 to %d bytes)", proto.MaxNameLen)
	}
	return nil
}

// Empty reports an update that changes nothing.
func (u BudgetsUpdate) Empty() bool {
	return u.LatencyMS == nil && u.PowerMW == nil && u.RateRPS == nil && u.RateAuto == nil &&
		u.Quantile == nil && u.RhoMax == nil && !u.Shared && u.TrainWeight == nil
}

// Apply returns cur with u applied, or an *Error (400 bad_budget) naming the first field
// out of range; cur is never changed.
func (u BudgetsUpdate) Apply(cur Budgets) (Budgets, error) {
	if u.workloadGiven && u.Workload == "" {
		// Before: "workload": "" or null set the shared (global) budgets.
		return cur, Errorf(http.StatusBadRequest, CodeBadBudget, "workload",
			"workload is empty or null: give the name a worker registers, or leave workload out to change the shared budgets")
	}
	if u.Workload != "" || u.Shared || u.TrainWeight != nil {
		return u.applyStream(cur)
	}
	b := cur
	if u.RateRPS != nil && u.RateAuto != nil && *u.RateAuto {
		return cur, Errorf(http.StatusBadRequest, CodeBadBudget, "rate_rps",
			"rate_rps = %v and rate_auto = true contradict each other: set one", *u.RateRPS)
	}
	if u.LatencyMS != nil {
		b.LatencyMS = *u.LatencyMS
		if e := checkRange("latency_ms", b.LatencyMS, hintLatency); e != nil {
			return cur, e
		}
	}
	if u.PowerMW != nil {
		b.PowerMW = *u.PowerMW
		if b.PowerMW != 0 {
			if e := checkRange("power_mw", b.PowerMW, hintPower); e != nil {
				return cur, e
			}
		}
	}
	if u.RateAuto != nil {
		b.RateAuto = *u.RateAuto
		if b.RateAuto {
			b.RateRPS = 0 // the controller reports the measured rate here
		}
		if !b.RateAuto && u.RateRPS == nil {
			return cur, Errorf(http.StatusBadRequest, CodeBadBudget, "rate_auto",
				"rate_auto = false needs rate_rps: give the arrival rate to plan for")
		}
	}
	if u.RateRPS != nil {
		b.RateRPS, b.RateAuto = *u.RateRPS, false
		if e := checkRange("rate_rps", b.RateRPS, hintRate); e != nil {
			return cur, e
		}
	}
	if u.Quantile != nil {
		b.Quantile = *u.Quantile
		if e := checkRange("quantile", b.Quantile, hintQuantile); e != nil {
			return cur, e
		}
	}
	if u.RhoMax != nil {
		b.RhoMax = *u.RhoMax
		if e := checkRange("rho_max", b.RhoMax, hintRho); e != nil {
			return cur, e
		}
	}
	return b, nil
}

// applyStream is Apply for one stream's own budgets (u.Workload).
func (u BudgetsUpdate) applyStream(cur Budgets) (Budgets, error) {
	if e := checkWorkload(u.Workload); e != nil {
		return cur, e
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"power_mw", u.PowerMW != nil}, {"quantile", u.Quantile != nil}, {"rho_max", u.RhoMax != nil}} {
		if f.set {
			return cur, Errorf(http.StatusBadRequest, CodeBadBudget, f.name,
				"%s is shared by every workload, not one stream's: set it without workload", f.name)
		}
	}
	if u.Shared && (u.LatencyMS != nil || u.RateRPS != nil || u.RateAuto != nil || u.TrainWeight != nil) {
		return cur, Errorf(http.StatusBadRequest, CodeBadBudget, "shared",
			"shared = true drops the workload's own budgets; give it alone, or give latency_ms / rate_rps / train_weight without it")
	}
	if u.RateRPS != nil && u.RateAuto != nil && *u.RateAuto {
		return cur, Errorf(http.StatusBadRequest, CodeBadBudget, "rate_rps",
			"rate_rps = %v and rate_auto = true contradict each other: set one", *u.RateRPS)
	}
	if u.RateAuto != nil && !*u.RateAuto && u.RateRPS == nil {
		return cur, Errorf(http.StatusBadRequest, CodeBadBudget, "rate_auto",
			"rate_auto = false needs rate_rps: give the stream's arrival rate to plan for")
	}
	sb := StreamBudgets{Workload: u.Workload}
	i := slices.IndexFunc(cur.Streams, func(s StreamBudgets) bool { return s.Workload == u.Workload })
	if i >= 0 {
		sb = cur.Streams[i]
	}
	if u.Shared {
		sb = StreamBudgets{Workload: u.Workload}
	}
	if u.LatencyMS != nil {
		if e := checkRange("latency_ms", *u.LatencyMS, hintLatency); e != nil {
			return cur, e
		}
		sb.LatencyMS = *u.LatencyMS
	}
	if u.RateAuto != nil && *u.RateAuto {
		sb.RateRPS = 0
	}
	if u.RateRPS != nil {
		if e := checkRange("rate_rps", *u.RateRPS, hintRate); e != nil {
			return cur, e
		}
		sb.RateRPS = *u.RateRPS
	}
	if u.TrainWeight != nil {
		if e := checkWeight(*u.TrainWeight); e != nil {
			return cur, e
		}
		sb.TrainWeight = *u.TrainWeight
		if sb.TrainWeight == 1 {
			sb.TrainWeight = 0 // the default
		}
	}
	b := cur
	b.Streams = slices.Clone(cur.Streams)
	switch {
	case sb == StreamBudgets{Workload: u.Workload} && i >= 0:
		b.Streams = slices.Delete(b.Streams, i, i+1)
	case sb == StreamBudgets{Workload: u.Workload}:
	case i >= 0:
		b.Streams[i] = sb
	case len(b.Streams) >= MaxStreamBudgets:
		return cur, Errorf(http.StatusBadRequest, CodeBadBudget, "workload",
			"%d streams have budgets of their own (the limit): drop one first (shared = true)", MaxStreamBudgets)
	default:
		b.Streams = append(b.Streams, sb)
	}
	if len(b.Streams) == 0 {
		b.Streams = nil
	}
	return b, nil
}

// StreamOf returns the stream's own budgets in b (zero fields: shared).
func (b Budgets) StreamOf(workload string) StreamBudgets {
	for _, s := range b.Streams {
		if s.Workload == workload {
			return s
		}
	}
	return StreamBudgets{Workload: workload}
}

// String is a one-line readable form, e.g. "latency 80ms (p99), power 30W, rate auto".
func (b Budgets) String() string {
	power := "none"
	if b.PowerMW > 0 {
		power = fmt.Sprintf("%gW", b.PowerMW/1000)
	}
	rate := fmt.Sprintf("%g req/s", b.RateRPS)
	if b.RateAuto {
		rate = "auto"
		if b.RateRPS > 0 {
			rate = fmt.Sprintf("auto (measured %.3g req/s)", b.RateRPS)
		}
	}
	out := fmt.Sprintf("latency %gms (p%g), power %s, rate %s", b.LatencyMS, b.Quantile*100, power, rate)
	for _, s := range b.Streams {
		if s.LatencyMS == 0 && s.RateRPS == 0 {
			out += fmt.Sprintf("; %s: %s", s.Workload, s)
			continue
		}
		out += fmt.Sprintf("; stream %s: %s", s.Workload, s)
	}
	return out
}

// String is one workload's own budgets in the words Budgets.String uses (and the
// controller's events): "latency 50ms, shared rate", "training weight 2", "shared".
func (s StreamBudgets) String() string {
	if s.LatencyMS == 0 && s.RateRPS == 0 {
		if s.TrainWeight == 0 {
			return "shared"
		}
		return fmt.Sprintf("training weight %g", s.TrainWeight)
	}
	l, r := "shared latency", "shared rate"
	if s.LatencyMS > 0 {
		l = fmt.Sprintf("latency %gms", s.LatencyMS)
	}
	if s.RateRPS > 0 {
		r = fmt.Sprintf("rate %g req/s", s.RateRPS)
	}
	out := l + ", " + r
	if s.TrainWeight > 0 {
		out += fmt.Sprintf(", training weight %g", s.TrainWeight)
	}
	return out
}

// Plan returns the budgets as the controller holds them: rate 0 where the rate is auto
// (the controller measures it), power 0 for no power budget.
func (b Budgets) Plan() plan.Budgets {
	out := plan.Budgets{LatencyMS: b.LatencyMS, PowerMW: b.PowerMW, Quantile: b.Quantile, RhoMax: b.RhoMax}
	if !b.RateAuto {
		out.RateRPS = b.RateRPS
	}
	return out
}

// BudgetsFrom is the wire form of the controller's budgets b (defaults filled); where
// b's rate is auto (0), RateRPS reports measuredRPS.
func BudgetsFrom(b plan.Budgets, measuredRPS float64) Budgets {
	b = b.WithDefaults()
	out := Budgets{LatencyMS: b.LatencyMS, PowerMW: b.PowerMW, RateRPS: b.RateRPS, RateAuto: b.RateRPS == 0, Quantile: b.Quantile, RhoMax: b.RhoMax}
	if out.RateAuto {
		out.RateRPS = measuredRPS
	}
	return out
}
