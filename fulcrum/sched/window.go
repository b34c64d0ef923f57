package sched

import (
	"slices"
	"time"

	samplestats "github.com/fulcrum-edge/fulcrum/internal/stats" // sched has its own stats type
)

// window is a bounded sliding window of timestamped values: at most max samples and none
// older than span. It backs latency quantiles, arrival rates and throughput. Its ring
// grows with use up to max and shrinks again when compacted, so a workload that is
// registered and never measured costs a few words, not max samples (issue 17: fresh
// workload names used to cost five preallocated 10,000-sample rings each).
type window struct {
	span time.Duration
	max  int
	at   []time.Time
	v    []float64
	head int // index of the oldest sample in the ring
	n    int
}

func newWindow(span time.Duration, max int) *window {
	return &window{span: span, max: max}
}

func (w *window) add(at time.Time, v float64) {
	if w.n == len(w.at) && w.n < w.max {
		w.grow()
	}
	if w.n == w.max {
		w.head = (w.head + 1) % w.max
		w.n--
	}
	i := (w.head + w.n) % len(w.at)
	w.at[i], w.v[i] = at, v
	w.n++
}

// grow doubles the ring (up to max), unrolling it so the oldest sample is at 0.
func (w *window) grow() {
	c := min(max(2*len(w.at), 16), w.max)
	w.resize(c)
}

// resize moves the samples into a ring of capacity c ≥ n, oldest first.
func (w *window) resize(c int) {
	at, v := make([]time.Time, c), make([]float64, c)
	for k := 0; k < w.n; k++ {
		j := (w.head + k) % len(w.at)
		at[k], v[k] = w.at[j], w.v[j]
	}
	w.at, w.v, w.head = at, v, 0
	if c == 0 {
		w.at, w.v = nil, nil
	}
}

// compact drops expired samples and gives back the ring's unused capacity (a workload
// whose workers have all gone keeps only what its window still covers).
func (w *window) compact(now time.Time) {
	w.trim(now)
	if len(w.at) > w.n {
		w.resize(w.n)
	}
}

// trim drops samples older than now−span.
func (w *window) trim(now time.Time) {
	cut := now.Add(-w.span)
	for w.n > 0 && w.at[w.head].Before(cut) {
		w.head = (w.head + 1) % len(w.at)
		w.n--
	}
}

func (w *window) values(now time.Time) []float64 {
	w.trim(now)
	out := make([]float64, w.n)
	for k := 0; k < w.n; k++ {
		out[k] = w.v[(w.head+k)%len(w.at)]
	}
	return out
}

// valuesSince is values of the samples taken at or after since.
func (w *window) valuesSince(now, since time.Time) []float64 {
	w.trim(now)
	var out []float64
	for k := 0; k < w.n; k++ {
		if j := (w.head + k) % len(w.at); !w.at[j].Before(since) {
			out = append(out, w.v[j])
		}
	}
	return out
}

// sum returns the sum of values in the window and how long the window covers: span, or
// less when the ring is full of newer samples, or since `since` when that is later.
func (w *window) sum(now, since time.Time) (float64, time.Duration) {
	w.trim(now)
	s := 0.0
	for k := 0; k < w.n; k++ {
		s += w.v[(w.head+k)%len(w.at)]
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

// quantiles summarises v, sorting it in place (values hands out a fresh copy, so the
// window's hot path allocates nothing more). Quantiles are internal/stats' nearest rank,
// as every profile's p50/p95.
func quantiles(v []float64) Quantiles {
	if len(v) == 0 {
		return Quantiles{}
	}
	slices.Sort(v)
	return Quantiles{Count: len(v), P50MS: samplestats.Quantile(v, 0.50), P95MS: samplestats.Quantile(v, 0.95), P99MS: samplestats.Quantile(v, 0.99), MaxMS: v[len(v)-1]}
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
