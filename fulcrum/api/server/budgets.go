package server

import (
	"errors"
	"maps"
	"net/http"
	"slices"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

func outOfRange(field string, v, lo, hi float64, hint string) *api.Error {
	return api.Errorf(http.StatusBadRequest, api.CodeBadBudget, field,
		"%s = %v is out of range: want %g to %g%s", field, v, lo, hi, hint)
}

// checkRange validates one budget field against plan's limits (the only ones), with
// the API's own wording of the unit hint (it names rate_auto and power 0).
func checkRange(field string, v float64, hint string) *api.Error {
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

// ValidateBudgets checks every budget of b; the first field out of range is an
// *api.Error naming it.
func ValidateBudgets(b api.Budgets) error {
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
	if len(b.Streams) > plan.MaxStreamTargets {
		return api.Errorf(http.StatusBadRequest, api.CodeBadBudget, "streams", "%d streams with budgets of their own: at most %d", len(b.Streams), plan.MaxStreamTargets)
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

func checkWeight(w float64) *api.Error {
	if plan.CheckTrainWeight(w) != nil || w == 0 {
		return api.Errorf(http.StatusBadRequest, api.CodeBadBudget, "train_weight",
			"train_weight = %v is out of range: want a share weight from %g to %d (default 1; weights are relative)", w, plan.MinTrainWeight, plan.MaxTrainWeight)
	}
	return nil
}

func checkWorkload(w string) *api.Error {
	if w == "" || len(w) > proto.MaxNameLen {
		return api.Errorf(http.StatusBadRequest, api.CodeBadBudget, "workload", "workload must be the name a worker registers (1 to %d bytes)", proto.MaxNameLen)
	}
	return nil
}

// ApplyUpdate returns cur with u applied, or an *api.Error (400 bad_budget) naming the
// first field out of range; cur is never changed. The server checks every PUT
// /v1/budgets with it before the Controller sees the update.
func ApplyUpdate(u api.BudgetsUpdate, cur api.Budgets) (api.Budgets, error) {
	if u.WorkloadKey() && u.Workload == "" {
		// Before: "workload": "" or null set the shared (global) budgets.
		return cur, api.Errorf(http.StatusBadRequest, api.CodeBadBudget, "workload",
			"workload is empty or null: give the name a worker registers, or leave workload out to change the shared budgets")
	}
	if u.Workload != "" || u.Shared || u.TrainWeight != nil {
		return applyStream(u, cur)
	}
	b := cur
	if u.RateRPS != nil && u.RateAuto != nil && *u.RateAuto {
		return cur, api.Errorf(http.StatusBadRequest, api.CodeBadBudget, "rate_rps",
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
			return cur, api.Errorf(http.StatusBadRequest, api.CodeBadBudget, "rate_auto",
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

// applyStream is ApplyUpdate for one stream's own budgets (u.Workload).
func applyStream(u api.BudgetsUpdate, cur api.Budgets) (api.Budgets, error) {
	if e := checkWorkload(u.Workload); e != nil {
		return cur, e
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"power_mw", u.PowerMW != nil}, {"quantile", u.Quantile != nil}, {"rho_max", u.RhoMax != nil}} {
		if f.set {
			return cur, api.Errorf(http.StatusBadRequest, api.CodeBadBudget, f.name,
				"%s is shared by every workload, not one stream's: set it without workload", f.name)
		}
	}
	if u.Shared && (u.LatencyMS != nil || u.RateRPS != nil || u.RateAuto != nil || u.TrainWeight != nil) {
		return cur, api.Errorf(http.StatusBadRequest, api.CodeBadBudget, "shared",
			"shared = true drops the workload's own budgets; give it alone, or give latency_ms / rate_rps / train_weight without it")
	}
	if u.RateRPS != nil && u.RateAuto != nil && *u.RateAuto {
		return cur, api.Errorf(http.StatusBadRequest, api.CodeBadBudget, "rate_rps",
			"rate_rps = %v and rate_auto = true contradict each other: set one", *u.RateRPS)
	}
	if u.RateAuto != nil && !*u.RateAuto && u.RateRPS == nil {
		return cur, api.Errorf(http.StatusBadRequest, api.CodeBadBudget, "rate_auto",
			"rate_auto = false needs rate_rps: give the stream's arrival rate to plan for")
	}
	sb := api.StreamBudgets{Workload: u.Workload}
	i := slices.IndexFunc(cur.Streams, func(s api.StreamBudgets) bool { return s.Workload == u.Workload })
	if i >= 0 {
		sb = cur.Streams[i]
	}
	if u.Shared {
		sb = api.StreamBudgets{Workload: u.Workload}
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
	case sb == api.StreamBudgets{Workload: u.Workload} && i >= 0:
		b.Streams = slices.Delete(b.Streams, i, i+1)
	case sb == api.StreamBudgets{Workload: u.Workload}:
	case i >= 0:
		b.Streams[i] = sb
	case len(b.Streams) >= plan.MaxStreamTargets:
		return cur, api.Errorf(http.StatusBadRequest, api.CodeBadBudget, "workload",
			"%d streams have budgets of their own (the limit): drop one first (shared = true)", plan.MaxStreamTargets)
	default:
		b.Streams = append(b.Streams, sb)
	}
	if len(b.Streams) == 0 {
		b.Streams = nil
	}
	return b, nil
}

// The wire keeps types of its own (fulcrum/api is a leaf); these are the one
// conversion each way between them and the controller's plan.Targets, field for field
// (budgets_convert_test.go holds them complete).

// TargetsOf returns b as the controller holds them: rate 0 where the rate is auto
// (the controller measures it), power 0 for no power budget, and every workload's own
// targets (StreamTargetOf).
func TargetsOf(b api.Budgets) plan.Targets {
	out := plan.Targets{LatencyMS: b.LatencyMS, PowerMW: b.PowerMW, Quantile: b.Quantile, RhoMax: b.RhoMax}
	if !b.RateAuto {
		out.RateRPS = b.RateRPS
	}
	for _, s := range b.Streams {
		if out.Streams == nil {
			out.Streams = map[string]plan.StreamTarget{}
		}
		out.Streams[s.Workload] = StreamTargetOf(s)
	}
	return out
}

// StreamTargetOf is one workload's own budgets on the wire as the controller holds them.
func StreamTargetOf(s api.StreamBudgets) plan.StreamTarget {
	return plan.StreamTarget{LatencyMS: s.LatencyMS, RateRPS: s.RateRPS, TrainWeight: s.TrainWeight}
}

// StreamBudgetsOf is the wire form of a workload's own targets.
func StreamBudgetsOf(workload string, t plan.StreamTarget) api.StreamBudgets {
	return api.StreamBudgets{Workload: workload, LatencyMS: t.LatencyMS, RateRPS: t.RateRPS, TrainWeight: t.TrainWeight}
}

// BudgetsFrom is the wire form of the controller's targets t (defaults filled; the
// workloads' own in name order); where t's rate is auto (0), RateRPS reports
// measuredRPS.
func BudgetsFrom(t plan.Targets, measuredRPS float64) api.Budgets {
	t = t.WithDefaults()
	out := api.Budgets{LatencyMS: t.LatencyMS, PowerMW: t.PowerMW, RateRPS: t.RateRPS, RateAuto: t.RateRPS == 0, Quantile: t.Quantile, RhoMax: t.RhoMax}
	if out.RateAuto {
		out.RateRPS = measuredRPS
	}
	for _, w := range slices.Sorted(maps.Keys(t.Streams)) {
		out.Streams = append(out.Streams, StreamBudgetsOf(w, t.Streams[w]))
	}
	return out
}
