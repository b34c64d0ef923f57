// Command names starts a real fulcrumd (no board) and opens connections that each
// register a fresh workload name and close, as a local process allowed on the worker
// socket could (issue 17). It prints fulcrumd's RSS (/proc/PID/status) and the number of
// lines on its metrics endpoint as it goes, so memory and series per name can be
// checked against the idle daemon.
//
//	go build -o bin/ ./cmd/fulcrumd && go run ./scripts/names -bin bin -n 5000
//	go run ./scripts/names -bin bin -n 5000 -serve 200   # each name also serves 200 requests
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto/client"
	"github.com/fulcrum-edge/fulcrum/scripts/internal/throwaway"
)

func main() {
	bin := flag.String("bin", "bin", "directory holding fulcrumd")
	n := flag.Int("n", 5000, "fresh workload names (one connection each)")
	serve := flag.Int("serve", 0, "requests each name reports and serves before closing (fills its windows)")
	every := flag.Int("every", 1000, "print a row every this many names")
	settle := flag.Duration("settle", 5*time.Second, "wait this long after the last name before the final row")
	flag.Parse()
	if err := run(*bin, *n, *serve, *every, *settle); err != nil {
		fmt.Fprintln(os.Stderr, "names:", err)
		os.Exit(1)
	}
}

func run(bin string, n, serve, every int, settle time.Duration) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	ln.Close()
	d, err := throwaway.Start(bin, "names", throwaway.Options{Out: os.Stderr, Env: []string{"FULCRUM_METRICS_LISTEN=" + addr}})
	if err != nil {
		return err
	}
	defer d.Stop()
	sock := d.WorkerSocket()
	time.Sleep(time.Second)
	pid := d.Cmd.Process.Pid
	row := func(names int) error {
		rss, err := throwaway.RSSMiB(pid)
		if err != nil {
			return err
		}
		lines, err := metricLines(addr)
		if err != nil {
			return err
		}
		fmt.Printf("%8d %9.1f %13d\n", names, rss, lines)
		return nil
	}
	fmt.Printf("# fulcrumd pid %d, %d fresh names, %d requests served per name\n", pid, n, serve)
	fmt.Printf("%8s %9s %13s\n", "names", "rss_mib", "metric_lines")
	if err := row(0); err != nil {
		return err
	}
	ctx := context.Background()
	for i := 1; i <= n; i++ {
		if err := oneName(ctx, sock, fmt.Sprintf("fresh-%d", i), serve); err != nil {
			return fmt.Errorf("name %d: %w", i, err)
		}
		if i%every == 0 {
			if err := row(i); err != nil {
				return err
			}
		}
	}
	time.Sleep(settle)
	fmt.Printf("# after %v idle:\n", settle)
	return row(n)
}

func oneName(ctx context.Context, sock, name string, serve int) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, sock, client.Registration{Role: proto.RoleInfer, Workload: name, Batch: 64})
	if err != nil {
		return err
	}
	defer c.Close()
	for done := 0; done < serve; {
		k := min(64, serve-done)
		reqs := make([]proto.Request, k)
		res := make([]proto.Result, k)
		for j := range reqs {
			reqs[j] = proto.Request{ID: strconv.Itoa(done + j)}
			res[j] = proto.Result{ID: reqs[j].ID, OK: true}
		}
		if err := c.Arrivals(reqs); err != nil {
			return err
		}
		g, err := c.Acquire(ctx)
		if err != nil {
			return err
		}
		if err := c.Release(g.Grant, 0, 0, res[:len(g.RequestIDs)]); err != nil {
			return err
		}
		done += len(g.RequestIDs)
	}
	return c.Heartbeat(ctx) // the release has been handled
}

func metricLines(addr string) (int, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return strings.Count(string(b), "\n"), nil
}
