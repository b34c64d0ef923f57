// Command attack runs one worker-socket attack of issue 17 against a real fulcrumd (no
// board) that it starts, and prints what the victims saw. Run it against the fulcrumd of
// any commit to compare (docs/reliability.md §8).
//
//	go build -o bin/ ./cmd/fulcrumd
//	go run ./scripts/attack -bin bin poison  # a second connection releases with an hour after ~0 ms
//	go run ./scripts/attack -bin bin hold    # acquire and never release (for -hold)
//	go run ./scripts/attack -bin bin idle    # max_workers connections that never register
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	apiclient "github.com/fulcrum-edge/fulcrum/fulcrum/api/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto/client"
	"github.com/fulcrum-edge/fulcrum/scripts/internal/throwaway"
)

func main() {
	bin := flag.String("bin", "bin", "directory holding fulcrumd")
	hold := flag.Duration("hold", 20*time.Second, "hold: how long the hog keeps its turn before closing")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: attack [-bin DIR] [-hold D] poison|hold|idle")
		os.Exit(2)
	}
	d, err := start(*bin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "attack:", err)
		os.Exit(1)
	}
	defer d.stop()
	switch flag.Arg(0) {
	case "poison":
		err = poison(d)
	case "hold":
		err = holdTurn(d, *hold)
	case "idle":
		err = idle(d)
	default:
		err = fmt.Errorf("unknown attack %q: poison, hold or idle", flag.Arg(0))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "attack:", err)
		d.stop()
		os.Exit(1)
	}
}

type daemon struct {
	*throwaway.Daemon
	sock string // the worker socket
}

func start(bin string) (*daemon, error) {
	td, err := throwaway.Start(bin, "attack", throwaway.Options{Out: os.Stderr})
	if err != nil {
		return nil, err
	}
	return &daemon{Daemon: td, sock: td.WorkerSocket()}, nil
}

func (d *daemon) stop() { d.Stop() }

func (d *daemon) dial(ctx context.Context, workload string) (*client.Client, error) {
	return client.Dial(ctx, d.sock, client.Registration{Role: proto.RoleTrain, Workload: workload, Batch: 8})
}

// trainer runs 20 ms minibatches until ctx ends and reports the longest acquire wait.
func trainer(ctx context.Context, c *client.Client, longest chan<- time.Duration) {
	var worst time.Duration
	defer func() { longest <- worst }()
	for ctx.Err() == nil {
		t0 := time.Now()
		g, err := c.Acquire(ctx)
		if err != nil {
			return
		}
		worst = max(worst, time.Since(t0))
		time.Sleep(20 * time.Millisecond)
		if c.Release(g.Grant, 20*time.Millisecond, 0, nil) != nil {
			return
		}
	}
}

// poison: a trainer runs; a second connection registers the same workload and releases
// twice (the first minibatch is warm-up) with an hour each after holding ~0 ms.
func poison(d *daemon) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := d.dial(ctx, "resnet18")
	if err != nil {
		return err
	}
	defer tr.Close()
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	longest := make(chan time.Duration, 1)
	go trainer(tctx, tr, longest)
	time.Sleep(time.Second)
	expected := func() (float64, uint64, error) {
		st, err := apiclient.New(d.ControlSocket()).Status(ctx)
		if err != nil {
			return 0, 0, err
		}
		for _, wl := range st.Workloads {
			if wl.Workload == "resnet18" {
				return wl.ExpectedTrainMS, wl.DurationsClamped, nil
			}
		}
		return 0, 0, errors.New("resnet18 not in the status")
	}
	before, _, err := expected()
	if err != nil {
		return err
	}
	at, err := d.dial(ctx, "resnet18")
	if err != nil {
		return err
	}
	defer at.Close()
	for range 2 {
		g, err := at.Acquire(ctx)
		if err != nil {
			return err
		}
		if err := at.Release(g.Grant, time.Hour, 0, nil); err != nil {
			return err
		}
	}
	if err := at.Heartbeat(ctx); err != nil {
		return err
	}
	after, clamped, err := expected()
	if err != nil {
		return err
	}
	stop()
	<-longest
	fmt.Printf("poison: expected minibatch of resnet18 %.1f ms before, %.1f ms after two releases of 3600000 ms held ~0 ms; durations_clamped %d\n",
		before, after, clamped)
	return nil
}

// holdTurn: a trainer runs; another worker acquires and keeps the turn for hold, then
// closes. Prints the trainer's longest wait for a grant and what the hog was told.
func holdTurn(d *daemon, hold time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), hold+30*time.Second)
	defer cancel()
	tr, err := d.dial(ctx, "resnet18")
	if err != nil {
		return err
	}
	defer tr.Close()
	hog, err := d.dial(ctx, "hog")
	if err != nil {
		return err
	}
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	longest := make(chan time.Duration, 1)
	go trainer(tctx, tr, longest)
	time.Sleep(500 * time.Millisecond)
	if _, err := hog.Acquire(ctx); err != nil {
		return err
	}
	t0 := time.Now()
	time.Sleep(hold)
	_, told := hog.Acquire(ctx) // what the hog hears on its next call
	hog.Close()
	time.Sleep(500 * time.Millisecond)
	stop()
	fmt.Printf("hold: the hog kept its grant %v, then closed; the other trainer's longest wait for a grant %v; the hog's next call: %v\n",
		time.Since(t0).Round(time.Millisecond), (<-longest).Round(time.Millisecond), told)
	return nil
}

// idle: 64 connections (the default max_workers) that never register; a worker then
// tries to register every 100 ms.
func idle(d *daemon) error {
	// The connections stay open (deferred Close) until the worker has registered.
	for range 64 {
		c, err := net.Dial("unix", d.sock)
		if err != nil {
			return err
		}
		defer c.Close()
	}
	time.Sleep(100 * time.Millisecond)
	t0 := time.Now()
	var first error
	for time.Since(t0) < 20*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := d.dial(ctx, "resnet18")
		cancel()
		if err == nil {
			c.Close()
			fmt.Printf("idle: 64 unregistered connections; a worker registered after %v (first refusal: %v)\n",
				time.Since(t0).Round(time.Millisecond), first)
			return nil
		}
		if first == nil {
			first = err
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Printf("idle: 64 unregistered connections; no worker could register for 20s (refusal: %v)\n", first)
	return nil
}
