package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/client"
	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
)

const envProcessArgs = "FULCRUMD_TEST_PROCESS_ARGS"

// TestFulcrumdProcess is not a test on its own: it is fulcrumd's main, run as a
// process of its own by TestTwoFulcrumdProcessesOneBoard (the arguments come in the
// environment, separated by the unit separator, 0x1f).
func TestFulcrumdProcess(t *testing.T) {
	args := os.Getenv(envProcessArgs)
	if args == "" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := newRootCmd()
	cmd.SetArgs(strings.Split(args, "\x1f"))
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "fulcrumd:", err)
		os.Exit(1)
	}
}

// fulcrumdProcess starts fulcrumd (this test binary as TestFulcrumdProcess) with args.
func fulcrumdProcess(t *testing.T, stderr *bytes.Buffer, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestFulcrumdProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envProcessArgs+"="+strings.Join(args, "\x1f"))
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// boardFiles reads every file of the simulated board's tree.
func boardFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func changedFiles(a, b map[string]string) []string {
	var d []string
	for p, v := range a {
		if w, ok := b[p]; !ok || v != w {
			d = append(d, p)
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			d = append(d, p)
		}
	}
	return d
}

// Two real fulcrumd processes on one simulated board, the second with its own runtime
// directory and its own (or the first one's) state directory: the second exits at once
// with an error naming the first one's pid, and neither the board's files nor the first
// one's snapshot change. When the first stops, the board is back to its original state.
func TestTwoFulcrumdProcessesOneBoard(t *testing.T) {
	dir := t.TempDir()
	board := filepath.Join(dir, "board")
	testboard.Sim(t, board, testboard.Spec(t, testboard.AGXOrin), sim.Options{Logger: slog.New(slog.DiscardHandler)})
	original := boardFiles(t, board)
	common := []string{"--board", "sim:agx-orin-64gb", "--board-root", board, "--log-level", "warn"}
	firstArgs := append([]string{"--runtime-dir", filepath.Join(dir, "run1"), "--state-dir", filepath.Join(dir, "state1")}, common...)
	var firstErr bytes.Buffer
	first := fulcrumdProcess(t, &firstErr, firstArgs...)
	exited := false
	defer func() {
		if !exited {
			_ = first.Process.Kill()
			_ = first.Wait()
		}
	}()
	ctx := context.Background()
	cl := client.New(filepath.Join(dir, "run1", api.SocketName))
	defer cl.Close()
	var mi api.ModeInfo
	var err error
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if mi, err = cl.Mode(ctx); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("the first fulcrumd never answered: %v\n%s", err, firstErr.String())
	}
	changed := powermode.Mode{Cores: 4, CPUKHz: 1113600, GPUHz: 408000000, EMCHz: 2133000000}
	if changed == mi.Current {
		t.Fatal("pick another mode")
	}
	if _, err := cl.ApplyMode(ctx, changed); err != nil {
		t.Fatal(err)
	}
	snapPath := filepath.Join(dir, "state1", powermode.SnapshotFile)
	snap, err := os.ReadFile(snapPath)
	if err != nil {
		t.Fatalf("the first fulcrumd saved no snapshot: %v", err)
	}
	applied := boardFiles(t, board)

	for _, state := range []string{"state2", "state1"} {
		var out bytes.Buffer
		second := fulcrumdProcess(t, &out, append([]string{"--runtime-dir", filepath.Join(dir, "run2"), "--state-dir", filepath.Join(dir, state)}, common...)...)
		done := make(chan error, 1)
		go func() { done <- second.Wait() }()
		select {
		case err = <-done:
		case <-time.After(60 * time.Second):
			_ = second.Process.Kill()
			<-done
			t.Fatalf("state dir %s: the second fulcrumd did not exit: it runs beside the first\n%s", state, out.String())
		}
		var ee *exec.ExitError
		want := fmt.Sprintf("another fulcrumd (pid %d) drives this board", first.Process.Pid)
		if !errors.As(err, &ee) || !strings.Contains(out.String(), want) {
			t.Fatalf("state dir %s: second fulcrumd: %v, stderr:\n%s\nwant a failure saying %q", state, err, out.String(), want)
		}
		t.Logf("state dir %s: second fulcrumd: %s", state, strings.TrimSpace(out.String()))
		if d := changedFiles(applied, boardFiles(t, board)); len(d) > 0 {
			t.Fatalf("state dir %s: the second fulcrumd changed the board: %v", state, d)
		}
		if got, err := os.ReadFile(snapPath); err != nil || !bytes.Equal(got, snap) {
			t.Fatalf("state dir %s: the first fulcrumd's snapshot after the second start: %v", state, err)
		}
	}
	if m, err := cl.Mode(ctx); err != nil || m.Current != changed {
		t.Fatalf("the first fulcrumd after the second start: mode %v, %v; want %v", m.Current, err, changed)
	}

	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited = true
	if err := first.Wait(); err != nil {
		t.Fatalf("the first fulcrumd on SIGTERM: %v\n%s", err, firstErr.String())
	}
	if d := changedFiles(original, boardFiles(t, board)); len(d) > 0 {
		t.Fatalf("after the first fulcrumd stopped, %d board files differ from the original: %v", len(d), d)
	}
	if _, err := os.Stat(snapPath); !os.IsNotExist(err) {
		t.Fatalf("snapshot left after a clean stop: %v", err)
	}
}
