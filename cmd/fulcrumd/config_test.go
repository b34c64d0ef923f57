package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
	if s.Daemon.Targets.LatencyMS != 55 || s.Daemon.Targets.RateRPS != 12.5 || s.Daemon.Server.RuntimeDir != "/x" {
		t.Fatalf("settings %+v: env must beat the file, the file the defaults", s.Daemon.Targets)
	}
	if s.Daemon.Server.SocketMode != 0o660 {
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

// load decodes one configuration file body as fulcrumd does (no flags).
func loadBody(t *testing.T, body string) (Settings, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	v := newViper()
	if err := readConfigFile(v, p); err != nil {
		return Settings{}, err
	}
	return settings(v)
}

// version: a file without it is version 1 and decodes without a warning; version 1 is
// read; a newer or nonsensical version is refused saying which versions this one reads.
func TestConfigVersion(t *testing.T) {
	for _, body := range []string{"", "runtime_dir: /x\n", "version: 1\nruntime_dir: /x\n"} {
		s, err := loadBody(t, body)
		if err != nil || len(s.Warnings) > 0 {
			t.Errorf("%q: %v, warnings %v; want it read as version 1 silently", body, err, s.Warnings)
		}
	}
	for body, want := range map[string]string{
		"version: 2\n":   "version 2 is newer than this fulcrumd reads (version 1)",
		"version: 0\n":   "version must be a whole number, got 0 (this fulcrumd reads version 1)",
		"version: 1.5\n": "version must be a whole number",
		"version: two\n": "version must be a whole number",
	} {
		if _, err := loadBody(t, body); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error saying %q", body, err, want)
		}
	}
}

// The budgets are written with their units; the old bare numbers under the old keys
// give the same budgets with a warning naming the new spelling; giving both in one place
// is refused; a bad value names its key.
func TestBudgetSpellings(t *testing.T) {
	for _, tc := range []struct {
		body      string
		latencyMS float64
		powerMW   float64
		warn      string // "" for none
	}{
		{body: "budgets:\n  latency: 80ms\n  power: 30W\n", latencyMS: 80, powerMW: 30000},
		{body: "budgets:\n  latency: 0.08s\n  power: 30000mW\n", latencyMS: 80, powerMW: 30000},
		{body: "budgets:\n  power: none\n", latencyMS: 100},
		{body: "budgets:\n  latency_ms: 80\n  power_w: 30\n", latencyMS: 80, powerMW: 30000, warn: "budgets.power_w: 30 is deprecated: write budgets.power: 30W"},
		{body: "budgets:\n  latency_ms: 80\n", latencyMS: 80, warn: "write budgets.latency: 80ms"},
		{body: "budgets:\n  power_w: 0\n", latencyMS: 100, warn: "write budgets.power: none"},
		{body: "budgets:\n  power_w: 12.5\n", latencyMS: 100, powerMW: 12500, warn: "write budgets.power: 12.5W"},
	} {
		s, err := loadBody(t, tc.body)
		if err != nil {
			t.Errorf("%q: %v", tc.body, err)
			continue
		}
		b := s.Daemon.Targets
		if b.LatencyMS != tc.latencyMS || b.PowerMW != tc.powerMW {
			t.Errorf("%q: budgets %+v; want %v ms, %v mW", tc.body, b, tc.latencyMS, tc.powerMW)
		}
		if got := strings.Join(s.Warnings, "\n"); (tc.warn == "") != (got == "") || !strings.Contains(got, tc.warn) {
			t.Errorf("%q: warnings %q, want %q", tc.body, got, tc.warn)
		}
	}
	for body, want := range map[string]string{
		"budgets:\n  power: 30W\n  power_w: 30\n":       "budgets.power and the deprecated budgets.power_w are both set in the configuration file",
		"budgets:\n  latency: 80ms\n  latency_ms: 80\n": "keep budgets.latency",
		"budgets:\n  latency: 80\n":                     "budgets.latency 80: give a unit",
		"budgets:\n  power: 0W\n":                       "budgets.power 0W: a power budget must be at least 1 W; to remove the power budget give budgets.power none",
		"budgets:\n  power: 30000\n":                    "did you mean 30000mW",
		"budgets:\n  power_w: thirty\n":                 "budgets.power_w (deprecated) must be a number of W",
		"budgets:\n  power_w: -3\n":                     "budgets.power_w (deprecated) must not be negative",
	} {
		if _, err := loadBody(t, body); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error saying %q", body, err, want)
		}
	}
}

// The migration hook: a file of an older version goes through every later step, in
// order; a file of the newest version through none.
func TestMigrateHook(t *testing.T) {
	rename := func(from int, old, key string) migration {
		return migration{from: from, apply: func(raw map[string]any) error {
			if x, ok := raw[old]; ok {
				raw[key] = x
				delete(raw, old)
			}
			return nil
		}}
	}
	steps := []migration{rename(1, "a", "b"), rename(2, "b", "c")}
	for version, want := range map[int]string{1: "c", 2: "c", 3: "a"} {
		raw := map[string]any{"a": 1}
		if version == 2 {
			raw = map[string]any{"b": 1}
		}
		if err := migrate(raw, version, steps); err != nil {
			t.Fatal(err)
		}
		if _, ok := raw[want]; !ok || len(raw) != 1 {
			t.Errorf("version %d: migrated to %v, want key %s", version, raw, want)
		}
	}
	if len(migrations()) != configVersion-1 {
		t.Errorf("%d migrations for version %d: one per version before it", len(migrations()), configVersion)
	}
}
