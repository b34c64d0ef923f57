package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/apitest"
	"github.com/fulcrum-edge/fulcrum/fulcrum/metrics"
)

func TestCountEvents(t *testing.T) {
	fake := apitest.NewOrin(t, 0) // budgets: 100 ms, 30 W
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fake.Publish(api.EventReplan, "before counting", nil, nil)
	ec := metrics.CountEvents(ctx, fake)
	type meas struct {
		LatencyP99MS float64 `json:"latency_p99_ms"`
		PowerMW      float64 `json:"power_mw"`
	}
	fake.Publish(api.EventReplan, "rate drift", nil, nil)
	fake.Publish(api.EventStepDown, "power over", nil, map[string]any{"measured": meas{LatencyP99MS: 50, PowerMW: 31500}})
	fake.Publish(api.EventStepDown, "both over", nil, map[string]any{"measured": meas{LatencyP99MS: 140, PowerMW: 30100}})
	fake.Publish(api.EventStepDown, "no detail", nil, nil)
	fake.Publish(api.EventApply, "applied", nil, nil)
	waitCounts(t, ec, 5)
	v, d := ec.Counters()
	if d[api.EventReplan] != 1 || d[api.EventStepDown] != 3 || d[api.EventApply] != 1 {
		t.Errorf("decisions %v", d)
	}
	if v["power"] != 2 || v["latency"] != 1 || v["unknown"] != 1 {
		t.Errorf("violations %v", v)
	}
	// Wired into a scrape.
	m := metrics.New(metrics.FromController(fake, ec.Counters), metrics.Options{NoRuntime: true})
	fams := scrape(t, m)
	if got := value(t, fams, "fulcrum_controller_decisions_total", "kind", "step_down"); got != 3 {
		t.Errorf("scraped step_down decisions %v", got)
	}
	if got := value(t, fams, "fulcrum_budget_violations_total", "budget", "power"); got != 2 {
		t.Errorf("scraped power violations %v", got)
	}
	if ec.Lost() != 0 {
		t.Errorf("lost %d", ec.Lost())
	}
}

func waitCounts(t *testing.T, ec *metrics.EventCounts, n uint64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, d := ec.Counters()
		var sum uint64
		for _, v := range d {
			sum += v
		}
		if sum == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("counted %d events, want %d", sum, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
