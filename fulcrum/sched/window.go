package sched

import (
	"math"
	"sort"
	"time"
)

// window is a bounded sliding window of timestamped values: at most max samples and none
// older than span. It backs latency quantiles, arrival rates and throughput.
type window struct {
	span time.Duration
	max  int
	at   []time.Time
	v    []float64
	head int // index of the oldest sample in the ring
	n    int
}

func newWindow(span time.Duration, max int) *window {
	return &window{span: span, max: max, at: make([]time.Time, max), v: make([]float64, max)}
}

func (w *window) add(at time.Time, v float64) {
	if w.n == w.max {
		w.head = (w.head + 1) % w.max
		w.n--
	}
	i := (w.head + w.n) % w.max
	w.at[i], w.v[i] = at, v
	w.n++
}

// trim drops samples older than now−span.
func (w *window) trim(now time.Time) {
	cut := now.Add(-w.span)
	for w.n > 0 && w.at[w.head].Before(cut) {
		w.head = (w.head + 1) % w.max
		w.n--
	}
}

func (w *window) values(now time.Time) []float64 {
	w.trim(now)
	out := make([]float64, w.n)
	for k := 0; k < w.n; k++ {
		out[k] = w.v[(w.head+k)%w.max]
	}
	return out
}

// sum returns the sum of values in the window and how long the window covers: span, or
// less when the ring is full of newer samples, or since `since` when that is later.
func (w *window) sum(now, since time.Time) (float64, time.Duration) {
	w.trim(now)
	s := 0.0
	for k := 0; k < w.n; k++ {
		s += w.v[(w.head+k)%w.max]
	}
	start := now.Add(-w.span)
	if w.n == w.max && w.at[w.head].After(start) {
		start = w.at[w.head]
	}
	if since.After(start) {
		start = since
	}
	return s, now.Sub(start)
}

// Quantiles summarises a window of milliseconds.
type Quantiles struct {
	Count int     `json:"count"`
	P50MS float64 `json:"p50_ms"`
	P95MS float64 `json:"p95_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
}

func quantiles(v []float64) Quantiles {
	if len(v) == 0 {
		return Quantiles{}
	}
	sort.Float64s(v)
	return Quantiles{Count: len(v), P50MS: rank(v, 0.50), P95MS: rank(v, 0.95), P99MS: rank(v, 0.99), MaxMS: v[len(v)-1]}
}

// rank is the nearest-rank quantile of sorted v.
func rank(v []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(v)))) - 1
	if i < 0 {
		i = 0
	}
	return v[i]
}

// ewma is an exponentially weighted moving average with a fallback before any sample.
// dev is an EWMA of the absolute deviation from the mean (as TCP's RTT variance), so
// admission can allow for run-to-run spread.
type ewma struct {
	val float64
	dev float64
	n   int
}

func (e *ewma) add(x, alpha float64) {
	if e.n == 0 {
		e.val = x
	} else {
		d := x - e.val
		if d < 0 {
			d = -d
		}
		e.dev = alpha*d + (1-alpha)*e.dev
		e.val = alpha*x + (1-alpha)*e.val
	}
	e.n++
}

// guarded is the mean plus k deviations.
func (e *ewma) guarded(k float64) float64 { return e.val + k*e.dev }
