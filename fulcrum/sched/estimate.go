package sched

import (
	"slices"
	"time"

	samplestats "github.com/fulcrum-edge/fulcrum/internal/stats"
)

// The estimator's knobs. They are not configuration: they describe what counts as a
// change of regime, which does not depend on the workload's scale (every test is relative
// or in units of the measured spread).
const (
	// estWindow is how many of the current regime's latest measurements the expected
	// time is taken from.
	estWindow = 8
	// estSwitch consecutive measurements outside the band on the same side start a new
	// regime: the window restarts from them. Fewer are outliers and barely move the
	// median.
	estSwitch = 3
	// The band is the median ± max(estBandDev deviations, estBandRel × median), at most
	// estBandMaxRel × median: a regime measured while the host was contended spreads so
	// much that three spreads would keep even a return to half its time inside the band.
	estBandDev    = 3.0
	estBandRel    = 0.2
	estBandMaxRel = 0.35
	// Warm-up ends when the last estSwitch measurements lie within ±estSettleRel of their
	// median, or after estWarmMax measurements whatever they are.
	estSettleRel = 0.25
	estWarmMax   = 10
	// diffToMeanDev turns the median of successive differences |xᵢ − xᵢ₋₁| into the mean
	// absolute deviation of normal noise (√(2/π) / (0.6745·√2)), so that dev_k means what
	// it meant with the EWMA of absolute deviations this replaces.
	diffToMeanDev = 0.8365
)

// estimate is the expected duration (ms) of one kind of turn — a workload's training
// minibatch, or its inference or profile batch of one size — from its latest measured
// releases.
//
// An EWMA (α = 0.2) of the durations, which this replaces, needed dozens of measurements
// to forget a slow phase (another process starting, a thermal throttle), and a
// workload whose expected time had risen above what the latency budget admits was
// measured again only once per starvation period: training stayed starved for minutes.
// Here the expected time is the median (nearest rank, internal/stats: of an even count
// the lower middle value, a measured time) of the current regime's last estWindow
// measurements, so a burst of fewer than estSwitch outliers barely moves it, and
// estSwitch measurements in a row outside the band make a new regime at once, in either
// direction. While the latest measurements are below the band (the estimate is stale
// and too long), starveAfter shortens the starvation wait, so those few measurements
// come within seconds even when the admission test keeps the workload out.
//
// Warm-up: until the times settle (estSettleRel), the latest measurement is the
// expected time, with the assumed spread ExpectedDevRel; early measurements (allocator,
// autotuning, lazy initialisation) are then dropped.
type estimate struct {
	n       int       // measurements and seeds taken; 0: unknown (the configured default applies)
	win     []float64 // the current regime's latest measurements, oldest first
	settled bool      // warm-up is over
	run     int       // consecutive latest measurements outside the band: > 0 above, < 0 below
	prior   float64   // the deviation given with a seed, used until a measurement comes
}

// seededEstimate expects ms with deviation dev (from a stored profile), as settled.
func seededEstimate(ms, dev float64) *estimate {
	return &estimate{n: 1, win: []float64{ms}, settled: true, prior: dev}
}

// add folds in one measured duration (ms).
func (e *estimate) add(x float64) {
	e.n++
	e.prior = 0
	if !e.settled {
		e.push(x)
		if len(e.win) >= estSwitch {
			last := e.win[len(e.win)-estSwitch:]
			m := samplestats.Median(last)
			agree := slices.Max(last) <= m*(1+estSettleRel) && slices.Min(last) >= m*(1-estSettleRel)
			if agree || e.n >= estWarmMax {
				e.settled = true
				e.win = slices.Clone(last)
			}
		}
		return
	}
	v := e.value()
	band := e.band(v)
	side := 0
	switch {
	case x > v+band:
		side = 1
	case x < v-band:
		side = -1
	}
	switch {
	case side == 0:
		e.run = 0
	case e.run*side > 0:
		e.run += side
	default:
		e.run = side
	}
	e.push(x)
	if k := abs(e.run); k >= estSwitch {
		e.win = slices.Clone(e.win[len(e.win)-k:])
		e.run = 0
	}
}

func (e *estimate) push(x float64) {
	e.win = append(e.win, x)
	if len(e.win) > estWindow {
		e.win = slices.Delete(e.win, 0, len(e.win)-estWindow)
	}
}

// value is the expected duration (ms) without the spread.
func (e *estimate) value() float64 {
	if len(e.win) == 0 {
		return 0
	}
	if !e.settled {
		return e.win[len(e.win)-1]
	}
	return samplestats.Median(e.win)
}

// dev is the run-to-run spread (ms) around value.
func (e *estimate) dev() float64 {
	switch {
	case len(e.win) == 0:
		return 0
	case e.prior > 0:
		return e.prior
	case !e.settled:
		return ExpectedDevRel * e.value()
	}
	return e.noise()
}

// band is how far from the median v a measurement may fall and still belong to the
// regime. It uses the noise, not the tail: a drift inside the window would widen a
// deviation from the median until nothing fell outside the band. Until the window is
// full it is estBandRel alone: the differences in a young window are mostly the step
// that started the regime, and a band that wide would keep the next step inside it.
func (e *estimate) band(v float64) float64 {
	if len(e.win) < estWindow {
		return estBandRel * v
	}
	return min(max(estBandDev*e.noise(), estBandRel*v), estBandMaxRel*v)
}

// noise is the run-to-run spread (ms) from the median difference between successive
// measurements: it grows neither with a drift or step inside the window nor with
// outliers. A regime with fewer than estWindow/2 measurements is assumed to spread by
// ExpectedDevRel: the median of two or three differences is mostly the step that
// started it.
func (e *estimate) noise() float64 {
	if len(e.win) < estWindow/2 {
		return ExpectedDevRel * e.value()
	}
	d := make([]float64, len(e.win)-1)
	for i := range d {
		d[i] = abs(e.win[i+1] - e.win[i])
	}
	return diffToMeanDev * samplestats.Median(d)
}

// upper is the second-largest measurement in the window (ms): slow minibatches that
// keep recurring (a host busy with something else a fifth of the time) raise it, so the
// deadlines they would break are protected, while one outlier does not.
func (e *estimate) upper() float64 {
	if len(e.win) < 2 {
		return e.value()
	}
	v := slices.Clone(e.win)
	slices.Sort(v)
	return v[len(v)-2]
}

// typical is the median (ms) of every measurement held, warm-up included: a cost that
// one slow measurement does not set (during warm-up value is the latest measurement,
// and with heavy tails an inference batch may take 28× its median).
func (e *estimate) typical() float64 {
	if len(e.win) == 0 {
		return 0
	}
	return samplestats.Median(e.win)
}

// guarded is what deadline decisions use (ms): the expected duration plus k deviations,
// and, once settled with k > 0, no less than the second-largest measurement in the
// window (a recurring tail). k = 0 is the median alone.
func (e *estimate) guarded(k float64) float64 {
	g := e.value() + k*e.dev()
	if k > 0 && e.settled && e.prior == 0 {
		g = max(g, e.upper())
	}
	return g
}

// starveAfter is how long a training worker that the admission test keeps out waits
// before the starvation rule admits it anyway, for a configured wait of base: much
// shorter while the latest measurements came in below the band, so that a stale,
// too-long estimate is re-measured within seconds rather than once per base; shorter
// while the estimate is doubtful: during warm-up, while a new regime has fewer than
// estWindow/2 measurements (three slow minibatches in a row may be a host hiccup that
// is already over), and while the guard is held up by slow measurements (the tail) but
// the latest one was normal — they leave the window only as new measurements come.
func (e *estimate) starveAfter(base time.Duration) time.Duration {
	switch {
	case e.run < 0:
		return base >> (2 * -e.run) // ÷4, ÷16
	case e.n > 0 && !e.settled:
		return base / 4
	case e.settled && e.prior == 0 && len(e.win) < estWindow/2:
		return base / 4
	case e.settled && len(e.win) > 0 && e.win[len(e.win)-1] <= e.value()+e.band(e.value())/2 &&
		e.upper() > e.value()+e.band(e.value())/2:
		return base / 4
	}
	return base
}

func abs[T int | float64](x T) T {
	if x < 0 {
		return -x
	}
	return x
}
