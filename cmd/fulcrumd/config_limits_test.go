package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The worker-socket limits of issue 17 reach the server and scheduler, and bad values are
// refused naming the key.
func TestWorkerLimitKeys(t *testing.T) {
	dir := t.TempDir()
	load := func(body string) (Settings, error) {
		p := filepath.Join(dir, "f.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		v := newViper()
		if err := readConfigFile(v, p); err != nil {
			return Settings{}, err
		}
		return settings(v)
	}
	s, err := load("worker:\n  register_timeout_ms: 1500\n  hold_factor: 4\n  hold_min_ms: 2500\n")
	if err != nil {
		t.Fatal(err)
	}
	sc := s.Daemon.Server.Sched
	if s.Daemon.Server.RegisterTimeout != 1500*time.Millisecond || sc.HoldFactor != 4 || sc.HoldMin != 2500*time.Millisecond {
		t.Fatalf("register timeout %v, hold factor %v, hold min %v", s.Daemon.Server.RegisterTimeout, sc.HoldFactor, sc.HoldMin)
	}
	s, err = load("runtime_dir: /x\n")
	if err != nil {
		t.Fatal(err)
	}
	if sc := s.Daemon.Server.Sched; s.Daemon.Server.RegisterTimeout != 5*time.Second || sc.HoldFactor != 10 || sc.HoldMin != 5*time.Second {
		t.Fatalf("defaults: register timeout %v, hold factor %v, hold min %v", s.Daemon.Server.RegisterTimeout, sc.HoldFactor, sc.HoldMin)
	}
	for body, key := range map[string]string{
		"worker:\n  hold_factor: 0.5\n":        "worker.hold_factor",
		"worker:\n  hold_min_ms: 0\n":          "worker.hold_min_ms",
		"worker:\n  register_timeout_ms: -1\n": "worker.register_timeout_ms",
		"worker:\n  hold_factor: lots\n":       "worker.hold_factor",
		"worker:\n  hold_max_ms: 1000\n":       "worker.hold_max_ms", // below hold_min_ms
		"worker:\n  max_per_process: 0\n":      "worker.max_per_process",
		"worker:\n  reserved_slots: -2\n":      "worker.reserved_slots",
	} {
		if _, err := load(body); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%q: error %v, want one naming %s", body, err, key)
		}
	}
}

// Issue 26 item 11: worker.sock takes control.group unless worker.group names its own.
func TestWorkerSocketGroupKey(t *testing.T) {
	dir := t.TempDir()
	for body, want := range map[string]string{
		"runtime_dir: /x\n":                                    "fulcrum",
		"control:\n  group: video\n":                           "video",
		"control:\n  group: video\nworker:\n  group: render\n": "render",
		"worker:\n  group: \"-\"\n":                            "-",
	} {
		p := filepath.Join(dir, "f.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		v := newViper()
		if err := readConfigFile(v, p); err != nil {
			t.Fatal(err)
		}
		s, err := settings(v)
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if s.Daemon.Server.Group != want {
			t.Errorf("%q: worker socket group %q, want %q", body, s.Daemon.Server.Group, want)
		}
	}
}
