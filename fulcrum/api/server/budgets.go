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

// The API's words for a field out of range: the unit and what 0 or rate_auto mean on
// the wire, after plan's range (plan.Limits is the only one).
var rangeHints = map[string]string{
	plan.FieldLatency:  " milliseconds",
	plan.FieldPower:    " milliwatts, or 0 for no power budget (a value below 1000 is probably watts given as mW)",
	plan.FieldRate:     " requests per second, or rate_auto to measure it",
	plan.FieldQuantile: " (e.g. 0.99 for p99)",
	plan.FieldRhoMax:   " (share of GPU time inference may take)",
}

// wireError is err, the targets' update rules or check (plan.Targets.Apply, Validate)
// refusing a change, as the API answers it: 400 bad_budget naming the field of the
// first error, in the API's words for a range, a weight and a workload name.
func wireError(err error) *api.Error {
	if j, ok := err.(interface{ Unwrap() []error }); ok && len(j.Unwrap()) > 0 {
		err = j.Unwrap()[0] // errors.Join: the first is the one answered
	}
	var (
		re *plan.RangeError
		we *plan.WeightRangeError
		fe *plan.FieldError
	)
	switch {
	case errors.As(err, &re):
		return api.Errorf(http.StatusBadRequest, api.CodeBadBudget, re.Field,
			"%s = %v is out of range: want %g to %g%s", re.Field, re.Value, re.Lo, re.Hi, rangeHints[re.Field])
	case errors.As(err, &we):
		return api.Errorf(http.StatusBadRequest, api.CodeBadBudget, plan.FieldTrainWeight,
			"train_weight = %v is out of range: want a share weight from %g to %d (default 1; weights are relative)", we.Value, plan.MinTrainWeight, plan.MaxTrainWeight)
	case errors.Is(err, plan.ErrWorkloadName):
		return api.Errorf(http.StatusBadRequest, api.CodeBadBudget, plan.FieldWorkload, "workload must be the name a worker registers (1 to %d bytes)", proto.MaxNameLen)
	case errors.As(err, &fe):
		return api.Errorf(http.StatusBadRequest, api.CodeBadBudget, fe.Field, "%s", fe.Msg)
	}
	return api.Errorf(http.StatusBadRequest, api.CodeBadBudget, "", "%v", err)
}

// ValidateBudgets checks budgets in the wire's form, as GET /v1/budgets reports them:
// a rate where rate_auto is off, and the targets they carry (plan.Targets.Validate).
// The first field at fault is an *api.Error naming it.
func ValidateBudgets(b api.Budgets) error {
	if !b.RateAuto && b.RateRPS == 0 {
		return wireError(plan.CheckField(plan.FieldRate, 0))
	}
	if err := TargetsOf(b).Validate(); err != nil {
		return wireError(err)
	}
	return nil
}

// ApplyUpdate returns cur with u applied by the targets' update rules
// (plan.Targets.Apply, which validates the result), or an *api.Error (400 bad_budget)
// naming the first field at fault; cur is never changed. The server checks every PUT
// /v1/budgets with it before the Controller sees the update. The workloads' own budgets
// come back in name order, as the controller reports them.
func ApplyUpdate(u api.BudgetsUpdate, cur api.Budgets) (api.Budgets, error) {
	if u.WorkloadKey() && u.Workload == "" {
		// Before: "workload": "" or null set the shared (global) budgets.
		return cur, api.Errorf(http.StatusBadRequest, api.CodeBadBudget, "workload",
			"workload is empty or null: give the name a worker registers, or leave workload out to change the shared budgets")
	}
	t, err := TargetsOf(cur).Apply(TargetsUpdateOf(u))
	if err != nil {
		return cur, wireError(err)
	}
	measured := 0.0
	if cur.RateAuto {
		measured = cur.RateRPS // the rate the controller measured, while it stays auto
	}
	return BudgetsFrom(t, measured), nil
}

// TargetsUpdateOf is the wire's update as plan's update rules take it, field for field.
func TargetsUpdateOf(u api.BudgetsUpdate) plan.TargetsUpdate {
	return plan.TargetsUpdate{Workload: u.Workload, LatencyMS: u.LatencyMS, PowerMW: u.PowerMW, RateRPS: u.RateRPS, RateAuto: u.RateAuto,
		Quantile: u.Quantile, RhoMax: u.RhoMax, TrainWeight: u.TrainWeight, Shared: u.Shared}
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
