package control

import (
	"math"
	"math/rand/v2"
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
		r.observe(uint64(i), t0.Add(time.Duration(i)*50*time.Millisecond), warm, tau, 30*time.Second)
	}
	if r.rate < 15 || r.rate > 25 {
		t.Fatalf("rate %.1f/s at 20 req/s", r.rate)
	}
	at := t0.Add(5 * time.Second)
	r.observe(3, at, warm, tau, 30*time.Second)
	if r.rate != 0 || !r.since.Equal(at) || r.planned != 20 {
		t.Fatalf("after the counter went back: rate %g, since %v, planned %g; want 0, %v, 20 (warming up again, the plan's rate kept)", r.rate, r.since, r.planned, at)
	}
	for i := 1; i <= 40; i++ {
		r.observe(uint64(3+i), at.Add(time.Duration(i)*50*time.Millisecond), warm, tau, 30*time.Second)
	}
	if r.rate < 15 || r.rate > 25 {
		t.Fatalf("rate %.1f/s at 20 req/s after the restart", r.rate)
	}
}

// poissonCounter is a Poisson stream's request counter read every 250 ms (the
// controller's period), at rateAt(t) req/s.
func poissonCounter(seed uint64, rateAt func(t time.Duration) float64, d time.Duration, read func(n uint64, t time.Duration)) {
	rng := rand.New(rand.NewPCG(seed, 7))
	var n uint64
	gap := func(at time.Duration) time.Duration {
		return time.Duration(rng.ExpFloat64() / rateAt(at) * float64(time.Second))
	}
	next := gap(0) // the next arrival
	for t := time.Duration(0); t <= d; t += 250 * time.Millisecond {
		for ; next <= t; next += gap(next) {
			n++
		}
		read(n, t)
	}
}

// Plans are made for the stream's level, not the 2 s EWMA: on a steady 30 req/s
// Poisson stream the EWMA reads past ±2.5/s (±8 %) within minutes, the level stays
// inside it once it has 20 s of arrivals. (Before, plans took the EWMA's reading: one
// planned 25.2/s on a 30/s stream and the drift rule re-planned it for 36.6/s.)
func TestRatePlansForTheLevelNotTheNoise(t *testing.T) {
	warm, tau, levelTau := 2*time.Second, 2*time.Second, 30*time.Second
	t0 := time.Unix(0, 0)
	for seed := uint64(1); seed <= 5; seed++ {
		r := rateMeter{since: t0}
		worstRate, worstPlan := 0.0, 0.0
		poissonCounter(seed, func(time.Duration) float64 { return 30 }, 10*time.Minute, func(n uint64, at time.Duration) {
			r.observe(n, t0.Add(at), warm, tau, levelTau)
			if at >= 20*time.Second {
				worstRate = max(worstRate, math.Abs(r.rate-30))
				worstPlan = max(worstPlan, math.Abs(r.level-30))
			}
		})
		if worstPlan > 2.5 {
			t.Errorf("seed %d: a plan would have been made for a rate %.1f/s off a steady 30/s", seed, worstPlan)
		}
		if worstRate <= 2.5 {
			t.Errorf("seed %d: the 2 s EWMA stayed within %.1f/s of 30/s: the stream does not show the noise this test is about", seed, worstRate)
		}
	}
}

// After the drift rule saw a change (rebase) plans are made for the new rate at once, and
// the level settles on it: 15 → 30 req/s at 60 s, the drift seen at 66 s.
func TestRateLevelAfterADrift(t *testing.T) {
	warm, tau, levelTau := 2*time.Second, 2*time.Second, 30*time.Second
	t0 := time.Unix(0, 0)
	for seed := uint64(1); seed <= 5; seed++ {
		r := rateMeter{since: t0}
		step := func(at time.Duration) float64 {
			if at >= time.Minute {
				return 30
			}
			return 15
		}
		worst := 0.0
		poissonCounter(seed, step, 3*time.Minute, func(n uint64, at time.Duration) {
			r.observe(n, t0.Add(at), warm, tau, levelTau)
			switch {
			case at == 66*time.Second:
				r.rebase(t0.Add(at), tau)
				if r.level < 22 {
					t.Errorf("seed %d: planned for %.1f/s 6 s after 15 → 30/s", seed, r.level)
				}
			case at >= 2*time.Minute:
				worst = max(worst, math.Abs(r.level-30))
			}
		})
		if worst > 2.5 {
			t.Errorf("seed %d: a minute after the drift the level was %.1f/s off 30/s", seed, worst)
		}
	}
}
