package daemon

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// BenchmarkRoundTrip measures one turn's protocol cost over the real unix socket: a
// training worker's acquire → grant → release, with nobody else waiting. The run's
// per-iteration p50/p99 are reported as metrics.
//
//	go test -run '^$' -bench RoundTrip -benchtime 20000x ./fulcrum/daemon/
func BenchmarkRoundTrip(b *testing.B) {
	dir, err := os.MkdirTemp("", "fcb")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s := NewServer(Config{RuntimeDir: dir, Sched: sched.DefaultConfig()})
	if err := s.Listen(); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	c, err := client.Dial(ctx, s.SocketPath(), client.Registration{Role: proto.RoleTrain, Workload: "bench", Batch: 32})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		g, err := c.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Release(g.Grant, time.Millisecond, 0, nil); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportQuantiles(b, lat)
}

// BenchmarkSocketPingPong is the floor under BenchmarkRoundTrip on the same host: one
// small message each way over a unix socket between two goroutines of one process, with
// no protocol, scheduler or client library. What BenchmarkRoundTrip adds above it is
// Fulcrum's own cost.
//
//	go test -run '^$' -bench 'RoundTrip|PingPong' -benchtime 20000x ./fulcrum/daemon/
func BenchmarkSocketPingPong(b *testing.B) {
	dir, err := os.MkdirTemp("", "fcp")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	l, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 256)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("unix", filepath.Join(dir, "s"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	msg := []byte(`{"type":"acquire","seq":1}` + "\n")
	buf := make([]byte, 256)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf[:len(msg)]); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportQuantiles(b, lat)
}

func reportQuantiles(b *testing.B, lat []time.Duration) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) float64 {
		return float64(lat[min(int(p*float64(len(lat))), len(lat)-1)].Microseconds())
	}
	b.ReportMetric(q(0.50), "p50-us")
	b.ReportMetric(q(0.99), "p99-us")
}
