// Package measure is the one measurement loop of a profile point, shared by the offline
// profiler (profiler.Profiler, fulcrumctl profile) and fulcrumd's live profiler
// (control.LiveProfiler): warm-up batches, then measured batches until one stopping rule
// (Rule) says the point's mean time is known, while a Meter reads board power. How a
// batch is run and how power is read are the caller's; when to stop, and what a
// measurement stores, are decided here only (docs/profiler.md "One measurement loop").
package measure

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"time"

	"github.com/fulcrum-edge/fulcrum/internal/stats"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
)

// Rule is when a point's measurement stops. The profilers differ in its parameters (see
// their Options), never in the rule.
type Rule struct {
	Warmup     int           // batches run and discarded first
	WarmupTime time.Duration // and keep warming up until this long has passed (0: by count only)
	MinSamples int           // measured batches before the rule may stop (at least 1)
	// MinTime: and measure at least this long (0: no minimum), so that a power sensor
	// read at its own period gets readings of short batches.
	MinTime time.Duration
	// TargetRSE: then stop once the mean time's relative standard error,
	// (stddev/√n)/mean, is at most this ...
	TargetRSE float64
	// MaxSamples: ... or once this many batches are measured, precise or not.
	MaxSamples int
}

// limitFactor bounds a measurement that MinTime holds past MaxSamples (batches far
// shorter than MinTime; a clock that does not move): at most limitFactor × MinSamples
// batches.
const limitFactor = 100

// Limit is the most batches a measurement ever takes: MaxSamples, or limitFactor ×
// MinSamples where MinTime holds it longer.
func (r Rule) Limit() int { return max(r.MaxSamples, limitFactor*max(r.MinSamples, 1)) }

// Done says whether n measured batches of this mean and sample standard deviation, over
// elapsed, end the measurement: n ≥ MinSamples and elapsed ≥ MinTime, and then RSE ≤
// TargetRSE or n ≥ MaxSamples; or n ≥ Limit.
func (r Rule) Done(n int, mean, stddev float64, elapsed time.Duration) bool {
	switch {
	case n >= r.Limit():
		return true
	case n < max(r.MinSamples, 1) || elapsed < r.MinTime:
		return false
	default:
		return n >= r.MaxSamples || stats.RSE(n, mean, stddev) <= r.TargetRSE
	}
}

// Clock gives the times a measurement is timed by (time.Now's monotonic reading; a
// fake or virtual clock in tests and in fulcrumd on virtual time).
type Clock interface{ Now() time.Time }

// Batch runs one batch of the point and returns how long it took: the worker's own
// measurement, so that transport and waiting for a turn are not counted.
type Batch func(ctx context.Context) (time.Duration, error)

// Ran is a batch the Meter is told of.
type Ran struct {
	Warmup bool          // a warm-up batch (not measured)
	Took   time.Duration // the batch's own time
	At     time.Time     // when it returned
}

// Span is the measured phase a Meter reads power over.
type Span struct {
	Start, End time.Time // as the first measured batch was about to run; after the last returned
	Batches    int       // measured batches kept
	// Err, when set, is why the measurement failed: Stop only releases what it holds
	// (its answer is ignored).
	Err error
}

// Power is what a Meter read over a measurement.
type Power struct {
	MeanMW, StddevMW float64
	Readings         int              // how many readings the mean is of
	Throttled        *store.Throttled // the throttling seen (nil: none, or no heat sensors)
}

// Meter reads board power while a point is measured.
type Meter interface {
	// Ran is told of every warm-up batch and every measured batch kept, as each
	// returns. An error ends the measurement and is returned as it is (fulcrumd's power
	// guard).
	Ran(ctx context.Context, b Ran) error
	// Start is called once, as the first measured batch is about to run.
	Start(ctx context.Context, at time.Time)
	// Stop is called once after Start, when the measurement ended (or failed: s.Err).
	Stop(ctx context.Context, s Span) (Power, error)
}

// Discard, when a Loop has one, is asked about every measured batch before it counts
// (kept: how many were kept so far): discard leaves the batch out (no sample, not told
// to the Meter); an error ends the measurement.
type Discard func(took time.Duration, kept int) (discard bool, err error)

// Loop measures one point. Its zero Unit is "batch".
type Loop struct {
	Rule    Rule
	Clock   Clock
	Meter   Meter
	Discard Discard // nil: every batch counts
	Unit    string  // what a batch is called in errors ("minibatch" offline)
}

// Result is one measurement of a point.
type Result struct {
	TimesMS    []float64 // the measured batches kept, in the order they ran
	Warmup     int       // warm-up batches run
	Start, End time.Time // the measured phase (Span)
	Power      Power
}

// Run warms up (Rule.Warmup batches, and until Rule.WarmupTime has passed), then runs
// measured batches until Rule.Done, telling the Meter of each, and returns the
// measurement. Errors name the batch (warm-up or measured, counted from 1); a Meter's
// or Discard's error is returned as it is.
func (l Loop) Run(ctx context.Context, run Batch) (Result, error) {
	unit := cmp.Or(l.Unit, "batch")
	r := l.Rule
	var res Result
	// Warm up by count and by time: clocks and caches settle within a few batches, but
	// a power sensor's reading averages some hundreds of ms (the INA3221 ~430 ms), so
	// power read sooner would still include the previous mode.
	for warmStart := l.Clock.Now(); res.Warmup < r.Warmup || (r.WarmupTime > 0 && l.Clock.Now().Sub(warmStart) < r.WarmupTime); {
		d, err := run(ctx)
		if err != nil {
			return Result{}, fmt.Errorf("warm-up %s %d: %w", unit, res.Warmup+1, err)
		}
		res.Warmup++
		if err := l.Meter.Ran(ctx, Ran{Warmup: true, Took: d, At: l.Clock.Now()}); err != nil {
			return Result{}, err
		}
	}
	res.Start = l.Clock.Now()
	l.Meter.Start(ctx, res.Start)
	fail := func(err error) (Result, error) {
		_, _ = l.Meter.Stop(ctx, Span{Start: res.Start, End: l.Clock.Now(), Batches: len(res.TimesMS), Err: err})
		return Result{}, err
	}
	for {
		d, err := run(ctx)
		if err != nil {
			return fail(fmt.Errorf("%s %d: %w", unit, len(res.TimesMS)+1, err))
		}
		if d <= 0 {
			return fail(fmt.Errorf("%s %d: the worker reported a duration of %s; want a positive one", unit, len(res.TimesMS)+1, d))
		}
		now := l.Clock.Now()
		keep := true
		if l.Discard != nil {
			discard, err := l.Discard(d, len(res.TimesMS))
			if err != nil {
				return fail(err)
			}
			keep = !discard
		}
		if keep {
			res.TimesMS = append(res.TimesMS, float64(d)/float64(time.Millisecond))
			if err := l.Meter.Ran(ctx, Ran{Took: d, At: now}); err != nil {
				return fail(err)
			}
		}
		if n := len(res.TimesMS); n > 0 {
			mean, sd := stats.MeanStddev(res.TimesMS)
			if r.Done(n, mean, sd, now.Sub(res.Start)) {
				break
			}
		}
	}
	res.End = l.Clock.Now()
	pw, err := l.Meter.Stop(ctx, Span{Start: res.Start, End: res.End, Batches: len(res.TimesMS)})
	if err != nil {
		return Result{}, err
	}
	res.Power = pw
	return res, nil
}

// RSE is the relative standard error of the measurement's mean time, 0 where there is
// no estimate (one batch): what a profile stores, since the store holds no +Inf.
func (r Result) RSE() float64 {
	mean, sd := stats.MeanStddev(r.TimesMS)
	if rse := stats.RSE(len(r.TimesMS), mean, sd); !math.IsInf(rse, 1) {
		return rse
	}
	return 0
}

// Profile is the stored profile of point k from this measurement, with source: time
// mean, standard deviation and nearest-rank p50/p95 from internal/stats, the Meter's
// power, the phase's timestamps in UTC.
func (r Result) Profile(k store.Key, source string) store.Profile {
	sum := stats.Summarize(r.TimesMS)
	return store.Profile{
		Board: k.Board, Workload: k.Workload, Role: k.Role, Mode: k.Mode, Batch: k.Batch, MicroBatch: k.MicroBatch,
		TimeMS:  store.TimeStats{Mean: sum.Mean, P50: sum.P50, P95: sum.P95, Stddev: sum.Stddev},
		PowerMW: store.PowerStats{Mean: r.Power.MeanMW, Stddev: r.Power.StddevMW},
		Samples: sum.N, PowerSamples: r.Power.Readings, Warmup: r.Warmup,
		StartedAt: r.Start.UTC(), FinishedAt: r.End.UTC(), RSE: r.RSE(), Source: source,
		Throttled: r.Power.Throttled,
	}
}
