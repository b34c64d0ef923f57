package profiler

import (
	"math"
	"slices"
)

// summary holds what the stop rule and the stored profile need of a sample.
type summary struct {
	n      int
	mean   float64
	stddev float64 // sample standard deviation (n−1); 0 for one sample
}

func summarize(xs []float64) summary {
	s := summary{n: len(xs)}
	if s.n == 0 {
		return s
	}
	// Welford's update: stable for long runs of nearly equal values.
	var m2 float64
	for i, x := range xs {
		d := x - s.mean
		s.mean += d / float64(i+1)
		m2 += d * (x - s.mean)
	}
	if s.n > 1 {
		s.stddev = math.Sqrt(m2 / float64(s.n-1))
	}
	return s
}

// rse is the relative standard error of the mean: (stddev/√n)/mean. With one sample there
// is no estimate of spread, so it is +Inf (never "precise enough").
func (s summary) rse() float64 {
	if s.n < 2 || s.mean <= 0 {
		return math.Inf(1)
	}
	return s.stddev / math.Sqrt(float64(s.n)) / s.mean
}

// quantile is the q-quantile of xs with linear interpolation between order statistics
// (Hyndman & Fan type 7, numpy's default), so p50 of an even sample is the midpoint.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	h := q * float64(len(s)-1)
	lo := int(math.Floor(h))
	if lo >= len(s)-1 {
		return s[len(s)-1]
	}
	return s[lo] + (h-float64(lo))*(s[lo+1]-s[lo])
}
