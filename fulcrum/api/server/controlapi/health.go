package controlapi

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
)

// faults are the optional parts of fulcrumd (the metrics listener): what each serves,
// and the ones that failed, which fulcrumd then runs without, degraded.
type faults struct {
	mu       sync.Mutex
	expected map[string]string // by part ("metrics"): what it serves
	failed   map[string]string // by part: what failed and what to do
}

// Expect names an optional part fulcrumd was configured with, so health reports it
// while it works too (detail: what it serves).
func (a *API) Expect(part, detail string) {
	a.faults.mu.Lock()
	defer a.faults.mu.Unlock()
	if a.faults.expected == nil {
		a.faults.expected = map[string]string{}
	}
	a.faults.expected[part] = detail
}

// SetFault records that an optional part of fulcrumd failed and fulcrumd runs without
// it: an event, a log line, a degraded status and health check (why: what failed and
// what to do).
func (a *API) SetFault(part, why string) {
	a.faults.mu.Lock()
	if a.faults.failed == nil {
		a.faults.failed = map[string]string{}
	}
	a.faults.failed[part] = why
	a.faults.mu.Unlock()
	a.Expect(part, "")
	a.C.Events().Add(control.Event{Kind: control.KindHealth, Reason: fmt.Sprintf("%s failed; fulcrumd runs without it (DEGRADED): %s", part, why), Err: why})
	a.C.Log().Error("running degraded", "part", part, "why", why)
}

// degradedFaults appends the parts that failed to a degraded reason.
func (a *API) degradedFaults(reason string) string {
	a.faults.mu.Lock()
	defer a.faults.mu.Unlock()
	for _, p := range slices.Sorted(maps.Keys(a.faults.failed)) {
		reason = strings.TrimPrefix(reason+"; "+p+": "+a.faults.failed[p], "; ")
	}
	return reason
}

// optionalChecks are the optional parts' health checks, by name.
func (a *API) optionalChecks() []api.HealthCheck {
	a.faults.mu.Lock()
	defer a.faults.mu.Unlock()
	var out []api.HealthCheck
	for _, p := range slices.Sorted(maps.Keys(a.faults.expected)) {
		hc := api.HealthCheck{Name: p, OK: true, Optional: true, Detail: a.faults.expected[p]}
		if why, failed := a.faults.failed[p]; failed {
			hc.OK, hc.Detail = false, why
		}
		out = append(out, hc)
	}
	return out
}

// Health implements server.Controller: the board answers, the profile store answers, the
// control loop goes round (required); configured optional parts (metrics) work.
func (a *API) Health(ctx context.Context) api.Health {
	c := a.C
	var h api.Health
	board := api.HealthCheck{Name: "board", OK: true}
	switch {
	case c.Board() == nil:
		board.Detail = "no board (board: none): scheduling only"
	default:
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := c.Board().Current(ctx)
		cancel()
		if err != nil {
			board.OK, board.Detail = false, fmt.Sprintf("reading the board's mode failed: %v (fulcrumctl board info shows what the board answers)", err)
		} else {
			board.Detail = fmt.Sprintf("%s at %s", c.Board().Info().Name, m.Human())
		}
	}
	st := api.HealthCheck{Name: "store", OK: true}
	if v, err := c.Store().Version(); err != nil {
		st.OK, st.Detail = false, fmt.Sprintf("the profile store does not answer: %v", err)
	} else {
		st.Detail = fmt.Sprintf("%s (schema %d)", c.Store().Path(), v)
	}
	loop := api.HealthCheck{Name: "control_loop"}
	loop.OK, loop.Detail = c.LoopAlive()
	h.Checks = []api.HealthCheck{board, st, loop}
	h.Ready = board.OK && st.OK && loop.OK
	for _, hc := range a.optionalChecks() {
		h.Degraded = h.Degraded || !hc.OK
		h.Checks = append(h.Checks, hc)
	}
	return h
}

// ResetBudgets implements server.Controller.
func (a *API) ResetBudgets(_ context.Context, by api.Caller) (api.Budgets, error) {
	if err := a.C.ResetBudgets(fromAPICaller(by)); err != nil {
		return a.toAPIBudgets(a.C.Targets()), api.Errorf(http.StatusInternalServerError, api.CodeInternal, "", "%v", err)
	}
	return a.toAPIBudgets(a.C.Targets()), nil
}
