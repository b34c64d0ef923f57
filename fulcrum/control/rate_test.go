package control

import (
	"testing"
	"time"
)

// A rate change is drift when it is past drift_rel and past 3 σ of the meters' Poisson
// noise: at 15 req/s (τ 2 s) 12.4 → 18.4/s, the noise's size, is none, a doubling or a halving is;
// at 150 req/s the 25 % band binds.
func TestRateDriftedAsksForMoreThanTheNoise(t *testing.T) {
	tau := 2 * time.Second
	for _, c := range []struct {
		rate, planned float64
		want          bool
	}{{18.4, 12.4, false}, {19.7, 15, false}, {30, 15, true}, {7, 15, true}, {24, 15, false}, {190, 150, true}, {180, 150, false}, {5, 0, false}} {
		if got := rateDrifted(c.rate, c.planned, 0.25, tau, false); got != c.want {
			t.Errorf("%.1f/s planned %.1f/s: drifted %v, want %v", c.rate, c.planned, got, c.want)
		}
	}
	// Once started, a drift holds while the change stays past 2.5 σ (at 15 req/s about
	// 7.5/s) and drift_rel.
	if !rateDrifted(23, 15, 0.25, tau, true) || rateDrifted(22, 15, 0.25, tau, true) || rateDrifted(23, 15, 0.25, tau, false) {
		t.Error("a pending drift is not judged at 2.5 σ")
	}
}

// A request counter that goes back (the workload forgotten and registered again) starts
// the meter afresh: the wrapped difference read as ~10¹⁹ requests before.
func TestRateMeterCounterGoesBack(t *testing.T) {
	t0 := time.Unix(0, 0)
	warm, tau := 2*time.Second, 2*time.Second
	r := rateMeter{since: t0, planned: 20}
	for i := range 100 { // 20 req/s for 10 s
		r.observe(uint64(i), t0.Add(time.Duration(i)*50*time.Millisecond), warm, tau)
	}
	if r.rate < 15 || r.rate > 25 {
		t.Fatalf("rate %.1f/s at 20 req/s", r.rate)
	}
	at := t0.Add(5 * time.Second)
	r.observe(3, at, warm, tau)
	if r.rate != 0 || !r.since.Equal(at) || r.planned != 20 {
		t.Fatalf("after the counter went back: rate %g, since %v, planned %g; want 0, %v, 20 (warming up again, the plan's rate kept)", r.rate, r.since, r.planned, at)
	}
	for i := 1; i <= 40; i++ {
		r.observe(uint64(3+i), at.Add(time.Duration(i)*50*time.Millisecond), warm, tau)
	}
	if r.rate < 15 || r.rate > 25 {
		t.Fatalf("rate %.1f/s at 20 req/s after the restart", r.rate)
	}
}
