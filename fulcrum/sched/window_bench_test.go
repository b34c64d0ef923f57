package sched

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkWindowQuantiles is what a Stats snapshot pays per latency window: copy the
// window out of its ring and summarise it (p50/p95/p99/max), at the default
// WindowSamples (10,000) and at a lightly used window.
func BenchmarkWindowQuantiles(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			t0 := time.Unix(0, 0)
			w := newWindow(time.Hour, n)
			for i := range n {
				w.add(t0.Add(time.Duration(i)*time.Millisecond), 20+10*rng.ExpFloat64())
			}
			now := t0.Add(time.Duration(n) * time.Millisecond)
			b.ReportAllocs()
			for b.Loop() {
				q := quantiles(w.values(now))
				if q.Count != n {
					b.Fatalf("count %d, want %d", q.Count, n)
				}
			}
		})
	}
}
