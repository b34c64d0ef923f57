package main

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A healthy probe gets a ping on every tick; a stuck one gets none until it finishes,
// and no second probe is started while one is outstanding. The test owns each probe's
// completion channel, so the order of events is fixed.
func TestWatchdogLoopWithholdsPingWhileStuck(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ticks := make(chan time.Time)
	pings := make(chan string, 16)
	notify := func(s string) error { pings <- s; return nil }
	probes := make(chan chan struct{}, 16) // one per probe started; the test closes it to finish the probe
	probe := func() <-chan struct{} {
		c := make(chan struct{})
		probes <- c
		return c
	}
	// Only the loop's goroutine logs; buf is read after it has returned.
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, nil))
	loopDone := make(chan struct{})
	go func() { defer close(loopDone); watchdogLoop(ctx, log, ticks, probe, notify) }()

	tick := func() { ticks <- time.Time{} }
	expectPing := func(step string) {
		t.Helper()
		select {
		case p := <-pings:
			if p != "WATCHDOG=1" {
				t.Fatalf("%s: sent %q, want WATCHDOG=1", step, p)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no watchdog ping", step)
		}
	}
	nextProbe := func(step string) chan struct{} {
		t.Helper()
		select {
		case c := <-probes:
			return c
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no probe started", step)
			return nil
		}
	}

	// Healthy: each tick pings and starts a probe, which finishes before the next tick.
	for i := range 3 {
		tick()
		expectPing("healthy tick " + strconv.Itoa(i))
		close(nextProbe("healthy tick " + strconv.Itoa(i)))
	}
	// The next probe hangs. Each send on the unbuffered ticks returns only once the loop
	// is back waiting, i.e. has handled the previous tick: so the first three of these
	// four are handled, all while the probe is open.
	tick()
	expectPing("tick that starts the stuck probe")
	stuckProbe := nextProbe("tick that starts the stuck probe")
	for range 4 {
		tick()
	}
	if len(pings) != 0 || len(probes) != 0 {
		t.Fatalf("while the probe was stuck: %d pings sent and %d probes started, want none", len(pings), len(probes))
	}
	// It finishes; the loop feeds the watchdog again (at the tick it may still be
	// handling, or at the next).
	close(stuckProbe)
	tick()
	expectPing("after recovery")
	cancel()
	<-loopDone
	out := buf.String()
	if !strings.Contains(out, "withholding the systemd watchdog ping") || !strings.Contains(out, "answers again") {
		t.Fatalf("log should say that the ping is withheld, then that it recovered:\n%s", out)
	}
}

// Under systemd (NOTIFY_SOCKET, WATCHDOG_USEC, WATCHDOG_PID set), a running fulcrumd
// sends READY=1, then WATCHDOG=1 pings, then STOPPING=1 when stopped: read from a real
// notify socket.
func TestSystemdNotifications(t *testing.T) {
	dir := t.TempDir()
	sockPath := filepath.Join(dir, "notify.sock")
	pc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	t.Setenv("NOTIFY_SOCKET", sockPath)
	t.Setenv("WATCHDOG_USEC", "20000") // 20 ms: pings every 10 ms
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		cmd := newRootCmd()
		cmd.SetArgs([]string{"--runtime-dir", filepath.Join(dir, "run"), "--state-dir", filepath.Join(dir, "state"), "--board", "none", "--log-level", "warn"})
		done <- cmd.ExecuteContext(ctx)
	}()

	read := func() string {
		t.Helper()
		buf := make([]byte, 256)
		_ = pc.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := pc.Read(buf)
		if err != nil {
			t.Fatalf("no notification from fulcrumd: %v", err)
		}
		return string(buf[:n])
	}
	if got := read(); got != "READY=1" {
		t.Fatalf("first notification %q, want READY=1", got)
	}
	for i := range 3 {
		if got := read(); got != "WATCHDOG=1" {
			t.Fatalf("notification %d after READY: %q, want WATCHDOG=1", i, got)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("fulcrumd exited with %v", err)
	}
	// Pings already in flight may precede STOPPING=1.
	for {
		got := read()
		if got == "STOPPING=1" {
			break
		}
		if got != "WATCHDOG=1" {
			t.Fatalf("unexpected notification %q while stopping", got)
		}
	}
}
