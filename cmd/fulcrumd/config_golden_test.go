package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/settings.golden from the current decoder")

// goldenCases are configurations whose decoded Settings are pinned in
// testdata/settings.golden: the golden was written by the map-and-getters decoder that
// the typed one replaced, so a difference here is a behaviour change. (Meant changes
// since: issue 29's decoding into daemon.DefaultOptions shows controller.live's
// unkeyed fields at their defaults, which the controller filled in anyway; the
// deprecated budget spellings print their warnings; issue 29's one stopping rule adds
// controller.live.target_rse and max_samples.)
var goldenCases = []struct {
	name string
	file string            // config file body; "shipped" loads configs/fulcrum.yaml
	env  map[string]string // FULCRUM_* variables
	args []string          // fulcrumd flags
}{
	{name: "shipped", file: "shipped"},
	{name: "empty", file: ""},
	{name: "every-key-changed", file: `runtime_dir: /r
state_dir: /s
db: /s/p.db
db_timeout_ms: 1500
board: sim:agx-orin-64gb
board_root: /tmp/tree
nvml:
  device: 2
  clock_control: true
  library: /opt/libnvidia-ml.so.1
log:
  format: json
  level: debug
budgets:
  latency_ms: 42.5
  power_w: 30
  rate: 12.5
  quantile: 0.95
scheduler:
  default_train_ms: 80
  default_infer_ms: 10.5
  ewma_alpha: 0.5
  overrun_factor: 2.5
  overrun_min_ms: 40
  idle_admit_arrivals: 0
  dev_k: 0
  margin_ms: 0
  starve_ms: 0
  profile_wait_ms: 0
  window_s: 12.5
  window_samples: 500
  recent_window_s: 2.5
controller:
  period_ms: 100
  power_sample_ms: 50
  power_window_ms: 2000
  power_settle_ms: 400
  rate_tau_ms: 1000
  rate_level_tau_ms: 20000
  rate_warmup_ms: 1500
  drift_rel: 0.5
  drift_hold_ms: 2000
  plan_margin: 0.1
  plan_confidence: 0.95
  step_margin: 0.2
  hysteresis: 0.05
  hold_ms: 4000
  cooldown_ms: 500
  latency_cooldown_ms: 4000
  power_fail_ms: 2000
  min_latency_samples: 10
  min_profiles: 5
  searcher: als
  max_profiles: 40
  research_hold_ms: 20000
  research_backoff_max: 8
  research_off: true
  research_paused_als: true
  noise_rel: 0.05
  events: 50
  infer_batches: [1, 4, 16]
  live:
    warmup: 2
    samples: 7
    min_time_ms: 250
    target_rse: 0.05
    max_samples: 30
control:
  socket_mode: "0600"
  group: "-"
  allow_uids: [1000, 1001]
  allow_gids: [27]
worker:
  socket_mode: "0666"
  max_line_bytes: 4096
  max_workers: 8
  max_per_process: 3
  reserved_slots: 1
  group: wheel
  write_timeout_ms: 2500
  register_timeout_ms: 1500
  hold_factor: 4
  hold_min_ms: 2500
  hold_max_ms: 30000
metrics:
  listen: 127.0.0.1:9464
`},
	{name: "env", file: "budgets:\n  latency_ms: 40\n", env: map[string]string{
		"FULCRUM_BUDGETS_LATENCY_MS":         "55",
		"FULCRUM_BUDGETS_RATE":               "3",
		"FULCRUM_CONTROLLER_INFER_BATCHES":   "1,2, 8",
		"FULCRUM_CONTROL_ALLOW_UIDS":         "5 6",
		"FULCRUM_SCHEDULER_WINDOW_S":         "7.5",
		"FULCRUM_WORKER_MAX_WORKERS":         "3",
		"FULCRUM_CONTROLLER_LIVE_SAMPLES":    "9",
		"FULCRUM_NVML_CLOCK_CONTROL":         "true",
		"FULCRUM_METRICS_LISTEN":             " :9464 ",
		"FULCRUM_CONTROLLER_PLAN_MARGIN":     "0.2",
		"FULCRUM_SCHEDULER_DEFAULT_TRAIN_MS": "150",
	}},
	{name: "flags", file: "budgets:\n  latency_ms: 40\n", args: []string{
		"--latency", "250ms", "--power", "15W", "--rate", "7", "--board", "none",
		"--root", "/tmp/x", "--runtime-dir", "/tmp/run", "--state-dir", "/tmp/state",
		"--db", "/tmp/p.db", "--log-format", "json", "--log-level", "warn",
	}},
	{name: "deprecated-flags", file: "", args: []string{"--latency-ms", "120", "--power-w", "20"}},
	// The budgets with their units give what every-key-changed's old spellings give.
	{name: "units", file: "version: 1\nbudgets:\n  latency: 42.5ms\n  power: 30000mW\n  rate: 12.5\n  quantile: 0.95\n"},
	// An old spelling in the environment wins over the new one in the file (env > file).
	{name: "deprecated-env", file: "budgets:\n  power: 30W\n  latency: 80ms\n", env: map[string]string{
		"FULCRUM_BUDGETS_POWER_W": "12", "FULCRUM_BUDGETS_LATENCY": "60ms",
	}},
	{name: "flag-over-deprecated-file", file: "budgets:\n  power_w: 30\n  latency_ms: 40\n", args: []string{"--power", "none", "--latency", "0.2s"}},
}

// loadForGolden decodes one golden case the way fulcrumd's command does.
func loadForGolden(t *testing.T, file string, args []string) (Settings, error) {
	t.Helper()
	path := "../../configs/fulcrum.yaml"
	if file != "shipped" {
		path = filepath.Join(t.TempDir(), "f.yaml")
		if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v := newViper()
	cmd := newRootCmdFor(v)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	if err := readConfigFile(v, path); err != nil {
		return Settings{}, err
	}
	if err := budgetFlags(cmd.Flags(), v); err != nil {
		return Settings{}, err
	}
	return settings(v)
}

// describe prints the decoded settings one field a line (%+v would print the logger and
// callback pointers, which differ between runs).
func describe(s Settings) string {
	d := s.Daemon
	var b strings.Builder
	for _, w := range s.Warnings {
		fmt.Fprintf(&b, "warning %s\n", w)
	}
	fmt.Fprintf(&b, "log %s %v\n", s.LogFormat, s.LogLevel)
	sv := d.Server
	fmt.Fprintf(&b, "server runtime_dir=%q socket_mode=%v max_line_bytes=%d max_workers=%d write_timeout=%v register_timeout=%v\n",
		sv.RuntimeDir, sv.SocketMode, sv.MaxLineBytes, sv.MaxWorkers, sv.WriteTimeout, sv.RegisterTimeout)
	fmt.Fprintf(&b, "server max_per_process=%d reserved_slots=%d group=%q hold_max=%v\n", sv.MaxPerProcess, sv.ReservedSlots, sv.Group, sv.Sched.HoldMax)
	sc := sv.Sched
	cb := d.Targets
	// The scheduler's latency budget is the targets' (the controller gives it); the line
	// keeps it where the scheduler's own copy used to be printed.
	fmt.Fprintf(&b, "sched latency=%v train=%v infer=%v alpha=%v overrun=%v/%v hold=%v/%v idle=%v devk=%v margin=%v starve=%v profile_wait=%v window=%v/%d recent=%v trust=%v\n",
		time.Duration(cb.LatencyMS*float64(time.Millisecond)), sc.DefaultTrain, sc.DefaultInfer, sc.EWMAAlpha, sc.OverrunFactor, sc.OverrunMin, sc.HoldFactor, sc.HoldMin,
		sc.IdleAdmitArrivals, sc.DevK, sc.Margin, sc.Starve, sc.ProfileWait, sc.Window, sc.WindowSamples, sc.RecentWindow, sc.TrustReportedDurations)
	fmt.Fprintf(&b, "daemon state_dir=%q db=%q store_timeout=%v board=%q board_root=%q nvml=%+v metrics=%q\n",
		d.StateDir, d.DBPath, d.StoreTimeout, d.Board, d.BoardRoot, d.NVML, d.MetricsListen)
	fmt.Fprintf(&b, "control %+v\n", d.Control)
	fmt.Fprintf(&b, "control_budgets latency_ms=%v power_w=%v rate_rps=%v quantile=%v rho_max=%v\n", cb.LatencyMS, cb.PowerMW/1000, cb.RateRPS, cb.Quantile, cb.RhoMax)
	fmt.Fprintf(&b, "api socket_mode=%v group=%q uids=%v gids=%v path=%q\n", d.API.SocketMode, d.API.Group, d.API.AllowUIDs, d.API.AllowGIDs, d.API.SocketPath)
	return b.String()
}

// TestSettingsGolden: the typed decoder gives the settings the old one gave.
func TestSettingsGolden(t *testing.T) {
	var got strings.Builder
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			s, err := loadForGolden(t, c.file, c.args)
			fmt.Fprintf(&got, "== %s\n", c.name)
			if err != nil {
				fmt.Fprintf(&got, "error %v\n", err)
				return
			}
			got.WriteString(describe(s))
		})
	}
	path := filepath.Join("testdata", "settings.golden")
	if *updateGolden {
		if err := os.WriteFile(path, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run TestSettingsGolden -update writes it)", err)
	}
	if got.String() != string(want) {
		t.Errorf("decoded settings differ from testdata/settings.golden:\n--- got\n%s\n--- want\n%s", got.String(), want)
	}
}
