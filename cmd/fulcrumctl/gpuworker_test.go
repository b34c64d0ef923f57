package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon"
	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon/simworker"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

func TestGPUWorkerOptionsChecked(t *testing.T) {
	for _, args := range [][]string{
		{"worker", "--role", "infer"},                                    // no rate
		{"worker", "--role", "serve", "--rate", "1"},                     // bad role
		{"worker", "--role", "train", "--kernel", "tensor"},              // bad kernel
		{"worker", "--role", "infer", "--rate", "1", "--infer-ms", "-1"}, // negative time
		{"worker", "--role", "train", "--train-ms", "0"},                 // no time
	} {
		cmd := newGPUCmd()
		cmd.SetArgs(append(args, "--libcuda", filepath.Join(t.TempDir(), "none.so")))
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		err := cmd.ExecuteContext(context.Background())
		// Checked before the driver is loaded: the error is about the flags.
		if err == nil || strings.Contains(err.Error(), "none.so") {
			t.Fatalf("%v: %v", args, err)
		}
	}
}

// sleeper stands in for the GPU kernels (no GPU in CI): it records each minibatch's
// target and sleeps it.
type sleeper struct {
	mu      sync.Mutex
	targets []time.Duration
}

func (s *sleeper) run(ctx context.Context, d time.Duration) (time.Duration, error) {
	s.mu.Lock()
	s.targets = append(s.targets, d)
	s.mu.Unlock()
	start := time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return time.Since(start), ctx.Err()
	case <-t.C:
	}
	return time.Since(start), nil
}

// TestGPUWorkerManaged runs a training and an inference GPU worker against fulcrumd's
// real worker server and scheduler.
func TestGPUWorkerManaged(t *testing.T) {
	budget := 300 * time.Millisecond
	srv := daemon.NewServer(daemon.Config{
		RuntimeDir: t.TempDir(),
		Sched: sched.Config{DefaultTrain: 20 * time.Millisecond, DefaultInfer: 5 * time.Millisecond, DevK: 2,
			Margin: 20 * time.Millisecond},
	})
	srv.Scheduler().SetLatencyBudget(budget) // as a controller would, from the operator's targets
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx) }()
	defer func() { stop(); <-served }()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tctx, stopTrain := context.WithCancel(ctx)
	var train, infer simworker.Report
	var trainErr, inferErr error
	var ts, is sleeper
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		train, trainErr = runGPUWorker(tctx, gpuWorkerOptions{Role: proto.RoleTrain, Workload: "gpu-compute-train",
			Socket: srv.SocketPath(), TrainMS: 20}, ts.run)
	}()
	go func() {
		defer wg.Done()
		defer stopTrain()
		infer, inferErr = runGPUWorker(ctx, gpuWorkerOptions{Role: proto.RoleInfer, Workload: "gpu-compute-infer",
			Socket: srv.SocketPath(), Batch: 4, InferMS: 2, InferPerSampleMS: 1, RateHz: 50, Requests: 30,
			LatencyBudget: budget, Seed: 3}, is.run)
	}()
	wg.Wait()
	if trainErr != nil || inferErr != nil {
		t.Fatalf("train %v, infer %v", trainErr, inferErr)
	}
	if !infer.Managed || infer.Requests != 30 || infer.Served != 30 || infer.Unserved != 0 {
		t.Fatalf("inference report %+v: every request must be served", infer)
	}
	if !train.Managed || train.Batches+train.ProfileBatches < 1 || train.Samples != 32*train.Batches {
		t.Fatalf("training report %+v", train)
	}
	for _, d := range ts.targets {
		if d != 20*time.Millisecond {
			t.Fatalf("training minibatch target %v, want --train-ms", d)
		}
	}
	for _, d := range is.targets {
		if b := (d - 2*time.Millisecond) / time.Millisecond; b < 1 || b > 4 || d != 2*time.Millisecond+b*time.Millisecond {
			t.Fatalf("inference batch target %v: want 2 ms + 1 ms per request, 1..4 requests", d)
		}
	}
}

func TestGPUWorkerUnmanaged(t *testing.T) {
	var s sleeper
	rep, err := runGPUWorker(context.Background(), gpuWorkerOptions{Role: proto.RoleInfer, Workload: "w", Batch: 2,
		InferMS: 1, RateHz: 200, Requests: 12, Seed: 1}, s.run)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Managed || rep.Served != 12 || rep.Samples != 12 || rep.LatencyMaxMS < rep.LatencyP50MS {
		t.Fatalf("report %+v", rep)
	}
	rep, err = runGPUWorker(context.Background(), gpuWorkerOptions{Role: proto.RoleTrain, Workload: "t", Batch: 8,
		TrainMS: 1, Steps: 3}, s.run)
	if err != nil || rep.Batches != 3 || rep.Samples != 24 {
		t.Fatalf("training report %+v %v", rep, err)
	}
}

func TestGPUMinibatchTime(t *testing.T) {
	tr := gpuWorkerOptions{Role: proto.RoleTrain, Batch: 32, TrainMS: 100}
	in := gpuWorkerOptions{Role: proto.RoleInfer, Batch: 8, InferMS: 5, InferPerSampleMS: 1.5, RateHz: 1}
	for _, c := range []struct {
		o     gpuWorkerOptions
		batch int
		want  time.Duration
	}{
		{tr, 32, 100 * time.Millisecond}, {tr, 8, 25 * time.Millisecond},
		{in, 1, 6500 * time.Microsecond}, {in, 8, 17 * time.Millisecond},
	} {
		if got := c.o.minibatchTime(c.batch); got != c.want {
			t.Errorf("%s batch %d: %v, want %v", c.o.Role, c.batch, got, c.want)
		}
	}
}
