package main

import (
	"context"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/apitest"
)

// fulcrumctl budget reset returns to the budgets the daemon started with.
func TestBudgetReset(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	sock := apitest.Serve(t, allowAll, fake)
	start, _ := fake.Budgets(context.Background())
	mustRun(t, "budget", "set", "--socket", sock, "--latency", "42ms", "--power", "21W")
	out := mustRun(t, "budget", "reset", "--socket", sock)
	if !strings.Contains(out, "budgets reset to the configuration's: "+start.String()) {
		t.Fatalf("budget reset printed %q", out)
	}
	if b, _ := fake.Budgets(context.Background()); b.LatencyMS != start.LatencyMS || b.PowerMW != start.PowerMW {
		t.Fatalf("after reset: %+v, want %+v", b, start)
	}
}

// fulcrumctl health exits 0 when ready, with an error naming the failed checks when
// not; --live requires the control loop only (a probe that restarts nothing for a
// store failure).
func TestHealthCommand(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	sock := apitest.Serve(t, allowAll, fake)
	answer := api.Health{Ready: true, Degraded: true, Checks: []api.HealthCheck{
		{Name: "board", OK: true, Detail: "agx-orin"}, {Name: "store", OK: true}, {Name: "control_loop", OK: true},
		{Name: "metrics", OK: false, Optional: true, Detail: "address in use"}}}
	fake.HealthFunc = func() api.Health { return answer }
	out := mustRun(t, "health", "--socket", sock)
	if !strings.Contains(out, "READY (DEGRADED)") || !strings.Contains(out, "metrics") || !strings.Contains(out, "address in use") {
		t.Fatalf("health printed %q", out)
	}
	answer.Ready, answer.Checks[1].OK = false, false
	out, _, err := fulcrumctl(context.Background(), "health", "--socket", sock)
	if err == nil || !strings.Contains(err.Error(), "store failed") || !strings.Contains(out, "NOT READY") {
		t.Fatalf("health with the store failed: %q, %v; want an error naming the store", out, err)
	}
	mustRun(t, "health", "--live", "--socket", sock)
	answer.Checks[2].OK = false
	if _, _, err := fulcrumctl(context.Background(), "health", "--live", "--socket", sock); err == nil {
		t.Fatal("health --live with the control loop stuck succeeded")
	}
	if _, _, err := fulcrumctl(context.Background(), "health", "--socket", sock+".missing"); err == nil || !strings.Contains(err.Error(), "is fulcrumd running") {
		t.Fatalf("health without a daemon: %v", err)
	}
}
