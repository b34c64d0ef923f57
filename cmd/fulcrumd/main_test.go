package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/client"
)

// The command wires config, store and server: it starts, serves, refuses a second
// instance, and stops cleanly when its context ends.
func TestRunAndStop(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--runtime-dir", filepath.Join(dir, "run"), "--state-dir", filepath.Join(dir, "state"), "--board", "none", "--log-level", "warn"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		cmd := newRootCmd()
		cmd.SetArgs(args)
		done <- cmd.ExecuteContext(ctx)
	}()
	sock := filepath.Join(dir, "run", "worker.sock")
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fulcrumd never listened: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The worker socket listens first; the store opens after the board, before the
	// control socket listens.
	for ctl := filepath.Join(dir, "run", api.SocketName); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("unix", ctl); err == nil {
			c.Close()
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("fulcrumd never listened on its control socket: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "profiles.db")); err != nil {
		t.Fatalf("profile store not created: %v", err)
	}

	second := newRootCmd()
	second.SetArgs(append(args[:2:2], "--state-dir", filepath.Join(dir, "state2"), "--board", "none"))
	var out bytes.Buffer
	second.SetErr(&out)
	err := second.ExecuteContext(context.Background())
	if err == nil || !strings.Contains(err.Error(), "another fulcrumd is running (pid") {
		t.Fatalf("second fulcrumd: %v", err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("fulcrumd exited with %v", err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket left behind after shutdown: %v", err)
	}
}

// --latency and --power take units as fulcrumctl budget set does; the old --latency-ms
// and --power-w still work and print a deprecation line; bad values stop the start.
func TestBudgetFlags(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		latencyMS float64
		powerMW   float64
		errWant   string
		deprecate string
	}{
		{args: []string{"--latency", "200ms", "--power", "30W"}, latencyMS: 200, powerMW: 30000},
		{args: []string{"--latency", "0.15s", "--power", "none"}, latencyMS: 150},
		{args: []string{"--latency-ms", "120", "--power-w", "20"}, latencyMS: 120, powerMW: 20000, deprecate: "--latency-ms has been deprecated, use --latency"},
		{args: []string{"--latency", "200"}, errWant: "give a unit"},
		{args: []string{"--power", "0W"}, errWant: "--power none"},
		{args: []string{"--latency", "200ms", "--latency-ms", "200"}, errWant: "not both"},
	} {
		dir := t.TempDir()
		args := append([]string{"--runtime-dir", filepath.Join(dir, "run"), "--state-dir", filepath.Join(dir, "state"), "--board", "none", "--log-level", "warn"}, tc.args...)
		ctx, cancel := context.WithCancel(context.Background())
		var out syncBuffer
		done := make(chan error, 1)
		go func() {
			cmd := newRootCmd()
			cmd.SetArgs(args)
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			done <- cmd.ExecuteContext(ctx)
		}()
		if tc.errWant != "" {
			if err := <-done; err == nil || !strings.Contains(err.Error(), tc.errWant) {
				t.Errorf("%v: %v, want an error containing %q", tc.args, err, tc.errWant)
			}
			cancel()
			continue
		}
		c := client.New(filepath.Join(dir, "run", api.SocketName))
		var b api.Budgets
		var err error
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if b, err = c.Budgets(ctx); err == nil {
				break
			}
		}
		c.Close()
		cancel()
		if derr := <-done; derr != nil {
			t.Errorf("%v: fulcrumd exited with %v", tc.args, derr)
		}
		if err != nil || b.LatencyMS != tc.latencyMS || b.PowerMW != tc.powerMW {
			t.Errorf("%v: budgets %+v (%v), want latency %v ms, power %v mW", tc.args, b, err, tc.latencyMS, tc.powerMW)
		}
		if !strings.Contains(out.String(), tc.deprecate) {
			t.Errorf("%v: output %q lacks %q", tc.args, out.String(), tc.deprecate)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the command's goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
