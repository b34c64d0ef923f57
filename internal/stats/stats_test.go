package stats

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/stat"
)

func TestQuantileKnown(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1) // 1..100: the q-quantile is 100·q rounded up
	}
	tests := []struct {
		name   string
		sorted []float64
		q      float64
		want   float64
	}{
		{"n=1 p0", []float64{7}, 0, 7},
		{"n=1 p50", []float64{7}, 0.5, 7},
		{"n=1 p100", []float64{7}, 1, 7},
		{"n=2 p0", []float64{1, 2}, 0, 1},
		{"n=2 p50 is the lower value", []float64{1, 2}, 0.5, 1},
		{"n=2 p51", []float64{1, 2}, 0.51, 2},
		{"n=2 p95", []float64{1, 2}, 0.95, 2},
		{"n=5 p20", []float64{1, 2, 3, 4, 5}, 0.2, 1},
		{"n=5 p50", []float64{1, 2, 3, 4, 5}, 0.5, 3},
		{"n=5 p95", []float64{1, 2, 3, 4, 5}, 0.95, 5},
		{"n=100 p1", hundred, 0.01, 1},
		{"n=100 p50", hundred, 0.5, 50},
		{"n=100 p95", hundred, 0.95, 95},
		{"n=100 p99", hundred, 0.99, 99},
		{"n=100 p995", hundred, 0.995, 100},
		{"n=100 p100", hundred, 1, 100},
		{"q below 0 clamps", []float64{1, 2}, -1, 1},
		{"q above 1 clamps", []float64{1, 2}, 2, 2},
	}
	for _, tc := range tests {
		if got := Quantile(tc.sorted, tc.q); got != tc.want {
			t.Errorf("%s: Quantile(%v, %v) = %v, want %v", tc.name, tc.sorted, tc.q, got, tc.want)
		}
	}
	if got := Quantile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("Quantile(empty) = %v, want NaN", got)
	}
}

// TestQuantileIsGonumEmpirical: Quantile is gonum's stat.Empirical estimator, computed
// in O(1) on sorted input.
func TestQuantileIsGonumEmpirical(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 3))
	for range 500 {
		n := 1 + rng.IntN(300)
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = math.Round(100*rng.ExpFloat64()) / 10 // ties happen
		}
		slices.Sort(xs)
		for _, q := range []float64{0, 0.01, 0.05, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1, rng.Float64()} {
			if got, want := Quantile(xs, q), stat.Quantile(q, stat.Empirical, xs, nil); got != want {
				t.Fatalf("n=%d q=%v: Quantile = %v, gonum stat.Empirical = %v", n, q, got, want)
			}
		}
	}
}

func TestMeanStddev(t *testing.T) {
	tests := []struct {
		xs       []float64
		mean, sd float64
	}{
		{[]float64{7}, 7, 0},
		{[]float64{1, 2}, 1.5, math.Sqrt(0.5)},
		{[]float64{1, 2, 3, 4}, 2.5, math.Sqrt(5.0 / 3)},
		{[]float64{5, 1, 4, 2, 3}, 3, math.Sqrt(2.5)},
		{[]float64{10, 10, 10}, 10, 0},
	}
	for _, tc := range tests {
		m, sd := MeanStddev(tc.xs)
		if math.Abs(m-tc.mean) > 1e-12 || math.Abs(sd-tc.sd) > 1e-12 {
			t.Errorf("MeanStddev(%v) = %v, %v; want %v, %v", tc.xs, m, sd, tc.mean, tc.sd)
		}
	}
	if m, sd := MeanStddev(nil); !math.IsNaN(m) || !math.IsNaN(sd) {
		t.Errorf("MeanStddev(empty) = %v, %v; want NaN, NaN", m, sd)
	}
	// Agrees with gonum to rounding on long samples of nearly equal values (the
	// profiler's case: minibatch times within a few % of each other).
	rng := rand.New(rand.NewPCG(1, 1))
	xs := make([]float64, 10000)
	for i := range xs {
		xs[i] = 180 + 3*rng.NormFloat64()
	}
	m, sd := MeanStddev(xs)
	gm, gsd := stat.MeanStdDev(xs, nil)
	if math.Abs(m-gm) > 1e-12*gm || math.Abs(sd-gsd) > 1e-9*gsd {
		t.Errorf("MeanStddev = %v, %v; gonum stat.MeanStdDev = %v, %v", m, sd, gm, gsd)
	}
}

func TestSummarize(t *testing.T) {
	xs := []float64{4, 1, 3, 2}
	s := Summarize(xs)
	want := Summary{N: 4, Mean: 2.5, Stddev: math.Sqrt(5.0 / 3), P50: 2, P95: 4}
	if s.N != want.N || s.Mean != want.Mean || math.Abs(s.Stddev-want.Stddev) > 1e-12 || s.P50 != want.P50 || s.P95 != want.P95 {
		t.Errorf("Summarize(%v) = %+v, want %+v", xs, s, want)
	}
	if !slices.Equal(xs, []float64{4, 1, 3, 2}) {
		t.Errorf("Summarize reordered its input: %v", xs)
	}
	if e := Summarize(nil); e.N != 0 || !math.IsNaN(e.Mean) || !math.IsNaN(e.P50) {
		t.Errorf("Summarize(empty) = %+v, want N 0 and NaNs", e)
	}
}

func TestRSE(t *testing.T) {
	tests := []struct {
		n        int
		mean, sd float64
		want     float64
	}{
		{1, 7, 0, math.Inf(1)},
		{2, 0, 1, math.Inf(1)},
		{2, math.NaN(), 1, math.Inf(1)},
		{4, 2.5, math.Sqrt(5.0 / 3), math.Sqrt(5.0/3) / 2 / 2.5},
		{3, 10, 0, 0},
	}
	for _, tc := range tests {
		got := RSE(tc.n, tc.mean, tc.sd)
		if got != tc.want && math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("RSE(%d, %v, %v) = %v, want %v", tc.n, tc.mean, tc.sd, got, tc.want)
		}
	}
}

// TestMedianIsNearestRank: the median of an even count is the lower middle value (a
// measured one), not the midpoint the scheduler's estimator used to take.
func TestMedianIsNearestRank(t *testing.T) {
	tests := []struct {
		xs   []float64
		want float64
	}{
		{[]float64{7}, 7},
		{[]float64{2, 1}, 1},
		{[]float64{3, 1, 2}, 2},
		{[]float64{110, 250, 110, 250}, 110},
		{[]float64{148, 152, 150, 155, 146, 151, 149, 153}, 150},
	}
	for _, tc := range tests {
		in := slices.Clone(tc.xs)
		if got := Median(tc.xs); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
		if !slices.Equal(in, tc.xs) {
			t.Errorf("Median reordered its input: %v, was %v", tc.xs, in)
		}
	}
	if got := Median(nil); !math.IsNaN(got) {
		t.Errorf("Median(empty) = %v, want NaN", got)
	}
}

// TestPoolIsTheUnion: pooling the summaries of parts of a sample gives the union's size,
// mean and standard deviation, whatever the split.
func TestPoolIsTheUnion(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 1))
	for range 200 {
		n := 2 + rng.IntN(200)
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = 100 + 10*rng.NormFloat64()
		}
		var parts []Summary
		for lo := 0; lo < n; {
			hi := min(n, lo+1+rng.IntN(40))
			parts = append(parts, Summarize(xs[lo:hi]))
			lo = hi
		}
		got, want := Pool(parts), Summarize(xs)
		if got.N != want.N || math.Abs(got.Mean-want.Mean) > 1e-9 || math.Abs(got.Stddev-want.Stddev) > 1e-9 {
			t.Fatalf("Pool of %d parts = N %d mean %v sd %v; the union: N %d mean %v sd %v", len(parts), got.N, got.Mean, got.Stddev, want.N, want.Mean, want.Stddev)
		}
	}
	// The parts' quantiles are weighted by their sizes (the samples are gone).
	p := Pool([]Summary{{N: 1, Mean: 10, P50: 10, P95: 10}, {N: 3, Mean: 20, Stddev: 1, P50: 20, P95: 22}})
	if p.P50 != 17.5 || p.P95 != 19 {
		t.Errorf("pooled p50/p95 = %v/%v, want 17.5/19", p.P50, p.P95)
	}
	if e := Pool(nil); e.N != 0 || !math.IsNaN(e.Mean) {
		t.Errorf("Pool(nil) = %+v, want N 0 and NaN", e)
	}
}
