package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/fulcrum-edge/fulcrum/cuda"
	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon/simworker"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// newGPUCmd is `fulcrumctl gpu`: the CUDA device list and a synthetic worker whose
// minibatches are real GPU kernels (package cuda), so the scheduler can be exercised on
// a real GPU without Python.
func newGPUCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gpu",
		Short: "CUDA devices and a synthetic GPU worker (needs libcuda.so.1)",
	}
	cmd.AddCommand(newGPUInfoCmd(), newGPUWorkerCmd())
	return cmd
}

func newGPUInfoCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "info [--libcuda PATH]",
		Short: "List CUDA devices (name, SMs, compute capability, memory, integrated) as JSON",
		Args:  cobra.NoArgs,
	}
	lib := cmd.Flags().String("libcuda", cuda.DefaultLibrary, "CUDA driver library to load")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		d, err := openCUDA(*lib)
		if err != nil {
			return err
		}
		defer d.Close()
		v, err := d.Version()
		if err != nil {
			return err
		}
		n, err := d.DeviceCount()
		if err != nil {
			return err
		}
		out := struct {
			DriverCUDAVersion int                `json:"driver_cuda_version"`
			Devices           []cuda.DeviceProps `json:"devices"`
		}{DriverCUDAVersion: v}
		for i := range n {
			p, err := d.Device(i)
			if err != nil {
				return err
			}
			out.Devices = append(out.Devices, p)
		}
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	return cmd
}

// openCUDA loads and initialises the driver, with advice when there is none.
func openCUDA(lib string) (*cuda.Driver, error) {
	d, err := cuda.Load(cuda.Options{LibraryPath: lib})
	if err != nil {
		return nil, fmt.Errorf("%w; fulcrumctl sim worker runs synthetic workers without a GPU", err)
	}
	if err := d.Init(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

func newGPUWorkerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker --role train|infer [--worker-socket PATH] [--kernel compute|memory]",
		Short: "Run a synthetic training or inference worker whose minibatches are GPU kernels",
		Long: `worker is fulcrumctl sim worker on a real GPU: each minibatch runs a CUDA kernel
(compute: an FMA loop; memory: a STREAM-style triad) for the time the flags give,
calibrated once at start at the clocks the GPU runs then. When the clocks drop later
(a lower power mode), minibatches take longer, as real ones would.

Training minibatches take --train-ms; an inference batch of b takes
--infer-ms + b × --infer-ms-per-sample. With --socket it is managed by fulcrumd; without
it, it runs unmanaged (training back to back, inference whenever requests are queued)
and the CUDA driver time-slices the GPU between processes.

At the end it prints the same JSON report as fulcrumctl sim worker.`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	var o gpuWorkerOptions
	f.StringVar(&o.Role, "role", "", "train or infer (required)")
	f.StringVar(&o.Workload, "workload", "", "workload name to register (default gpu-KERNEL-ROLE)")
	f.StringVar(&o.Socket, "worker-socket", "", "fulcrumd's worker socket; empty runs unmanaged")
	workerSocketAlias(cmd, &o.Socket)
	f.IntVar(&o.Batch, "batch", 0, "training: samples per minibatch (default 32); inference: batch to serve (default 8)")
	f.Float64Var(&o.TrainMS, "train-ms", 100, "training minibatch time (ms) at the calibration clocks")
	f.Float64Var(&o.InferMS, "infer-ms", 5, "inference batch time, fixed part (ms)")
	f.Float64Var(&o.InferPerSampleMS, "infer-ms-per-sample", 1, "inference batch time per request (ms)")
	f.Float64Var(&o.RateHz, "rate", 0, "inference arrival rate, requests/s (Poisson)")
	f.IntVar(&o.Requests, "requests", 0, "inference: stop after this many requests (0: until --duration)")
	f.IntVar(&o.Steps, "steps", 0, "training: stop after this many minibatches (0: until --duration)")
	f.DurationVar(&o.Duration, "duration", 0, "stop after this long (0: no limit)")
	f.DurationVar(&o.LatencyBudget, "latency", 100*time.Millisecond, "latency budget for counting deadline misses")
	f.Uint64Var(&o.Seed, "seed", 1, "random seed (arrivals)")
	kernel := f.String("kernel", "compute", "compute (FMA loop, SM-clock bound) or memory (triad, memory bound)")
	device := f.Int("device", 0, "CUDA device index")
	lib := f.String("libcuda", cuda.DefaultLibrary, "CUDA driver library to load")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		k, err := cuda.ParseKernel(*kernel)
		if err != nil {
			return err
		}
		if o.Workload == "" {
			o.Workload = "gpu-" + string(k) + "-" + o.Role
		}
		if err := o.fill(); err != nil {
			return err
		}
		d, err := openCUDA(*lib)
		if err != nil {
			return err
		}
		defer d.Close()
		c, err := d.NewContext(*device)
		if err != nil {
			return err
		}
		defer c.Close()
		b, err := c.NewBurner(cmd.Context(), k, cuda.BurnerOptions{})
		if err != nil {
			return err
		}
		defer b.Close()
		fmt.Fprintf(cmd.ErrOrStderr(), "gpu worker: %s (%s, %d SMs), kernel %s, %.3f ms per launch\n",
			c.Props().Name, c.Props().SM(), c.Props().SMCount, k, b.UnitMS())
		rep, err := runGPUWorker(cmd.Context(), o, b.Run)
		if err != nil {
			return err
		}
		return json.NewEncoder(cmd.OutOrStdout()).Encode(rep)
	}
	return cmd
}

// gpuWorkerOptions configure runGPUWorker.
type gpuWorkerOptions struct {
	Role, Workload, Socket string
	Batch                  int
	TrainMS                float64
	InferMS                float64
	InferPerSampleMS       float64
	RateHz                 float64
	Requests, Steps        int
	Duration               time.Duration
	LatencyBudget          time.Duration
	Seed                   uint64
}

func (o *gpuWorkerOptions) fill() error {
	switch o.Role {
	case proto.RoleTrain:
		if o.Batch <= 0 {
			o.Batch = 32
		}
		if o.TrainMS <= 0 {
			return errors.New("--train-ms must be positive")
		}
	case proto.RoleInfer:
		if o.Batch <= 0 {
			o.Batch = 8
		}
		if o.RateHz <= 0 {
			return errors.New("an inference worker needs --rate")
		}
		if o.InferMS < 0 || o.InferPerSampleMS < 0 || o.InferMS+o.InferPerSampleMS <= 0 {
			return errors.New("--infer-ms and --infer-ms-per-sample must not be negative, nor both zero")
		}
	default:
		return fmt.Errorf("--role must be train or infer, got %q", o.Role)
	}
	if o.LatencyBudget <= 0 {
		o.LatencyBudget = 100 * time.Millisecond
	}
	return nil
}

// minibatchTime is how long a minibatch of batch samples runs at the calibration clocks:
// training scales --train-ms linearly from the registered batch (a profile grant may ask
// for another size), inference is --infer-ms + batch × --infer-ms-per-sample.
func (o *gpuWorkerOptions) minibatchTime(batch int) time.Duration {
	ms := o.TrainMS * float64(batch) / float64(o.Batch)
	if o.Role == proto.RoleInfer {
		ms = o.InferMS + o.InferPerSampleMS*float64(batch)
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// runMinibatch runs GPU work for about d and returns the time it took.
type runMinibatch func(ctx context.Context, d time.Duration) (time.Duration, error)

// runGPUWorker runs the synthetic worker loop of package simworker (managed through
// fulcrumd's worker protocol when o.Socket is set, unmanaged otherwise) with run
// executing each minibatch on the GPU for the time the options give its size.
func runGPUWorker(ctx context.Context, o gpuWorkerOptions, run runMinibatch) (simworker.Report, error) {
	if err := o.fill(); err != nil {
		return simworker.Report{}, err
	}
	so := simworker.Options{Role: o.Role, Name: o.Workload, Batch: o.Batch, RateHz: o.RateHz,
		Requests: o.Requests, Steps: o.Steps, Duration: o.Duration, Socket: o.Socket,
		LatencyBudget: o.LatencyBudget, Seed: o.Seed,
		Run: func(ctx context.Context, batch int) (time.Duration, error) {
			return run(ctx, o.minibatchTime(batch))
		}}
	if o.Role == proto.RoleInfer {
		for b := 1; b <= o.Batch; b *= 2 {
			so.BatchSizes = append(so.BatchSizes, b)
		}
		if !slices.Contains(so.BatchSizes, o.Batch) {
			so.BatchSizes = append(so.BatchSizes, o.Batch)
		}
	}
	return simworker.Run(ctx, so)
}
