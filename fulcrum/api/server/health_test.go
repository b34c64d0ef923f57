package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/apitest"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
)

// GET /v1/healthz answers 200 when ready and 503 when not, the checks in the body
// either way, to any caller (a probe needs no rights); other methods are 405.
func TestHealthzStatusCodes(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	refuseAll := server.PolicyFunc(func(api.Caller) error { return errors.New("nobody may change things") })
	sock := apitest.Serve(t, server.Config{Policy: refuseAll}, fake)
	h := api.Health{Ready: true, Checks: []api.HealthCheck{{Name: "store", OK: true}}}
	fake.HealthFunc = func() api.Health { return h }
	for _, tc := range []struct {
		ready bool
		code  int
	}{{true, http.StatusOK}, {false, http.StatusServiceUnavailable}} {
		h.Ready, h.Checks[0].OK = tc.ready, tc.ready
		code, body := rawDo(t, sock, http.MethodGet, "/v1/healthz", "")
		var got api.Health
		if err := json.Unmarshal(body, &got); err != nil || code != tc.code || got.Ready != tc.ready || len(got.Checks) != 1 || got.Checks[0].OK != tc.ready {
			t.Fatalf("ready=%v: HTTP %d %s (%v), want %d with the checks", tc.ready, code, body, err, tc.code)
		}
	}
	if code, body := rawDo(t, sock, http.MethodPost, "/v1/healthz", ""); code != http.StatusMethodNotAllowed || errorOf(t, body).Code != api.CodeMethod {
		t.Fatalf("POST /v1/healthz: HTTP %d %s, want 405", code, body)
	}
}

// POST /v1/budgets/reset is a change: refused by the policy like PUT /v1/budgets, and
// otherwise returns to the budgets the controller started with.
func TestBudgetsResetNeedsRights(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	var allow atomic.Bool
	policy := server.PolicyFunc(func(api.Caller) error {
		if !allow.Load() {
			return fmt.Errorf("refused")
		}
		return nil
	})
	sock := apitest.Serve(t, server.Config{Policy: policy}, fake)
	ctx := context.Background()
	start, _ := fake.Budgets(ctx)
	allow.Store(true)
	c := client.New(sock)
	defer c.Close()
	if _, err := c.SetBudgets(ctx, api.BudgetsUpdate{LatencyMS: ptr(42.0)}); err != nil {
		t.Fatal(err)
	}
	allow.Store(false)
	var ae *api.Error
	if _, err := c.ResetBudgets(ctx); !errors.As(err, &ae) || ae.Status != http.StatusForbidden {
		t.Fatalf("reset by a refused caller: %v, want 403", err)
	}
	if b, _ := fake.Budgets(ctx); b.LatencyMS != 42 {
		t.Fatalf("a refused reset changed the budgets: %+v", b)
	}
	allow.Store(true)
	b, err := c.ResetBudgets(ctx)
	if err != nil || b.LatencyMS != start.LatencyMS {
		t.Fatalf("reset: %+v (%v), want %+v", b, err, start)
	}
	if code, _ := rawDo(t, sock, http.MethodGet, "/v1/budgets/reset", ""); code != http.StatusMethodNotAllowed {
		t.Fatalf("GET /v1/budgets/reset: HTTP %d, want 405", code)
	}
}
