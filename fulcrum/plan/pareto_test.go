package plan

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func bruteFront(x, y []float64) []int {
	var out []int
	for i := range x {
		dominated := false
		for j := range x {
			if j == i {
				continue
			}
			le := x[j] <= x[i] && y[j] <= y[i]
			strict := x[j] < x[i] || y[j] < y[i]
			if le && (strict || j < i) {
				dominated = true
				break
			}
		}
		if !dominated {
			out = append(out, i)
		}
	}
	return out
}

func TestParetoFrontMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for trial := range 200 {
		n := 1 + rng.IntN(60)
		x, y := make([]float64, n), make([]float64, n)
		for i := range n {
			// Coarse values so ties and duplicates happen.
			x[i], y[i] = float64(rng.IntN(8)), float64(rng.IntN(8))
		}
		got, want := ParetoFront(x, y), bruteFront(x, y)
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: x %v y %v: front %v, want %v", trial, x, y, got, want)
		}
	}
}

func TestParetoCandidatesMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	for trial := range 200 {
		n := 1 + rng.IntN(50)
		loX, loY, hiX, hiY := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
		for i := range n {
			mx, my := rng.Float64(), rng.Float64()
			wx, wy := 0.2*rng.Float64(), 0.2*rng.Float64()
			if rng.IntN(4) == 0 {
				wx, wy = 0, 0 // known exactly
			}
			loX[i], hiX[i], loY[i], hiY[i] = mx-wx, mx+wx, my-wy, my+wy
		}
		eps := []float64{0, 0.02}[trial%2]
		got := ParetoCandidates(loX, loY, hiX, hiY, eps)
		for i := range n {
			want := true
			for j := range n {
				if j != i && hiX[j] <= loX[i]+eps && hiY[j] <= loY[i]+eps {
					want = false
				}
			}
			if got[i] != want {
				t.Fatalf("trial %d point %d: keep %v, want %v", trial, i, got[i], want)
			}
		}
	}
}

func TestParetoCandidatesKeepsTheTrueFront(t *testing.T) {
	// With exact boxes (lo = hi) and eps = 0 the candidates are the points that no
	// other point weakly dominates: a superset of the front, never missing a member.
	rng := rand.New(rand.NewPCG(3, 3))
	n := 200
	x, y := make([]float64, n), make([]float64, n)
	for i := range n {
		x[i], y[i] = rng.Float64(), rng.Float64()
	}
	keep := ParetoCandidates(x, y, x, y, 0)
	for _, i := range ParetoFront(x, y) {
		if !keep[i] {
			t.Errorf("front point %d discarded", i)
		}
	}
	nk := 0
	for _, k := range keep {
		if k {
			nk++
		}
	}
	if nk != len(ParetoFront(x, y)) {
		t.Errorf("%d candidates for a front of %d distinct random points", nk, len(ParetoFront(x, y)))
	}
}
