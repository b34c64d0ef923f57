package simworker_test

import (
	"context"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/lifetime"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/internal/testboard"
)

// TestManagedTrainAndInferOnVirtualTime is TestManagedTrainAndInfer's assertion on
// virtual time (docs/design.md §9, "Which tests run on virtual time"): fulcrumd's
// scheduler interleaving ResNet-18 training with ResNet-50 inference at 25 req/s within
// 250 ms, no controller (the board held at its preset): every request answered, the p99
// within the budget, training progressing. The real-time test keeps the socket and the
// worker processes' protocol and reports its latencies.
func TestManagedTrainAndInferOnVirtualTime(t *testing.T) {
	const budgetMS = 250.0
	var minibatches uint64
	sc := lifetime.Scenario{Board: testboard.AGXOrin, Train: []string{"resnet18-train"},
		Infer:    []lifetime.Stream{{Workload: "resnet50-infer", RateRPS: 25, LatencyMS: budgetMS}},
		Searcher: "preset", Duration: 60 * time.Second, Seed: 1,
		Probes: []lifetime.Probe{{At: 59 * time.Second, Do: func(in *lifetime.Instant) {
			if wl, ok := in.Snapshot().Workload(proto.RoleTrain, "resnet18-train"); ok {
				minibatches = wl.Minibatches
			}
		}}}}
	start := time.Now()
	res, err := lifetime.Run(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	s := res.Streams[0]
	t.Logf("%s of virtual time in %s real: %d requests, %d served, %d refused, %d late, p99 %.1f ms (budget %.0f ms); training %d minibatches, %.0f samples; mode %s",
		sc.Duration, time.Since(start).Round(time.Millisecond), s.Requests, s.Served, s.Refused, s.Late, s.P99MS, budgetMS, minibatches, res.TrainSamples["resnet18-train"], res.FinalMode.Human())
	// Requests arriving in the last turn's time are still queued at the end.
	if s.Requests < 1000 || s.Refused != 0 || s.Served < s.Requests-10 {
		t.Fatalf("inference: %d requests, %d served, %d refused; every request must be answered", s.Requests, s.Served, s.Refused)
	}
	if s.P99MS <= 0 || s.P99MS > budgetMS {
		t.Errorf("inference p99 %.1f ms exceeds the %.0f ms budget", s.P99MS, budgetMS)
	}
	if minibatches < 50 {
		t.Errorf("training ran %d minibatches in a minute; it must progress between inference batches", minibatches)
	}
}
