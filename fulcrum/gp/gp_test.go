package gp

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
)

// gpTestData samples f at n uniform random points of [0,1]^dim with Gaussian noise.
func gpTestData(rng *rand.Rand, n, dim int, noise float64, f func([]float64) []float64) (x, y [][]float64) {
	for range n {
		p := make([]float64, dim)
		for d := range p {
			p[d] = rng.Float64()
		}
		v := f(p)
		for o := range v {
			v[o] += noise * rng.NormFloat64()
		}
		x, y = append(x, p), append(y, v)
	}
	return x, y
}

func smooth2(p []float64) []float64 {
	return []float64{math.Sin(3*p[0]) + p[1]*p[1], math.Exp(-p[0]) * 10}
}

func TestGPGradientMatchesFiniteDifferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	x, y := gpTestData(rng, 15, 3, 0.05, func(p []float64) []float64 {
		return []float64{p[0] + math.Cos(4*p[1]) - p[2]*p[2], p[2] - p[0]}
	})
	g, err := newGPData(x, y)
	if err != nil {
		t.Fatal(err)
	}
	ws := newGPWork(g)
	th := []float64{-0.5, 0.3, -1.2, 0.2, -4}
	grad := make([]float64, len(th))
	if _, ok := g.lml(ws, th, grad); !ok {
		t.Fatal("lml not defined at the test point")
	}
	for p := range th {
		const h = 1e-5
		up, dn := append([]float64(nil), th...), append([]float64(nil), th...)
		up[p] += h
		dn[p] -= h
		fu, _ := g.lml(ws, up, nil)
		fd, _ := g.lml(ws, dn, nil)
		num := (fu - fd) / (2 * h)
		if math.Abs(num-grad[p]) > 1e-4*math.Max(1, math.Abs(num)) {
			t.Errorf("∂L/∂θ[%d]: analytic %.8g, numeric %.8g", p, grad[p], num)
		}
	}
}

func TestGPFitsSmoothFunction(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	x, y := gpTestData(rng, 40, 2, 0.01, smooth2)
	g, err := Fit(context.Background(), x, y, FitOptions{Rand: rng})
	if err != nil {
		t.Fatal(err)
	}
	var se [2]float64
	const m = 300
	mean := make([]float64, 2)
	var sc Scratch
	for range m {
		p := []float64{rng.Float64(), rng.Float64()}
		g.Predict(p, mean, &sc)
		want := smooth2(p)
		for o := range se {
			se[o] += (mean[o] - want[o]) * (mean[o] - want[o])
		}
	}
	// Output 0 ranges over ~2 units, output 1 over ~6; a good fit is within a few %.
	if rmse := math.Sqrt(se[0] / m); rmse > 0.05 {
		t.Errorf("output 0: RMSE %.4f over the unit square, want ≤ 0.05", rmse)
	}
	if rmse := math.Sqrt(se[1] / m); rmse > 0.05 {
		t.Errorf("output 1: RMSE %.4f over the unit square, want ≤ 0.05", rmse)
	}
}

func TestGPVarianceShrinksAtObservedPoints(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	// Data only in the left half of the square; the right edge is far from all of it.
	x, y := gpTestData(rng, 25, 2, 0.01, smooth2)
	for i := range x {
		x[i][0] *= 0.5
		y[i] = smooth2(x[i])
	}
	g, err := Fit(context.Background(), x, y, FitOptions{Rand: rng})
	if err != nil {
		t.Fatal(err)
	}
	mean := make([]float64, 2)
	prior := math.Sqrt(math.Exp(g.Hyper().LogSignalVar))
	for i, p := range x {
		sd := g.Predict(p, mean, nil)
		if sd > 0.2*prior {
			t.Errorf("observed point %d: posterior sd %.4g, want ≤ 20%% of the prior sd %.4g", i, sd, prior)
		}
	}
	far := g.Predict([]float64{1, 0.5}, mean, nil)
	near := g.Predict(x[0], mean, nil)
	if !(far > 3*near) {
		t.Errorf("posterior sd far from data %.4g, at a data point %.4g: want far ≫ near", far, near)
	}
}

func TestGPFitImprovesLikelihood(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	x, y := gpTestData(rng, 30, 4, 0.02, func(p []float64) []float64 {
		// Depends strongly on dim 0, weakly on 1, not at all on 2 and 3.
		return []float64{math.Sin(5*p[0]) + 0.3*p[1]}
	})
	g, err := Fit(context.Background(), x, y, FitOptions{Rand: rng})
	if err != nil {
		t.Fatal(err)
	}
	def := Hyper{LogLength: []float64{gpDefaultLogL, gpDefaultLogL, gpDefaultLogL, gpDefaultLogL}, LogNoiseVar: gpDefaultNoise}
	before, err := g.LogMarginalLikelihood(def)
	if err != nil {
		t.Fatal(err)
	}
	after, err := g.LogMarginalLikelihood(g.Hyper())
	if err != nil {
		t.Fatal(err)
	}
	if !(after > before+1) {
		t.Errorf("log marginal likelihood %.3f after fitting, %.3f at the default start: want a clear improvement", after, before)
	}
	// ARD: the irrelevant dimensions get longer length scales than the relevant one.
	l := g.Hyper().LogLength
	if !(l[2] > l[0] && l[3] > l[0]) {
		t.Errorf("log length scales %v: want dims 2 and 3 (irrelevant) longer than dim 0", l)
	}
}

func TestNewGPReproducesFittedPredictions(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	x, y := gpTestData(rng, 20, 2, 0.01, smooth2)
	g, err := Fit(context.Background(), x, y, FitOptions{Rand: rng})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(x, y, g.Hyper())
	if err != nil {
		t.Fatal(err)
	}
	m1, m2 := make([]float64, 2), make([]float64, 2)
	for range 50 {
		p := []float64{rng.Float64(), rng.Float64()}
		s1, s2 := g.Predict(p, m1, nil), h.Predict(p, m2, nil)
		if s1 != s2 || m1[0] != m2[0] || m1[1] != m2[1] {
			t.Fatalf("at %v: fitted (%v, %v) vs rebuilt (%v, %v)", p, m1, s1, m2, s2)
		}
	}
}

func TestGPRejectsBadData(t *testing.T) {
	for name, tc := range map[string]struct{ x, y [][]float64 }{
		"empty":      {nil, nil},
		"mismatch":   {[][]float64{{0}, {1}}, [][]float64{{0}}},
		"ragged":     {[][]float64{{0, 1}, {1}}, [][]float64{{0}, {1}}},
		"nan output": {[][]float64{{0}, {1}}, [][]float64{{0}, {math.NaN()}}},
	} {
		if _, err := Fit(context.Background(), tc.x, tc.y, FitOptions{}); err == nil {
			t.Errorf("%s: Fit accepted bad data", name)
		}
	}
}

func TestGPNoiseFloorHolds(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	// Noise-free data: without a floor the fit drives the noise towards zero.
	x, y := gpTestData(rng, 25, 2, 0, smooth2)
	free, err := Fit(context.Background(), x, y, FitOptions{Rand: rand.New(rand.NewPCG(1, 1))})
	if err != nil {
		t.Fatal(err)
	}
	floored, err := Fit(context.Background(), x, y, FitOptions{Rand: rand.New(rand.NewPCG(1, 1)), MinNoiseSD: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	if free.NoiseSD(0) >= 0.05 {
		t.Fatalf("unfloored fit on noise-free data has noise sd %.4g: the test cannot show the floor", free.NoiseSD(0))
	}
	for o := range 2 {
		if got := floored.NoiseSD(o); got < 0.05*(1-1e-9) {
			t.Errorf("output %d: noise sd %.4g below the floor 0.05", o, got)
		}
	}
}
