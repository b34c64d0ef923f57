package tailmodel

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The fitted models reproduce the quantiles they were fitted to (docs/runtime.md's table,
// measured p50/p90/p99 of the training minibatch times relative to their median) within
// 15 %, from a seeded source.
func TestFittedTrainQuantiles(t *testing.T) {
	m := PyTorchCPUTrain()
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	v := make([]float64, 100000)
	for i := range v {
		v[i] = m.Ratio(rng)
	}
	slices.Sort(v)
	for _, c := range []struct{ q, measured float64 }{{0.5, 1.00}, {0.9, 1.73}, {0.99, 3.55}} {
		got := v[int(c.q*float64(len(v)))]
		if got < c.measured*0.85 || got > c.measured*1.15 {
			t.Errorf("p%g: model %.2f, measured %.2f", 100*c.q, got, c.measured)
		}
	}
	if v[len(v)-1] > m.TailMax {
		t.Errorf("a draw %.2f beyond tail_max %.2f", v[len(v)-1], m.TailMax)
	}
}

func TestValidateAndNamed(t *testing.T) {
	for _, bad := range []Model{{Sigma: -1}, {TailProb: 1}, {TailProb: 0.1, TailStart: 0.5, TailAlpha: 2, TailMax: 3}, {TailProb: 0.1, TailStart: 2, TailAlpha: 0, TailMax: 3}} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if m, err := Named("none", "train"); err != nil || m != (Model{}) {
		t.Errorf("none: %+v %v", m, err)
	}
	if m, err := Named("pytorch-cpu", "infer"); err != nil || m != PyTorchCPUInfer() {
		t.Errorf("pytorch-cpu infer: %+v %v", m, err)
	}
	if _, err := Named("pareto", "train"); err == nil {
		t.Error("an unknown name accepted")
	}
}

// Stretch adds the tail only: about TailProb of the turns run longer, none shorter, the
// longest at most TailMax × d; a model without a tail changes nothing and draws nothing.
func TestStretchAddsTheTailOnly(t *testing.T) {
	m := PyTorchCPUTrain()
	rng := rand.New(rand.NewPCG(3, 4))
	const n, d = 100000, 100 * time.Millisecond
	longer := 0
	for range n {
		s := m.Stretch(d, rng)
		if s < d || s > time.Duration(m.TailMax*float64(d))+time.Microsecond {
			t.Fatalf("stretched %s to %s", d, s)
		}
		if s > d {
			longer++
		}
	}
	if f := float64(longer) / n; f < m.TailProb*0.9 || f > m.TailProb*1.1 {
		t.Errorf("%.4f of the turns longer, tail probability %.4f", f, m.TailProb)
	}
	a, b := rand.New(rand.NewPCG(5, 6)), rand.New(rand.NewPCG(5, 6))
	if s := (Model{}).Stretch(d, a); s != d {
		t.Errorf("no tail stretched %s to %s", d, s)
	}
	if a.Uint64() != b.Uint64() {
		t.Error("a model without a tail drew from the generator")
	}
}
