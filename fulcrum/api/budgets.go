package api

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/fulcrum-edge/fulcrum/internal/budgettext"
)

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

// Empty reports an update that changes nothing.
func (u BudgetsUpdate) Empty() bool {
	return u.LatencyMS == nil && u.PowerMW == nil && u.RateRPS == nil && u.RateAuto == nil &&
		u.Quantile == nil && u.RhoMax == nil && !u.Shared && u.TrainWeight == nil
}

// WorkloadKey reports whether the decoded JSON body had a "workload" key: one that is
// empty or null is then a mistake, not the shared budgets (the server refuses it).
func (u BudgetsUpdate) WorkloadKey() bool { return u.workloadGiven }

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
	out := budgettext.Shared(b.LatencyMS, b.Quantile, b.PowerMW, b.RateRPS, b.RateAuto)
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
	return budgettext.Stream(s.LatencyMS, s.RateRPS, s.TrainWeight)
}
