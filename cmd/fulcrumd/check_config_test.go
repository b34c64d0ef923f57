package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/client"
)

// runFulcrumd runs fulcrumd (this test binary as TestFulcrumdProcess) to its exit.
func runFulcrumd(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestFulcrumdProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envProcessArgs+"="+strings.Join(args, "\x1f"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// fulcrumd --check-config FILE, as a process: a valid file prints that it is valid and
// exits 0, an invalid one prints every problem naming its key and exits 1; neither opens
// the board (board: auto would fail here, where there is no Jetson), the runtime
// directory (sockets, lock) or the state directory (store).
func TestCheckConfigProcess(t *testing.T) {
	dir := t.TempDir()
	run, state := filepath.Join(dir, "run"), filepath.Join(dir, "state")
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dirs := []string{"--runtime-dir", run, "--state-dir", state}
	untouched := func(what string) {
		t.Helper()
		for _, d := range []string{run, state} {
			if _, err := os.Stat(d); !os.IsNotExist(err) {
				t.Errorf("%s: --check-config created %s (%v)", what, d, err)
			}
		}
	}

	shipped, err := filepath.Abs("../../configs/fulcrum.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{shipped, write("old.yaml", "board: auto\nbudgets:\n  power_w: 30\n  latency_ms: 80\n")} {
		stdout, stderr, code := runFulcrumd(t, append(dirs, "--check-config", path)...)
		if code != 0 || !strings.Contains(stdout, "configuration "+path+" is valid") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 0 and a line saying it is valid", path, code, stdout, stderr)
		}
		untouched(path)
		if strings.HasSuffix(path, "old.yaml") {
			for _, want := range []string{"budgets.power: 30W", "budgets.latency: 80ms"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("old spellings: stderr %q lacks the new spelling %q", stderr, want)
				}
			}
		}
	}

	bad := write("bad.yaml", "scheduler:\n  ewma_alpha: 2\n  margin_ms: soon\nworker:\n  hold_factor: lots\nbudgets:\n  power: 0W\ncontroller:\n  live:\n    min_time_ms: -1\n")
	_, stderr, code := runFulcrumd(t, append(dirs, "--check-config", bad)...)
	if code != 1 || !strings.Contains(stderr, "configuration "+bad+" is invalid") {
		t.Errorf("bad file: exit %d, stderr %q; want exit 1 saying it is invalid", code, stderr)
	}
	for _, key := range []string{"scheduler.ewma_alpha", "scheduler.margin_ms", "worker.hold_factor", "budgets.power", "controller.live.min_time_ms"} {
		if !strings.Contains(stderr, "\n  "+key) {
			t.Errorf("bad file: stderr does not name %s on a line of its own:\n%s", key, stderr)
		}
	}
	untouched("bad file")

	newer := write("v2.yaml", "version: 2\n")
	_, stderr, code = runFulcrumd(t, append(dirs, "--check-config", newer)...)
	if code != 1 || !strings.Contains(stderr, "version 2 is newer than this fulcrumd reads (version 1)") {
		t.Errorf("version 2: exit %d, stderr %q; want exit 1 saying which versions it reads", code, stderr)
	}
	untouched("version 2")
}

// A running fulcrumd started with the old spellings serves the same budgets and logs a
// warning naming the new spelling.
func TestDeprecatedKeysWarnProcess(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "f.yaml")
	if err := os.WriteFile(cfg, []byte("budgets:\n  power_w: 30\n  latency_ms: 80\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestFulcrumdProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envProcessArgs+"="+strings.Join([]string{"--config", cfg, "--runtime-dir", filepath.Join(dir, "run"),
		"--state-dir", filepath.Join(dir, "state"), "--board", "none", "--log-level", "warn"}, "\x1f"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := client.New(filepath.Join(dir, "run", api.SocketName))
	defer c.Close()
	var b api.Budgets
	var err error
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if b, err = c.Budgets(ctx); err == nil {
			break
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	werr := cmd.Wait()
	if err != nil || werr != nil {
		t.Fatalf("fulcrumd: budgets %v, exit %v\n%s", err, werr, stderr.String())
	}
	if b.PowerMW != 30000 || b.LatencyMS != 80 {
		t.Errorf("budgets %+v, want 30000 mW and 80 ms", b)
	}
	for _, want := range []string{"level=WARN", "budgets.power_w: 30 is deprecated: write budgets.power: 30W", "budgets.latency_ms: 80 is deprecated: write budgets.latency: 80ms"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, stderr.String())
		}
	}
}
