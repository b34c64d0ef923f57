package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The shipped configs/fulcrum.yaml must document exactly the keys fulcrumd knows, with
// their defaults.
func TestShippedConfigMatchesDefaults(t *testing.T) {
	b, err := os.ReadFile("../../configs/fulcrum.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	flat := map[string]any{}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok {
				walk(prefix+k+".", sub)
				continue
			}
			flat[prefix+k] = v
		}
	}
	walk("", doc)
	var missing, extra []string
	defaults := defaultValues()
	for k, d := range defaults {
		v, ok := flat[k]
		if !ok {
			missing = append(missing, k)
			continue
		}
		if str(v) != str(d) {
			t.Errorf("key %s: file says %v, default is %v", k, v, d)
		}
	}
	for k := range flat {
		if _, ok := defaults[k]; !ok {
			extra = append(extra, k)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	if len(missing)+len(extra) > 0 {
		t.Fatalf("configs/fulcrum.yaml undocumented keys %v, unknown keys %v", missing, extra)
	}
	// And it loads as a config file.
	v := newViper()
	if err := readConfigFile(v, "../../configs/fulcrum.yaml"); err != nil {
		t.Fatal(err)
	}
	if _, err := settings(v); err != nil {
		t.Fatal(err)
	}
}

func str(v any) string { return fmt.Sprint(v) }

func TestPrecedenceAndValidation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.yaml")
	if err := os.WriteFile(path, []byte("runtime_dir: /x\nbudgets:\n  latency_ms: 40\n  rate: 12.5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FULCRUM_BUDGETS_LATENCY_MS", "55")
	v := newViper()
	if err := readConfigFile(v, path); err != nil {
		t.Fatal(err)
	}
	s, err := settings(v)
	if err != nil {
		t.Fatal(err)
	}
	if s.Daemon.Budgets.LatencyMS != 55 || s.Daemon.Budgets.RateRPS != 12.5 || s.Daemon.Server.RuntimeDir != "/x" {
		t.Fatalf("settings %+v: env must beat the file, the file the defaults", s.Daemon.Budgets)
	}
	if s.Daemon.Server.Sched.LatencyBudget != 55*time.Millisecond || s.Daemon.Server.SocketMode != 0o660 {
		t.Fatalf("daemon options %+v", s.Daemon.Server)
	}

	cases := map[string]string{
		"budgets:\n  quantile: 1.5\n":        "budgets.quantile",
		"budgets:\n  rate: fast\n":           "budgets.rate",
		"log:\n  format: xml\n":              "log.format",
		"board: jetson\n":                    "board",
		"worker:\n  socket_mode: rw\n":       "worker.socket_mode",
		"scheduler:\n  overrun_min_ms: -1\n": "scheduler.overrun_min_ms",
		"scheduler:\n  ewma_alpha: 2\n":      "scheduler.ewma_alpha",
		"shceduler:\n  ewma_alpha: 0.5\n":    "unknown key",
	}
	for body, want := range cases {
		p := filepath.Join(dir, "bad.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		v := newViper()
		err := readConfigFile(v, p)
		if err == nil {
			_, err = settings(v)
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config %q: error %v, want one naming %s", body, err, want)
		}
	}
}

// --root is fulcrumctl's name for the board root; fulcrumd takes it too.
func TestRootFlagAlias(t *testing.T) {
	for _, args := range [][]string{{"--root", "/tmp/b"}, {"--board-root", "/tmp/b"}, {"--root=/tmp/b"}} {
		cmd := newRootCmd()
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if got := cmd.Flags().Lookup("board-root").Value.String(); got != "/tmp/b" {
			t.Fatalf("%v: board-root %q", args, got)
		}
	}
}
