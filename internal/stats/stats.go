// Package stats is Fulcrum's one definition of sample statistics: the mean, the sample
// standard deviation and the quantiles stored in profiles (the offline profiler, the
// controller's live profiler) and reported by the scheduler's windows (request latency,
// turn wait) and the synthetic workers.
//
// Quantiles are nearest-rank (Hyndman & Fan type 1; gonum's stat.Empirical, which the
// tests check Quantile against): the q-quantile is the smallest sample x with at least
// a fraction q of the samples ≤ x. Why this one:
//   - it is what the scheduler's windows and the live profiler already used, so the
//     controller (whose p99 latency check reads a window) decides exactly as before;
//     only the offline profiler's stored p50/p95 move, and nothing decides on those;
//   - every quantile is a time that was measured: a p99 over budget is a request that
//     was over budget, never a value between two requests;
//   - gonum has it; its interpolating estimator, stat.LinInterp, is type 4 (the median
//     of {1, 2} is 1), not the type 7 (numpy's default) the offline profiler stored.
//
// The price: a median of an even count is the lower middle value, not the midpoint.
package stats

import (
	"math"
	"slices"
)

// Quantile returns the nearest-rank q-quantile of sorted (ascending, no NaN), the
// value at index ⌈q·n⌉−1 (0 for q = 0): the same as gonum's
// stat.Quantile(q, stat.Empirical, sorted, nil), without its O(n) checks and scan,
// because the scheduler calls it on 10,000-sample windows. q is clamped to [0, 1];
// an empty sample gives NaN.
func Quantile(sorted []float64, q float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	q = min(max(q, 0), 1)
	i := int(math.Ceil(q*float64(n))) - 1
	return sorted[min(max(i, 0), n-1)]
}

// MeanStddev returns the mean and the sample standard deviation (n−1 denominator) of
// xs, in two plain passes: the same arithmetic the controller's live profiler always
// used, so its profiles (and plans) stay bit-for-bit what they were. (gonum's
// stat.MeanStdDev agrees to rounding, see the tests, but sums in a different order.)
// One sample has no spread estimate: its standard deviation is 0. An empty sample gives
// NaN, NaN.
func MeanStddev(xs []float64) (mean, stddev float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / float64(len(xs)-1))
}

// Median is the nearest-rank median of xs (Quantile 0.5 of a sorted copy; xs is not
// reordered): for an even count the lower of the two middle values, never their
// midpoint, so the median is always a time that was measured. An empty sample gives NaN.
func Median(xs []float64) float64 {
	sorted := slices.Clone(xs)
	slices.Sort(sorted)
	return Quantile(sorted, 0.5)
}

// Summary is what a profile stores of a sample of minibatch times: its size, mean,
// sample standard deviation and nearest-rank p50 and p95.
type Summary struct {
	N      int
	Mean   float64
	Stddev float64
	P50    float64
	P95    float64
}

// Summarize summarises xs without reordering it (it sorts a copy). An empty sample
// gives N = 0 and NaN statistics.
func Summarize(xs []float64) Summary {
	sorted := slices.Clone(xs)
	slices.Sort(sorted)
	s := Summary{N: len(xs), P50: Quantile(sorted, 0.50), P95: Quantile(sorted, 0.95)}
	s.Mean, s.Stddev = MeanStddev(xs)
	return s
}

// RSE returns the relative standard error of the mean, (stddev/√n)/mean: how precisely
// n samples pin the mean down. With fewer than two samples, or a mean that is not
// positive, there is no such estimate and it is +Inf ("not precise enough").
func RSE(n int, mean, stddev float64) float64 {
	if n < 2 || !(mean > 0) {
		return math.Inf(1)
	}
	return stddev / math.Sqrt(float64(n)) / mean
}

// Pool combines the summaries of separate measurements of one quantity (repeats of a
// profile) into the summary of all their samples: N the total, Mean the sample-weighted
// mean, Stddev the sample standard deviation (n−1) of the union, from each part's mean
// and standard deviation (the within-part sums of squares plus each part's offset from
// the pooled mean). The samples themselves are not kept, so the union's quantiles
// cannot be had: P50 and P95 are the sample-weighted means of the parts'. Parts with
// N = 0 are left out; nothing left gives N = 0 and NaN statistics.
func Pool(parts []Summary) Summary {
	var out Summary
	var sum, p50, p95 float64
	for _, p := range parts {
		if p.N <= 0 {
			continue
		}
		w := float64(p.N)
		out.N += p.N
		sum += p.Mean * w
		p50 += p.P50 * w
		p95 += p.P95 * w
	}
	if out.N == 0 {
		return Summary{Mean: math.NaN(), Stddev: math.NaN(), P50: math.NaN(), P95: math.NaN()}
	}
	n := float64(out.N)
	out.Mean, out.P50, out.P95 = sum/n, p50/n, p95/n
	var ss float64 // the union's sum of squares about the pooled mean
	for _, p := range parts {
		if p.N <= 0 {
			continue
		}
		d := p.Mean - out.Mean
		ss += float64(p.N-1)*p.Stddev*p.Stddev + float64(p.N)*d*d
	}
	if out.N > 1 {
		out.Stddev = math.Sqrt(ss / (n - 1))
	}
	return out
}
