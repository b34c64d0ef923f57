package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/fulcrum-edge/fulcrum/cuda"
	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon/simworker"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto/client"
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
		Use:   "worker --role train|infer [--socket PATH] [--kernel compute|memory]",
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
	f.StringVar(&o.Socket, "socket", "", "fulcrumd's worker socket; empty runs unmanaged")
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

// runGPUWorker is the worker loop: managed through fulcrumd's worker protocol when
// o.Socket is set, unmanaged otherwise. run executes one minibatch on the GPU.
func runGPUWorker(ctx context.Context, o gpuWorkerOptions, run runMinibatch) (simworker.Report, error) {
	if err := o.fill(); err != nil {
		return simworker.Report{}, err
	}
	if o.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	w := &gpuWorker{o: o, run: run, rep: simworker.Report{Role: o.Role, Workload: o.Workload, Managed: o.Socket != "", Batch: o.Batch}}
	if o.Socket != "" {
		reg := client.Registration{Role: o.Role, Workload: o.Workload, Batch: o.Batch}
		if o.Role == proto.RoleInfer {
			for b := 1; b <= o.Batch; b *= 2 {
				reg.BatchSizes = append(reg.BatchSizes, b)
			}
			if !slices.Contains(reg.BatchSizes, o.Batch) {
				reg.BatchSizes = append(reg.BatchSizes, o.Batch)
			}
		}
		c, err := client.Dial(ctx, o.Socket, reg)
		if err != nil {
			return w.rep, err
		}
		defer c.Close()
		w.c = c
	}
	start := time.Now()
	var err error
	if o.Role == proto.RoleTrain {
		err = w.train(ctx)
	} else {
		err = w.infer(ctx)
	}
	w.rep.ElapsedS = time.Since(start).Seconds()
	if w.rep.ElapsedS > 0 {
		w.rep.ThroughputPerS = float64(w.rep.Samples) / w.rep.ElapsedS
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		err = nil // the normal end of an open-ended worker
	}
	return w.rep, err
}

type gpuWorker struct {
	o   gpuWorkerOptions
	run runMinibatch
	c   *client.Client
	rep simworker.Report
}

func (w *gpuWorker) minibatch(ctx context.Context, batch int) (time.Duration, error) {
	return w.run(ctx, w.o.minibatchTime(batch))
}

func (w *gpuWorker) train(ctx context.Context) error {
	for w.o.Steps == 0 || w.rep.Batches < w.o.Steps {
		if w.c == nil {
			if _, err := w.minibatch(ctx, w.o.Batch); err != nil {
				return err
			}
			w.rep.Batches++
			w.rep.Samples += w.o.Batch
			continue
		}
		g, err := w.c.Acquire(ctx)
		if err != nil {
			return err
		}
		d, err := w.minibatch(ctx, g.Batch)
		if err != nil {
			return err
		}
		samples := g.Batch
		if g.Kind == proto.KindProfile {
			w.rep.ProfileBatches++
			samples = 0
		} else {
			w.rep.Batches++
			w.rep.Samples += g.Batch
		}
		if err := w.c.Release(g.Grant, d, samples, nil); err != nil {
			return err
		}
	}
	return nil
}

// gpuQueue holds inference requests that arrived and are not yet served.
type gpuQueue struct {
	mu       sync.Mutex
	arrived  map[string]time.Time
	order    []string // unmanaged: FIFO
	notify   chan struct{}
	done     bool // no more arrivals
	lat      []float64
	misses   int
	requests int
}

func (q *gpuQueue) wake() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *gpuQueue) finished() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.done && len(q.arrived) == 0
}

func (q *gpuQueue) served(ids []string, now time.Time, budget time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, id := range ids {
		at, ok := q.arrived[id]
		if !ok {
			continue
		}
		delete(q.arrived, id)
		l := now.Sub(at)
		q.lat = append(q.lat, float64(l)/float64(time.Millisecond))
		if l > budget {
			q.misses++
		}
	}
}

// arrivals generates Poisson arrivals until ctx ends or o.Requests have arrived.
func (w *gpuWorker) arrivals(ctx context.Context, q *gpuQueue) {
	defer func() {
		q.mu.Lock()
		q.done = true
		q.mu.Unlock()
		q.wake()
	}()
	rng := rand.New(rand.NewPCG(w.o.Seed, 0xa771))
	start := time.Now()
	var next time.Duration
	for i := 0; w.o.Requests == 0 || i < w.o.Requests; i++ {
		next += time.Duration(rng.ExpFloat64() / w.o.RateHz * float64(time.Second))
		t := time.NewTimer(time.Until(start.Add(next)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		id := "q" + strconv.Itoa(i)
		q.mu.Lock()
		q.arrived[id] = time.Now()
		q.order = append(q.order, id)
		q.requests++
		q.mu.Unlock()
		if w.c != nil {
			if err := w.c.Arrivals([]proto.Request{{ID: id}}); err != nil {
				return
			}
		}
		q.wake()
	}
}

func (w *gpuWorker) infer(ctx context.Context) error {
	q := &gpuQueue{arrived: map[string]time.Time{}, notify: make(chan struct{}, 1)}
	actx, stopArrivals := context.WithCancel(ctx)
	defer stopArrivals()
	go w.arrivals(actx, q)
	defer w.summarise(q)
	if w.c == nil {
		return w.inferUnmanaged(ctx, q)
	}
	// Acquire runs under a context cancelled once everything is served, so a pending
	// acquire does not outlive the work.
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-gctx.Done():
				return
			case <-q.notify:
			case <-tick.C:
			}
			if q.finished() {
				cancel()
				return
			}
		}
	}()
	for !q.finished() {
		g, err := w.c.Acquire(gctx)
		if err != nil {
			if gctx.Err() != nil && ctx.Err() == nil {
				return nil // all served
			}
			return err
		}
		// A batch dispatched early (a deadline) holds fewer requests than its size and
		// runs for what it holds; a profiling grant carries none and runs g.Batch.
		n := len(g.RequestIDs)
		if n == 0 {
			n = max(g.Batch, 1)
		}
		d, err := w.minibatch(ctx, n)
		if err != nil {
			return err
		}
		if g.Kind == proto.KindProfile {
			w.rep.ProfileBatches++
		} else {
			q.served(g.RequestIDs, time.Now(), w.o.LatencyBudget)
			w.rep.Batches++
			w.rep.Samples += len(g.RequestIDs)
		}
		if err := w.c.Release(g.Grant, d, 0, nil); err != nil {
			return err
		}
	}
	return nil
}

// inferUnmanaged serves whatever is queued, up to the batch size, as soon as the
// previous batch ends: an inference server with no scheduler.
func (w *gpuWorker) inferUnmanaged(ctx context.Context, q *gpuQueue) error {
	for !q.finished() {
		q.mu.Lock()
		n := min(len(q.order), w.o.Batch)
		ids := append([]string(nil), q.order[:n]...)
		q.order = q.order[n:]
		q.mu.Unlock()
		if n == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-q.notify:
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		if _, err := w.minibatch(ctx, n); err != nil {
			return err
		}
		q.served(ids, time.Now(), w.o.LatencyBudget)
		w.rep.Batches++
		w.rep.Samples += n
	}
	return nil
}

func (w *gpuWorker) summarise(q *gpuQueue) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w.rep.Requests = q.requests
	w.rep.Served = len(q.lat)
	w.rep.Unserved = len(q.arrived)
	w.rep.DeadlineMisses = q.misses
	if len(q.lat) == 0 {
		return
	}
	lat := slices.Clone(q.lat)
	sort.Float64s(lat)
	w.rep.LatencyP50MS = gpuQuantile(lat, 0.50)
	w.rep.LatencyP99MS = gpuQuantile(lat, 0.99)
	w.rep.LatencyMaxMS = lat[len(lat)-1]
}

// gpuQuantile is the nearest-rank q-quantile of sorted values.
func gpuQuantile(sorted []float64, q float64) float64 {
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
