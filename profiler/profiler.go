// Package profiler measures a workload at a power mode: it applies the mode through a
// board backend, runs warm-up minibatches, then measured ones until the mean minibatch
// time is known to a target relative standard error (the measurement loop and stopping
// rule fulcrumd's live profiler shares: profiler/measure), samples board power while they
// run, and stores the result. Campaigns profile many modes, resumably. docs/profiler.md.
package profiler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fulcrum-edge/fulcrum/internal/stats"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/measure"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// Runner is how a minibatch is run: the simulator's synthetic runner now, a worker
// connection in the daemon later. RunMinibatch runs one minibatch of the workload at the
// board's current mode and returns how long it took (the worker's own measurement, so
// that transport overhead is not counted).
type Runner interface {
	RunMinibatch(ctx context.Context, workload string, role truth.Role, batch int) (time.Duration, error)
}

// Sourcer is implemented by runners that know what their measurements are (store.SourceSim
// for the simulator); the profiler records it in each profile.
type Sourcer interface{ Source() string }

// Clock gives wall-clock timestamps (started_at, finished_at) and, through the monotonic
// reading of time.Now, durations. Tests pass fixed clocks.
type Clock interface{ Now() time.Time }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Options tune one profile. Zero values mean the defaults in brackets.
type Options struct {
	Warmup              int           // minibatches run and discarded first [2]; negative: none
	WarmupTime          time.Duration // and keep warming up until this long has passed [500 ms]; negative: none
	MinSamples          int           // measured minibatches before the stop rule applies [5]
	MaxSamples          int           // cap on measured minibatches [50]
	TargetRSE           float64       // stop when the mean time's relative standard error is at most this [0.02]
	PowerSampleInterval time.Duration // board power reading period while minibatches run [100 ms]
	Source              string        // recorded source; empty: the runner's Source(), else store.SourceTegra
}

// Defaults returns o with the defaults filled in. It is idempotent: a negative
// (no) warm-up stays negative, so that Defaults of Defaults' answer is that answer
// (Rule reads it as none).
func (o Options) Defaults() Options {
	if o.Warmup == 0 {
		o.Warmup = 2
	}
	if o.WarmupTime == 0 {
		o.WarmupTime = 500 * time.Millisecond
	}
	if o.MinSamples <= 0 {
		o.MinSamples = 5
	}
	if o.MaxSamples <= 0 {
		o.MaxSamples = 50
	}
	if o.MaxSamples < o.MinSamples {
		o.MaxSamples = o.MinSamples
	}
	if o.TargetRSE <= 0 {
		o.TargetRSE = 0.02
	}
	if o.PowerSampleInterval <= 0 {
		o.PowerSampleInterval = 100 * time.Millisecond
	}
	return o
}

// Rule is the stopping rule these options give, their defaults filled in (measure.Rule;
// a negative warm-up is none; no minimum measuring time: the sampler reads as the first
// measured minibatch starts, after a warm-up longer than the sensor's averaging window,
// so every point has a reading of its own).
func (o Options) Rule() measure.Rule {
	o = o.Defaults()
	return measure.Rule{Warmup: max(o.Warmup, 0), WarmupTime: max(o.WarmupTime, 0), MinSamples: o.MinSamples, MaxSamples: o.MaxSamples, TargetRSE: o.TargetRSE}
}

// Profiler measures workloads on one board and stores the profiles.
type Profiler struct {
	Backend powermode.Backend
	Runner  Runner
	Store   *store.Store
	Clock   Clock        // nil: the system clock
	Logger  *slog.Logger // nil: slog.Default()
	Options Options
}

func (p *Profiler) clock() Clock {
	if p.Clock == nil {
		return systemClock{}
	}
	return p.Clock
}

func (p *Profiler) logger() *slog.Logger {
	if p.Logger == nil {
		return slog.Default()
	}
	return p.Logger
}

func (p *Profiler) source() string {
	if p.Options.Source != "" {
		return p.Options.Source
	}
	if s, ok := p.Runner.(Sourcer); ok {
		return s.Source()
	}
	return store.SourceTegra
}

// Key is the store key a profile of these arguments gets on this profiler's board.
func (p *Profiler) Key(workload string, role truth.Role, mode powermode.Mode, batch int) store.Key {
	return store.Key{Board: p.Backend.Info().Name, Workload: workload, Role: role, Mode: mode, Batch: batch}
}

// Ensure returns the stored profile for the arguments, or measures and stores it;
// fresh says which. Searchers use it so that no mode is ever profiled twice.
func (p *Profiler) Ensure(ctx context.Context, workload string, role truth.Role, mode powermode.Mode, batch int) (prof store.Profile, fresh bool, err error) {
	prof, err = p.Store.Get(p.Key(workload, role, mode, batch))
	if err == nil {
		return prof, false, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return prof, false, err
	}
	prof, err = p.Profile(ctx, workload, role, mode, batch)
	return prof, err == nil, err
}

// Profile measures workload (in role) at mode and batch, stores the result in one
// transaction and returns it. It refuses (error wrapping store.ErrExists) a key that is
// already stored, before touching the board. The board is left at mode; the caller
// restores its state (campaigns do). On error nothing is stored.
func (p *Profiler) Profile(ctx context.Context, workload string, role truth.Role, mode powermode.Mode, batch int) (store.Profile, error) {
	o := p.Options.Defaults()
	key := p.Key(workload, role, mode, batch)
	if err := key.Validate(); err != nil {
		return store.Profile{}, fmt.Errorf("profile %s: %w", key, err)
	}
	if sp := p.Backend.Space(); sp != nil && !sp.Contains(mode) {
		return store.Profile{}, fmt.Errorf("profile %s: mode %s is not one of the board's modes (see fulcrumctl board info)", key, mode.Human())
	}
	if has, err := p.Store.Has(key); err != nil {
		return store.Profile{}, err
	} else if has {
		return store.Profile{}, fmt.Errorf("profile %s: %w (searchers and campaigns skip stored entries; delete it to re-measure)", key, store.ErrExists)
	}
	if err := p.Backend.Apply(ctx, mode); err != nil {
		return store.Profile{}, fmt.Errorf("profile %s: apply mode: %w", key, err)
	}
	smp := &powerSampler{backend: p.Backend, interval: o.PowerSampleInterval, log: p.logger(), key: key}
	loop := measure.Loop{Rule: p.Options.Rule(), Clock: p.clock(), Meter: smp, Unit: "minibatch"}
	res, err := loop.Run(ctx, func(ctx context.Context) (time.Duration, error) {
		return p.Runner.RunMinibatch(ctx, workload, role, batch)
	})
	if err != nil {
		return store.Profile{}, fmt.Errorf("profile %s: %w", key, err)
	}
	prof := res.Profile(key, p.source())
	if throttled := prof.Throttled; throttled != nil {
		p.logger().Warn("the board throttled while this profile was measured: it is stored marked throttled, with the numbers of the clocks the board ran; profile it again when the board is cool (fulcrumd re-measures it live when it runs cool)",
			"key", key.String(), "gpu_hz_min", throttled.GPUHzMin, "readings", throttled.Readings)
	}
	if prof.Samples >= o.MaxSamples && prof.RSE > o.TargetRSE {
		p.logger().Warn("sample cap reached before the target precision", "key", key.String(), "samples", prof.Samples, "rse", prof.RSE, "target_rse", o.TargetRSE)
	}
	if err := p.Store.Put(prof); err != nil {
		return store.Profile{}, fmt.Errorf("profile %s: %w", key, err)
	}
	return prof, nil
}

// powerSampler is the offline profiler's measure.Meter: it reads board power every
// interval, from the moment it starts (the first measured minibatch is about to run)
// until it stops (the last one has returned). It reads immediately at start, so even a
// single short minibatch gets a reading. Where the backend reads heat it notes
// throttling at each reading too. Warm-up is never sampled.
type powerSampler struct {
	backend  powermode.Backend
	interval time.Duration
	log      *slog.Logger
	key      store.Key

	cancel    context.CancelFunc
	done      chan struct{}
	mu        sync.Mutex
	samples   []float64
	lastErr   error
	throttled *store.Throttled
}

// Ran implements measure.Meter: the sampler reads on its own period, not per minibatch.
func (s *powerSampler) Ran(context.Context, measure.Ran) error { return nil }

// Start implements measure.Meter.
func (s *powerSampler) Start(ctx context.Context, _ time.Time) {
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.interval)
		defer t.Stop()
		for {
			r, err := s.backend.Power(ctx)
			var heat *powermode.HeatReading
			if hs, ok := s.backend.(powermode.HeatSensor); ok {
				if h, herr := hs.Heat(ctx); herr == nil {
					heat = &h
				}
			}
			s.mu.Lock()
			if heat != nil {
				s.throttled = store.NoteHeat(s.throttled, *heat)
			}
			switch {
			case err != nil && ctx.Err() == nil:
				s.lastErr = err
			case err == nil:
				s.samples = append(s.samples, r.TotalMW)
			}
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop implements measure.Meter: it ends sampling and returns the mean and standard
// deviation of the readings and the throttling seen; with no successful reading it
// fails, naming the last read error.
func (s *powerSampler) Stop(_ context.Context, sp measure.Span) (measure.Power, error) {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if sp.Err != nil {
		return measure.Power{}, nil
	}
	if len(s.samples) == 0 {
		return measure.Power{}, fmt.Errorf("no board power reading succeeded while %d minibatches ran (last error: %v): check the power sensors (fulcrumctl board power)", sp.Batches, s.lastErr)
	}
	if s.lastErr != nil {
		s.log.Warn("some power readings failed", "key", s.key.String(), "ok", len(s.samples), "err", s.lastErr)
	}
	mean, sd := stats.MeanStddev(s.samples)
	return measure.Power{MeanMW: mean, StddevMW: sd, Readings: len(s.samples), Throttled: s.throttled}, nil
}
