package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
