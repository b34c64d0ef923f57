package simworker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon"
	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon/simworker"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// TestMicroBatchesUnderABudgetShorterThanAMinibatch is issue 32's simulated target: on
// the simulated AGX Orin at its fastest mode a resnet18 minibatch of 32 takes about
// 102 ms, so beside a 25 req/s camera stream (mobilenetv3, batch 1) with a 60 ms budget
// no mode runs a whole minibatch without making a request miss: the admission test
// keeps it out (and the controller, finding no feasible plan, would pause it). A worker
// that declares micro-batches 4, 8 and 16 keeps training, as turns of the largest that
// fit (8: about 28 ms), and every request is answered. Both runs are logged side by side
// (docs/runtime.md "Micro-batched training turns" reports them). A real-time smoke test:
// it asserts every request answered and fulcrumd's minibatch count matching the
// worker's; that micro-batch turns keep training is asserted on virtual time
// (fulcrum/lifetime TestMicroBatchesKeepTrainingOnVirtualTime).
func TestMicroBatchesUnderABudgetShorterThanAMinibatch(t *testing.T) {
	requests := 250
	if testing.Short() {
		requests = 75
	}
	r := newRig(t)
	budget := 60 * time.Millisecond
	run := func(micro []int) (train, infer simworker.Report, snap sched.Snapshot) {
		t.Helper()
		srv := daemon.NewServer(daemon.Config{
			RuntimeDir: t.TempDir(),
			Sched: sched.Config{DefaultTrain: 150 * time.Millisecond, DefaultInfer: 10 * time.Millisecond,
				DevK: 2, Margin: 10 * time.Millisecond},
		})
		srv.Scheduler().SetLatencyBudget(budget) // as a controller would, from the operator's targets
		if err := srv.Listen(); err != nil {
			t.Fatal(err)
		}
		sctx, stop := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- srv.Serve(sctx) }()
		defer func() { stop(); <-served }()
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		tctx, stopTrain := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var trainErr, inferErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			train, trainErr = simworker.Run(tctx, simworker.Options{Role: proto.RoleTrain, Workload: r.models["resnet18-train"],
				Spec: r.spec, Root: r.root, Socket: srv.SocketPath(), Batch: 32, MicroBatches: micro, Seed: 1})
		}()
		go func() {
			defer wg.Done()
			defer stopTrain()
			infer, inferErr = simworker.Run(ctx, simworker.Options{Role: proto.RoleInfer, Workload: r.models["mobilenetv3-infer"],
				Spec: r.spec, Root: r.root, Socket: srv.SocketPath(), Batch: 1, RateHz: 25, Requests: requests,
				LatencyBudget: budget, Seed: 2})
		}()
		wg.Wait()
		if trainErr != nil || inferErr != nil {
			t.Fatalf("workers: train %v, infer %v", trainErr, inferErr)
		}
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			snap = srv.Snapshot()
			if len(snap.Workers) == 0 || time.Now().After(end) {
				break
			}
		}
		return train, infer, snap
	}

	wholeT, wholeI, _ := run(nil)
	microT, microI, snap := run([]int{4, 8, 16})
	for _, x := range []struct {
		name string
		t, i simworker.Report
	}{{"k = 1 (no micro-batches declared)", wholeT, wholeI}, {"micro-batches 4/8/16 declared", microT, microI}} {
		t.Logf("%s: training %d minibatches, %d micro-batch turns, %.1f samples/s; inference %d/%d served, p50 %.1f ms, p99 %.1f ms, max %.1f ms, %d over the %v budget",
			x.name, x.t.Batches, x.t.MicroTurns, x.t.ThroughputPerS, x.i.Served, x.i.Requests, x.i.LatencyP50MS, x.i.LatencyP99MS, x.i.LatencyMaxMS, x.i.DeadlineMisses, budget)
	}
	tw, _ := snap.Workload(proto.RoleTrain, "resnet18-train")
	iw, _ := snap.Workload(proto.RoleInfer, "mobilenetv3-infer")
	t.Logf("fulcrumd (micro-batches): expected minibatch %.1f ms, micro-batch turns %v ms, starved admits %d, overruns %d; inference p99 %.1f ms (arrival reported → release), %d deadline misses, expected batch %v ms, room %.0f ms",
		tw.ExpectedTrainMS, tw.ExpectedMicroMS, tw.StarvedAdmits, tw.Overruns, iw.Latency.P99MS, iw.DeadlineMisses, iw.ExpectedBatchMS, iw.AdmissionRoomMS)
	if microI.Requests != requests || microI.Served != requests || microI.Unserved != 0 {
		t.Fatalf("inference: %d requests, %d served, %d unserved; every request must be answered", microI.Requests, microI.Served, microI.Unserved)
	}
	// Whether a micro-batch fits the room depends on the turn times this host gives the
	// real-time sim workers: with two busy loops on 2 cores (CI) the first minibatch took
	// 542 ms instead of ~102 and inference missed its deadline alone, so no micro-batch
	// fit and none ran. The behaviour is asserted on virtual time
	// (fulcrum/lifetime TestMicroBatchesKeepTrainingOnVirtualTime); here it is reported.
	if microT.MicroTurns == 0 {
		t.Logf("no micro-batch turn ran in real time on this host (expected minibatch %.1f ms, inference p99 %.1f ms): see the virtual-time test", tw.ExpectedTrainMS, iw.Latency.P99MS)
	}
	if wl, ok := snap.Workload(proto.RoleTrain, "resnet18-train"); !ok || int(wl.Minibatches) != microT.Batches {
		t.Errorf("fulcrumd counted %d training minibatches, the worker %d (a minibatch of micro-batch turns counts once)", wl.Minibatches, microT.Batches)
	}
}
