// Package simworker is a synthetic worker: a training loop or an inference server whose
// minibatches run on the simulated board (powermode/sim), either under fulcrumd (managed:
// it speaks the worker protocol) or on its own (unmanaged: it runs whenever it has work
// and the simulator time-slices the GPU between processes, as the CUDA driver would).
// `fulcrumctl sim worker` runs one; the end-to-end tests and the managed-vs-unmanaged
// comparison run several.
package simworker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto/client"
	"github.com/fulcrum-edge/fulcrum/internal/stats"
	"github.com/fulcrum-edge/fulcrum/internal/tailmodel"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
)

// Options configure one synthetic worker.
type Options struct {
	Role     string // proto.RoleTrain or proto.RoleInfer
	Workload *sim.Workload
	Spec     *powermode.BoardSpec
	Root     string // the simulated board's tree
	// Batch: training minibatch (default the workload's B_T); inference batch to serve
	// (default 8, or the largest of the workload's sizes below it).
	Batch int
	// Inference arrivals: Poisson at RateHz, or the offsets in Trace (from the start).
	RateHz float64
	Trace  []time.Duration
	// Stop after Requests requests (inference; 0: run until ctx ends or the trace ends),
	// Steps minibatches (training; 0: until ctx ends), or Duration (0: no limit).
	Requests int
	Steps    int
	Duration time.Duration
	// Socket is fulcrumd's worker socket; empty runs unmanaged.
	Socket string
	// LatencyBudget is used to count deadline misses in the report (default 100 ms).
	LatencyBudget time.Duration
	Seed          uint64
	// Run, when set, executes one minibatch of the given size instead of the simulator
	// (e.g. CUDA kernels on a real GPU); Workload, Spec and Root are then not used, and
	// Name and BatchSizes describe the workload to fulcrumd.
	Run        func(ctx context.Context, batch int) (time.Duration, error)
	Name       string
	BatchSizes []int
	// MicroBatches (training) are the micro-batch sizes declared to fulcrumd (divisors
	// of Batch, issue 32): a grant's micro_batch then runs that many samples, timed by
	// the workload model at that batch size, and a minibatch counts once its samples add
	// up to Batch. Empty: whole minibatches only.
	MicroBatches []int
	// TrainWhileAway: a training worker whose fulcrumd is away (restarting) trains
	// unmanaged until it is registered again, instead of waiting for it. An inference
	// worker always serves unmanaged while fulcrumd is away.
	TrainWhileAway bool
	// Tail adds heavy-tailed turn times (internal/tailmodel, issue 28): with
	// probability Tail.TailProb a minibatch or batch runs Pareto-long — the simulator's
	// time × the tail's ratio, the extra spent waiting after it; the body is the
	// simulator's own run-to-run noise (the workload's noise_sigma). Zero: no tail.
	Tail tailmodel.Model
}

// Report is what a worker measured, from its own side.
type Report struct {
	Role     string  `json:"role"`
	Workload string  `json:"workload"`
	Managed  bool    `json:"managed"`
	Batch    int     `json:"batch"`
	ElapsedS float64 `json:"elapsed_s"`
	Requests int     `json:"requests,omitempty"`
	Served   int     `json:"served,omitempty"`
	Unserved int     `json:"unserved,omitempty"`
	// Refused: requests fulcrumd refused with rate_limited (the stream asked for more
	// than its share of the GPU); counted apart from served and unserved.
	Refused        int     `json:"refused,omitempty"`
	DeadlineMisses int     `json:"deadline_misses,omitempty"`
	LatencyP50MS   float64 `json:"latency_p50_ms,omitempty"`
	LatencyP99MS   float64 `json:"latency_p99_ms,omitempty"`
	LatencyMaxMS   float64 `json:"latency_max_ms,omitempty"`
	Batches        int     `json:"batches"`
	Samples        int     `json:"samples,omitempty"`
	// MicroTurns counts training turns that ran a micro-batch (part of a minibatch).
	MicroTurns     int     `json:"micro_turns,omitempty"`
	ThroughputPerS float64 `json:"throughput_samples_per_s,omitempty"`
	ProfileBatches int     `json:"profile_batches,omitempty"`
	// While fulcrumd was away: batches run unmanaged, times registered again, the time
	// away in all and the last gap (lost → registered again).
	UnmanagedBatches int     `json:"unmanaged_batches,omitempty"`
	Reconnects       int     `json:"reconnects,omitempty"`
	AwayS            float64 `json:"away_s,omitempty"`
	LastGapS         float64 `json:"last_gap_s,omitempty"`
}

// ReadTrace parses an arrival trace: one arrival per line, seconds since the start
// (e.g. 0.0125); blank lines and # comments are skipped; offsets must not decrease.
func ReadTrace(r io.Reader) ([]time.Duration, error) {
	var out []time.Duration
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f < 0 || math.IsInf(f, 0) {
			return nil, fmt.Errorf("trace line %d: %q is not a non-negative number of seconds", n, s)
		}
		d := time.Duration(f * float64(time.Second))
		if len(out) > 0 && d < out[len(out)-1] {
			return nil, fmt.Errorf("trace line %d: arrival %s is before the previous one; sort the trace", n, s)
		}
		out = append(out, d)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	return out, nil
}

func (o *Options) fill() error {
	if o.Role != proto.RoleTrain && o.Role != proto.RoleInfer {
		return fmt.Errorf("role must be train or infer, got %q", o.Role)
	}
	if o.Run != nil {
		if o.Name == "" || o.Batch <= 0 {
			return errors.New("simworker: a custom minibatch runner needs a workload name and a batch size")
		}
		return o.fillCommon()
	}
	if o.Workload == nil || o.Spec == nil || o.Root == "" {
		return errors.New("simworker: workload, board spec and root are required")
	}
	o.Name = o.Workload.Name
	o.BatchSizes = o.Workload.BatchSizes()
	if string(o.Workload.Role) != o.Role {
		return fmt.Errorf("workload %s is a %s workload, not %s", o.Workload.Name, o.Workload.Role, o.Role)
	}
	if o.Batch <= 0 {
		if o.Role == proto.RoleTrain {
			o.Batch = o.Workload.Batch
		} else {
			o.Batch = 1
			for _, b := range o.Workload.Batches {
				if b <= 8 && b > o.Batch {
					o.Batch = b
				}
			}
		}
	}
	return o.fillCommon()
}

func (o *Options) fillCommon() error {
	if o.Role == proto.RoleInfer && o.RateHz <= 0 && len(o.Trace) == 0 {
		return errors.New("an inference worker needs --rate or --trace")
	}
	if o.LatencyBudget <= 0 {
		o.LatencyBudget = 100 * time.Millisecond
	}
	return nil
}

// Run runs the worker until its stop condition or ctx ends, and reports.
func Run(ctx context.Context, o Options) (Report, error) {
	if err := o.fill(); err != nil {
		return Report{}, err
	}
	if o.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	w := &worker{o: o, rng: rand.New(rand.NewPCG(o.Seed, 0x5eed)),
		rep: Report{Role: o.Role, Workload: o.Name, Managed: o.Socket != "", Batch: o.Batch}}
	if o.Run == nil {
		runner, err := sim.NewRunner(o.Root, o.Spec)
		if err != nil {
			return Report{}, fmt.Errorf("open the simulated board under %s: %w (start it with fulcrumctl sim board)", o.Root, err)
		}
		w.o.Run = func(ctx context.Context, batch int) (time.Duration, error) {
			return runner.Run(ctx, o.Workload, batch, w.rng)
		}
	}
	if o.Tail.TailProb > 0 {
		if err := o.Tail.Validate(); err != nil {
			return Report{}, err
		}
		run, tail := w.o.Run, o.Tail
		// Its own generator: w.rng is drawn from by the runner (and the serving loop).
		trng := rand.New(rand.NewPCG(o.Seed, 0x7a11))
		w.o.Run = func(ctx context.Context, batch int) (time.Duration, error) {
			d, err := run(ctx, batch)
			if err != nil {
				return d, err
			}
			// The body is the simulator's own noise: Stretch adds the tail only.
			extra := tail.Stretch(d, trng) - d
			if extra <= 0 {
				return d, nil
			}
			select {
			case <-time.After(extra):
			case <-ctx.Done():
				return d, ctx.Err()
			}
			return d + extra, nil
		}
	}
	var err error
	if o.Socket != "" {
		reg := client.Registration{Role: o.Role, Workload: o.Name, Batch: o.Batch}
		if o.Role == proto.RoleTrain && len(o.MicroBatches) > 0 {
			reg.MicroBatches = slices.Clone(o.MicroBatches)
		}
		if o.Role == proto.RoleInfer {
			reg.BatchSizes = slices.Clone(o.BatchSizes)
			if !slices.Contains(reg.BatchSizes, o.Batch) {
				reg.BatchSizes = append(reg.BatchSizes, o.Batch)
			}
		}
		c, err := client.Open(ctx, o.Socket, reg, client.SessionOptions{Seed: o.Seed + 1})
		if err != nil {
			return Report{}, err
		}
		defer c.Close()
		w.c = c
	}
	start := time.Now()
	if o.Role == proto.RoleTrain {
		err = w.train(ctx)
	} else {
		err = w.infer(ctx)
	}
	w.rep.ElapsedS = time.Since(start).Seconds()
	if w.c != nil {
		n, away, last := w.c.Stats()
		w.rep.Reconnects, w.rep.AwayS, w.rep.LastGapS = n, away.Seconds(), last.Seconds()
	}
	if w.rep.ElapsedS > 0 {
		w.rep.ThroughputPerS = float64(w.rep.Samples) / w.rep.ElapsedS
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		err = nil // ctx ending is the normal way to stop an open-ended worker
	}
	return w.rep, err
}

type worker struct {
	o   Options
	rng *rand.Rand
	c   *client.Session
	rep Report
}

func (w *worker) run(ctx context.Context, batch int) (time.Duration, error) {
	return w.o.Run(ctx, batch)
}

func (w *worker) train(ctx context.Context) error {
	acc := 0 // samples of the minibatch in progress run as micro-batches
	for w.o.Steps == 0 || w.rep.Batches < w.o.Steps {
		if w.c == nil {
			if _, err := w.run(ctx, w.o.Batch); err != nil {
				return err
			}
			w.rep.Batches++
			w.rep.Samples += w.o.Batch
			continue
		}
		if w.o.TrainWhileAway && !w.c.Connected() {
			ok, err := w.c.TryReconnect(ctx)
			if err != nil {
				return err
			}
			if !ok {
				if _, err := w.run(ctx, w.o.Batch); err != nil {
					return err
				}
				w.rep.Batches++
				w.rep.UnmanagedBatches++
				w.rep.Samples += w.o.Batch
				continue
			}
		}
		var g proto.Msg
		var err error
		if w.o.TrainWhileAway {
			g, err = w.c.AcquireOrAway(ctx)
			if errors.Is(err, client.ErrAway) {
				continue
			}
		} else {
			g, err = w.c.Acquire(ctx) // waits for fulcrumd while it is away
		}
		if err != nil {
			return err
		}
		// A micro-batch grant (issue 32) runs micro_batch samples: one of k turns of the
		// minibatch (gradient accumulation); anything else runs the grant's batch.
		micro := g.Kind == proto.KindTrain && g.MicroBatch > 0 && g.MicroBatch < g.Batch
		n := g.Batch
		if micro {
			n = g.MicroBatch
		}
		d, err := w.run(ctx, n)
		if err != nil {
			return err
		}
		samples := g.Batch
		if g.Kind == proto.KindProfile {
			w.rep.ProfileBatches++
			samples = 0
		} else if micro {
			samples = n
			w.rep.MicroTurns++
			w.rep.Samples += n
			acc += n
			if acc >= g.Batch {
				acc = 0
				w.rep.Batches++
			}
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

// pending are inference requests generated and not yet served.
type pending struct {
	mu       sync.Mutex
	arrived  map[string]time.Time
	order    []string // unmanaged: FIFO
	notify   chan struct{}
	done     bool // no more arrivals will come
	lat      []float64
	misses   int
	requests int
	refused  int
}

// refuse forgets the requests fulcrumd refused (rate_limited): they will not be served.
func (p *pending) refuse(rs []client.Refusal) {
	if len(rs) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range rs {
		if _, ok := p.arrived[r.ID]; ok {
			delete(p.arrived, r.ID)
			p.refused++
		}
	}
}

func (w *worker) arrivals(ctx context.Context, p *pending) {
	defer func() {
		p.mu.Lock()
		p.done = true
		p.mu.Unlock()
		select {
		case p.notify <- struct{}{}:
		default:
		}
	}()
	// Its own generator: the serving loop draws run-to-run noise from w.rng concurrently.
	rng := rand.New(rand.NewPCG(w.o.Seed, 0xa771))
	start := time.Now()
	next := time.Duration(0)
	for i := 0; w.o.Requests == 0 || i < w.o.Requests; i++ {
		if len(w.o.Trace) > 0 {
			if i >= len(w.o.Trace) {
				return
			}
			next = w.o.Trace[i]
		} else {
			next += time.Duration(rng.ExpFloat64() / w.o.RateHz * float64(time.Second))
		}
		if d := time.Until(start.Add(next)); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		id := "q" + strconv.Itoa(i)
		now := time.Now()
		p.mu.Lock()
		p.arrived[id] = now
		p.order = append(p.order, id)
		p.requests++
		p.mu.Unlock()
		if w.c != nil {
			if err := w.c.Arrivals([]proto.Request{{ID: id}}); err != nil {
				return
			}
		}
		select {
		case p.notify <- struct{}{}:
		default:
		}
	}
}

func (p *pending) served(ids []string, now time.Time, budget time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		at, ok := p.arrived[id]
		if !ok {
			continue
		}
		delete(p.arrived, id)
		l := now.Sub(at)
		p.lat = append(p.lat, float64(l)/float64(time.Millisecond))
		if l > budget {
			p.misses++
		}
	}
}

func (w *worker) infer(ctx context.Context) error {
	p := &pending{arrived: map[string]time.Time{}, notify: make(chan struct{}, 1)}
	actx, stopArrivals := context.WithCancel(ctx)
	defer stopArrivals()
	go w.arrivals(actx, p)
	defer w.summarise(p)
	finished := func() bool {
		if w.c != nil {
			p.refuse(w.c.TakeRefused())
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.done && len(p.arrived) == 0
	}
	if w.c == nil {
		return w.inferUnmanaged(ctx, p, finished)
	}
	// Managed: the reader of grants must stop once everything is served, even while an
	// acquire is pending, so Acquire runs under a context cancelled at that point.
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			select {
			case <-gctx.Done():
				return
			case <-p.notify:
				if finished() {
					cancel()
					return
				}
			case <-time.After(20 * time.Millisecond):
				if finished() {
					cancel()
					return
				}
			}
		}
	}()
	for !finished() {
		if !w.c.Connected() {
			// fulcrumd is away: serve what is queued unmanaged until registered again.
			ok, err := w.c.TryReconnect(ctx)
			if err != nil {
				return err
			}
			if !ok {
				if err := w.serveAway(ctx, p); err != nil {
					return err
				}
				continue
			}
		}
		g, err := w.c.AcquireOrAway(gctx)
		if errors.Is(err, client.ErrAway) {
			continue
		}
		if err != nil {
			if gctx.Err() != nil && ctx.Err() == nil {
				return nil // all served
			}
			return err
		}
		d, err := w.run(ctx, g.Batch)
		if err != nil {
			return err
		}
		if g.Kind == proto.KindProfile {
			w.rep.ProfileBatches++
		} else {
			p.served(g.RequestIDs, time.Now(), w.o.LatencyBudget)
			w.rep.Batches++
			w.rep.Samples += len(g.RequestIDs)
		}
		if err := w.c.Release(g.Grant, d, 0, nil); err != nil {
			return err
		}
	}
	return nil
}

// serveAway serves up to a batch of the requests fulcrumd has not granted, while it is
// away, or waits a little for some to arrive.
func (w *worker) serveAway(ctx context.Context, p *pending) error {
	ids := w.c.TakeQueued(w.o.Batch)
	if len(ids) == 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.notify:
		case <-time.After(10 * time.Millisecond):
		}
		return nil
	}
	if _, err := w.run(ctx, len(ids)); err != nil {
		return err
	}
	p.served(ids, time.Now(), w.o.LatencyBudget)
	w.rep.Batches++
	w.rep.UnmanagedBatches++
	w.rep.Samples += len(ids)
	return nil
}

// inferUnmanaged serves whatever is queued (up to the batch size) as soon as the
// previous batch ends: what an inference server does with no scheduler.
func (w *worker) inferUnmanaged(ctx context.Context, p *pending, finished func() bool) error {
	for !finished() {
		p.mu.Lock()
		n := min(len(p.order), w.o.Batch)
		ids := append([]string(nil), p.order[:n]...)
		p.order = p.order[n:]
		p.mu.Unlock()
		if n == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-p.notify:
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		if _, err := w.run(ctx, n); err != nil {
			return err
		}
		p.served(ids, time.Now(), w.o.LatencyBudget)
		w.rep.Batches++
		w.rep.Samples += n
	}
	return nil
}

func (w *worker) summarise(p *pending) {
	if w.c != nil {
		p.refuse(w.c.TakeRefused())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	lat := append([]float64(nil), p.lat...)
	sort.Float64s(lat)
	w.rep.Requests = p.requests
	w.rep.Served = len(lat)
	w.rep.Unserved = len(p.arrived)
	w.rep.Refused = p.refused
	w.rep.DeadlineMisses = p.misses
	if len(lat) > 0 {
		w.rep.LatencyP50MS = stats.Quantile(lat, 0.5)
		w.rep.LatencyP99MS = stats.Quantile(lat, 0.99)
		w.rep.LatencyMaxMS = lat[len(lat)-1]
	}
}
