package main

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzConfig: any config file gives Settings or an error naming what to fix, never a
// panic; accepted settings have usable budgets and directories.
func FuzzConfig(f *testing.F) {
	shipped, err := os.ReadFile("../../configs/fulcrum.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(shipped)
	for _, s := range []string{
		"", "budgets:\n  latency_ms: -1\n", "budgets:\n  power_w: 30000\n", "budgets:\n  rate: fast\n",
		"budgets:\n  quantile: 99\n", "board: sim:\n", "unknown_key: 1\n", "runtime_dir: [1,2]\n",
		"log:\n  level: loud\n", "db_timeout_ms: -5\n", ": :\n\t- x", "budgets: 5\n",
		"version: 2\n", "version: 1\nbudgets:\n  power: 30W\n  latency: 80ms\n", "budgets:\n  latency: 1e400ms\n",
		"scheduler:\n  margin_ms: 1e300\n", "budgets:\n  power: 30W\n  power_w: 20\n", "worker:\n  hold_min_ms: [1]\n",
	} {
		f.Add([]byte(s))
	}
	for _, k := range []string{"FULCRUM_BUDGETS_LATENCY_MS", "FULCRUM_BUDGETS_POWER_W", "FULCRUM_BUDGETS_LATENCY", "FULCRUM_BUDGETS_POWER", "FULCRUM_BOARD", "FULCRUM_RUNTIME_DIR", "FULCRUM_STATE_DIR"} {
		f.Setenv(k, "") // viper ignores empty variables: the fuzzed file decides
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "fulcrum.yaml")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		v := newViper()
		if err := readConfigFile(v, path); err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		s, err := settings(v)
		if err != nil {
			return
		}
		if bs := s.Daemon.Targets; !(bs.LatencyMS > 0) || bs.PowerMW < 0 || bs.RateRPS < 0 || !(bs.Quantile > 0 && bs.Quantile < 1) {
			t.Fatalf("accepted impossible budgets %+v from %q", bs, b)
		}
		if s.Daemon.Server.RuntimeDir == "" {
			t.Fatalf("accepted an empty runtime_dir from %q", b)
		}
	})
}
