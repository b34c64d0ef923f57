// Command rtt measures the acquire → grant → release round trip of a Go training worker
// against a running fulcrumd, from its own process (as a real worker is), and prints the
// quantiles. BenchmarkRoundTrip runs both ends in one process instead.
//
//	go run ./scripts/rtt --socket /run/fulcrum/worker.sock --n 30000
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto/client"
	"github.com/fulcrum-edge/fulcrum/internal/paths"
)

func main() {
	socket := flag.String("socket", paths.WorkerSocket, "fulcrumd's worker socket")
	n := flag.Int("n", 30000, "round trips")
	echoServe := flag.String("echo-serve", "", "serve a line echo on this unix socket path (for --echo)")
	echo := flag.String("echo", "", "measure bare round trips against --echo-serve at this path")
	flag.Parse()
	if *echoServe != "" {
		if err := serveEcho(*echoServe); err != nil {
			fmt.Fprintln(os.Stderr, "rtt:", err)
			os.Exit(1)
		}
		return
	}
	if *echo != "" {
		lat, err := measureEcho(*echo, *n)
		if err != nil {
			fmt.Fprintln(os.Stderr, "rtt:", err)
			os.Exit(1)
		}
		report("bare echo", lat)
		return
	}
	ctx := context.Background()
	c, err := client.Dial(ctx, *socket, client.Registration{Role: proto.RoleTrain, Workload: "rtt", Batch: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, "rtt:", err)
		os.Exit(1)
	}
	defer c.Close()
	lat := make([]time.Duration, 0, *n)
	for range *n {
		t0 := time.Now()
		g, err := c.Acquire(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, "rtt: acquire:", err)
			os.Exit(1)
		}
		if err := c.Release(g.Grant, time.Microsecond, 0, nil); err != nil {
			fmt.Fprintln(os.Stderr, "rtt: release:", err)
			os.Exit(1)
		}
		lat = append(lat, time.Since(t0))
	}
	report("acquire→grant→release", lat)
}

func report(what string, lat []time.Duration) {
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(int(p*float64(len(lat))), len(lat)-1)] }
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	fmt.Printf("%s: round trips %d  p50 %v  p99 %v  p99.9 %v  mean %v\n", what, len(lat), q(0.5), q(0.99), q(0.999), sum/time.Duration(len(lat)))
}

// serveEcho answers every line on one connection with itself.
func serveEcho(path string) error {
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	defer l.Close()
	c, err := l.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 4096)
	for {
		k, err := c.Read(buf)
		if err != nil {
			return nil
		}
		if _, err := c.Write(buf[:k]); err != nil {
			return nil
		}
	}
}

func measureEcho(path string, n int) ([]time.Duration, error) {
	c, err := net.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	msg := []byte(`{"type":"acquire","seq":1}` + "\n")
	buf := make([]byte, len(msg))
	lat := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if _, err := c.Write(msg); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t0))
	}
	return lat, nil
}
