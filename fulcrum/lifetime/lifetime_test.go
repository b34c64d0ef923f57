package lifetime_test

import (
	"context"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/lifetime"
	"github.com/fulcrum-edge/fulcrum/internal/testboard"
)

// pair is the real-time end-to-end test's pair (fulcrum/control/e2e): ResNet-18
// training beside ResNet-50 inference at 15 req/s within 400 ms, under 35 W.
func pair(searcher string, d time.Duration, seed int64) lifetime.Scenario {
	return lifetime.Scenario{Board: testboard.AGXOrin, Train: []string{"resnet18-train"},
		Infer:         []lifetime.Stream{{Workload: "resnet50-infer", RateRPS: 15, LatencyMS: 400}},
		PowerBudgetMW: 35000, Searcher: searcher, Duration: d, Seed: seed}
}

func TestSmoke(t *testing.T) {
	start := time.Now()
	res, err := lifetime.Run(context.Background(), pair("gmd", time.Hour, 1))
	t.Logf("real %s", time.Since(start))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res.Events {
		t.Logf("%s %s %s %v", e.Time.Format("15:04:05.000"), e.Kind, e.Reason, e.Err)
	}
	res.Events = nil
	t.Logf("%+v", res)
}
