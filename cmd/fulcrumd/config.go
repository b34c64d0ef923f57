package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/viper"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/fulcrum/search"
	"github.com/fulcrum-edge/fulcrum/powermode/nvml"
)

// DefaultConfigPath is read when --config is not given and the file exists.
const DefaultConfigPath = "/etc/fulcrum/fulcrum.yaml"

// defaults lists every configuration key with its default. configs/fulcrum.yaml documents
// each one (a test checks the two agree).
var defaults = map[string]any{
	"runtime_dir":                    "/run/fulcrum",
	"state_dir":                      "/var/lib/fulcrum",
	"db":                             "",
	"db_timeout_ms":                  1000,
	"board":                          "auto",
	"board_root":                     "/",
	"nvml.device":                    0,
	"nvml.clock_control":             false,
	"nvml.library":                   "",
	"log.format":                     "text",
	"log.level":                      "info",
	"budgets.latency_ms":             100.0,
	"budgets.power_w":                0.0,
	"budgets.rate":                   "auto",
	"budgets.quantile":               0.99,
	"scheduler.default_train_ms":     100.0,
	"scheduler.default_infer_ms":     20.0,
	"scheduler.ewma_alpha":           0.2,
	"scheduler.overrun_factor":       3.0,
	"scheduler.overrun_min_ms":       50.0,
	"scheduler.idle_admit_arrivals":  0.1,
	"scheduler.dev_k":                2.0,
	"scheduler.margin_ms":            5.0,
	"scheduler.starve_ms":            5000.0,
	"scheduler.profile_wait_ms":      1000.0,
	"scheduler.window_s":             30.0,
	"scheduler.window_samples":       10000,
	"scheduler.recent_window_s":      5.0,
	"controller.period_ms":           250.0,
	"controller.power_sample_ms":     100.0,
	"controller.power_window_ms":     1000.0,
	"controller.power_settle_ms":     500.0,
	"controller.rate_tau_ms":         2000.0,
	"controller.rate_warmup_ms":      2000.0,
	"controller.drift_rel":           0.25,
	"controller.drift_hold_ms":       3000.0,
	"controller.plan_margin":         0.05,
	"controller.step_margin":         0.1,
	"controller.hysteresis":          0.1,
	"controller.hold_ms":             5000.0,
	"controller.cooldown_ms":         1000.0,
	"controller.latency_cooldown_ms": 5000.0,
	"controller.power_fail_ms":       1000.0,
	"controller.min_latency_samples": 20,
	"controller.min_profiles":        3,
	"controller.searcher":            "gmd",
	"controller.max_profiles":        0,
	"controller.noise_rel":           0.03,
	"controller.events":              1000,
	"controller.infer_batches":       []int{1, 2, 4, 8, 16, 32},
	"controller.live.warmup":         1,
	"controller.live.samples":        5,
	"controller.live.min_time_ms":    300.0,
	"control.socket_mode":            "0660",
	"control.group":                  "fulcrum",
	"control.allow_uids":             []int{},
	"control.allow_gids":             []int{},
	"metrics.listen":                 "",
	"worker.socket_mode":             "0660",
	"worker.max_line_bytes":          65536,
	"worker.max_workers":             64,
	"worker.write_timeout_ms":        5000,
	"worker.register_timeout_ms":     5000,
	"worker.hold_factor":             10.0,
	"worker.hold_min_ms":             5000.0,
}

// Budgets are the operator's targets (the planner and controller use them; the scheduler
// uses the latency budget and quantile).
type Budgets struct {
	LatencyMS float64
	PowerW    float64 // 0: no power budget
	RateHz    float64 // 0: measure the arrival rate ("auto")
	Quantile  float64
}

// Settings is the validated configuration.
type Settings struct {
	Daemon    daemon.Options
	Budgets   Budgets
	LogFormat string
	LogLevel  slog.Level
}

func newViper() *viper.Viper {
	v := viper.New()
	for k, d := range defaults {
		v.SetDefault(k, d)
	}
	v.SetEnvPrefix("FULCRUM")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	return v
}

// readConfigFile loads path, or the default path when it exists and path is empty.
func readConfigFile(v *viper.Viper, path string) error {
	explicit := path != ""
	if !explicit {
		if _, err := os.Stat(DefaultConfigPath); err != nil {
			return nil
		}
		path = DefaultConfigPath
	}
	v.SetConfigFile(path)
	v.SetConfigType("yaml")
	if err := v.ReadInConfig(); err != nil {
		return fmt.Errorf("read config %s: %w (fix the YAML, or see configs/fulcrum.yaml for every key)", path, err)
	}
	for _, k := range v.AllKeys() {
		if _, ok := defaults[k]; !ok && v.InConfig(k) {
			return fmt.Errorf("config %s: unknown key %q (see configs/fulcrum.yaml for every key)", path, k)
		}
	}
	return nil
}

func settings(v *viper.Viper) (Settings, error) {
	var s Settings
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	num := func(key string) float64 {
		f, err := strconv.ParseFloat(strings.TrimSpace(v.GetString(key)), 64)
		if err != nil {
			bad("%s: %q is not a number", key, v.GetString(key))
		}
		return f
	}
	positive := func(key string) float64 {
		f := num(key)
		if f <= 0 {
			bad("%s must be positive, got %v", key, f)
		}
		return f
	}
	nonNegative := func(key string) float64 {
		f := num(key)
		if f < 0 {
			bad("%s must not be negative, got %v", key, f)
		}
		return f
	}
	msDur := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

	s.Budgets.LatencyMS = positive("budgets.latency_ms")
	if s.Budgets.PowerW = num("budgets.power_w"); s.Budgets.PowerW < 0 {
		bad("budgets.power_w must be 0 (none) or positive, got %v", s.Budgets.PowerW)
	}
	if r := strings.TrimSpace(v.GetString("budgets.rate")); r != "auto" {
		f, err := strconv.ParseFloat(r, 64)
		if err != nil || f <= 0 {
			bad(`budgets.rate must be "auto" or a positive requests/s, got %q`, r)
		}
		s.Budgets.RateHz = f
	}
	if s.Budgets.Quantile = num("budgets.quantile"); s.Budgets.Quantile <= 0 || s.Budgets.Quantile >= 1 {
		bad("budgets.quantile must be in (0,1), e.g. 0.99, got %v", s.Budgets.Quantile)
	}

	s.LogFormat = v.GetString("log.format")
	if s.LogFormat != "text" && s.LogFormat != "json" {
		bad(`log.format must be "text" or "json", got %q`, s.LogFormat)
	}
	if err := s.LogLevel.UnmarshalText([]byte(v.GetString("log.level"))); err != nil {
		bad(`log.level must be debug, info, warn or error, got %q`, v.GetString("log.level"))
	}

	mode, err := strconv.ParseUint(v.GetString("worker.socket_mode"), 8, 32)
	if err != nil || mode > 0o777 {
		bad(`worker.socket_mode must be octal permission bits like "0660", got %q`, v.GetString("worker.socket_mode"))
	}
	alpha := num("scheduler.ewma_alpha")
	if alpha <= 0 || alpha > 1 {
		bad("scheduler.ewma_alpha must be in (0,1], got %v", alpha)
	}
	idle := num("scheduler.idle_admit_arrivals")
	if idle < 0 {
		bad("scheduler.idle_admit_arrivals must not be negative, got %v", idle)
	}
	board := v.GetString("board")
	if board != "auto" && board != "none" && board != "nvml" && !(strings.HasPrefix(board, "sim:") && len(board) > 4) {
		bad(`board must be "auto", "sim:NAME", "nvml" or "none", got %q`, board)
	}
	nvmlDevice := v.GetInt("nvml.device")
	if nvmlDevice < 0 {
		bad("nvml.device must be a GPU index (0, 1, …; see nvidia-smi), got %d", nvmlDevice)
	}
	intKey := func(key string) int {
		f := positive(key)
		return int(f)
	}
	s.Daemon = daemon.Options{
		Server: daemon.Config{
			RuntimeDir:   v.GetString("runtime_dir"),
			SocketMode:   os.FileMode(mode),
			MaxLineBytes: intKey("worker.max_line_bytes"),
			MaxWorkers:   intKey("worker.max_workers"),
			WriteTimeout: msDur(positive("worker.write_timeout_ms")),
			Sched: sched.Config{
				LatencyBudget:     msDur(s.Budgets.LatencyMS),
				DefaultTrain:      msDur(positive("scheduler.default_train_ms")),
				DefaultInfer:      msDur(positive("scheduler.default_infer_ms")),
				EWMAAlpha:         alpha,
				OverrunFactor:     positive("scheduler.overrun_factor"),
				OverrunMin:        msDur(positive("scheduler.overrun_min_ms")),
				IdleAdmitArrivals: idle,
				DevK:              nonNegative("scheduler.dev_k"),
				Margin:            msDur(nonNegative("scheduler.margin_ms")),
				Starve:            msDur(nonNegative("scheduler.starve_ms")),
				ProfileWait:       msDur(nonNegative("scheduler.profile_wait_ms")),
				Window:            time.Duration(positive("scheduler.window_s") * float64(time.Second)),
				WindowSamples:     intKey("scheduler.window_samples"),
			},
		},
		StateDir:     v.GetString("state_dir"),
		DBPath:       v.GetString("db"),
		StoreTimeout: msDur(positive("db_timeout_ms")),
		Board:        board,
		BoardRoot:    v.GetString("board_root"),
		NVML: nvml.Options{Device: nvmlDevice, ClockControl: v.GetBool("nvml.clock_control"),
			LibraryPath: v.GetString("nvml.library")},
	}
	s.Daemon.Server.Sched.RecentWindow = time.Duration(positive("scheduler.recent_window_s") * float64(time.Second))
	// Worker-socket limits: how long a connection may stay unregistered and hold a turn.
	s.Daemon.Server.RegisterTimeout = msDur(positive("worker.register_timeout_ms"))
	if s.Daemon.Server.Sched.HoldFactor = num("worker.hold_factor"); s.Daemon.Server.Sched.HoldFactor < 1 {
		bad("worker.hold_factor must be at least 1 (a multiple of the expected turn time), got %v", s.Daemon.Server.Sched.HoldFactor)
	}
	s.Daemon.Server.Sched.HoldMin = msDur(positive("worker.hold_min_ms"))
	frac := func(key string) float64 {
		f := num(key)
		if f <= 0 || f >= 1 {
			bad("%s must be in (0,1), got %v", key, f)
		}
		return f
	}
	searcher := v.GetString("controller.searcher")
	if err := search.CheckLive(searcher); err != nil {
		bad("controller.%v", err)
	}
	maxProf := int(nonNegative("controller.max_profiles"))
	batches, err := intList(v, "controller.infer_batches")
	if err != nil {
		bad("%v", err)
	}
	s.Daemon.Control = control.Config{
		Period:          msDur(positive("controller.period_ms")),
		PowerSample:     msDur(positive("controller.power_sample_ms")),
		PowerWindow:     msDur(positive("controller.power_window_ms")),
		PowerSettle:     msDur(positive("controller.power_settle_ms")),
		RateTau:         msDur(positive("controller.rate_tau_ms")),
		RateWarmup:      msDur(positive("controller.rate_warmup_ms")),
		DriftRel:        positive("controller.drift_rel"),
		DriftHold:       msDur(positive("controller.drift_hold_ms")),
		PlanMargin:      frac("controller.plan_margin"),
		StepMargin:      frac("controller.step_margin"),
		Hysteresis:      frac("controller.hysteresis"),
		Hold:            msDur(positive("controller.hold_ms")),
		Cooldown:        msDur(positive("controller.cooldown_ms")),
		LatencyCooldown: msDur(positive("controller.latency_cooldown_ms")),
		PowerFail:       msDur(positive("controller.power_fail_ms")),
		MinLatency:      intKey("controller.min_latency_samples"),
		MinProfiles:     intKey("controller.min_profiles"),
		Searcher:        searcher,
		MaxProfiles:     maxProf,
		NoiseRel:        frac("controller.noise_rel"),
		Events:          intKey("controller.events"),
		InferBatches:    batches,
		Live: control.LiveOptions{
			Warmup:  intKey("controller.live.warmup"),
			Samples: intKey("controller.live.samples"),
			MinTime: msDur(positive("controller.live.min_time_ms")),
		},
	}
	s.Daemon.Budgets = plan.Budgets{LatencyMS: s.Budgets.LatencyMS, PowerMW: s.Budgets.PowerW * 1000, RateRPS: s.Budgets.RateHz, Quantile: s.Budgets.Quantile}
	if err := s.Daemon.Budgets.ValidateTargets(); err != nil {
		bad("budgets: %v", err)
	}
	cmode, err := strconv.ParseUint(v.GetString("control.socket_mode"), 8, 32)
	if err != nil || cmode > 0o777 {
		bad(`control.socket_mode must be octal permission bits like "0660", got %q`, v.GetString("control.socket_mode"))
	}
	uids, err := intList(v, "control.allow_uids")
	if err != nil {
		bad("%v", err)
	}
	gids, err := intList(v, "control.allow_gids")
	if err != nil {
		bad("%v", err)
	}
	s.Daemon.MetricsListen = strings.TrimSpace(v.GetString("metrics.listen"))
	s.Daemon.API = api.Config{SocketMode: os.FileMode(cmode), Group: v.GetString("control.group"), AllowUIDs: uids, AllowGIDs: gids}
	if s.Daemon.Server.RuntimeDir == "" {
		bad("runtime_dir must be set (default /run/fulcrum)")
	}
	if len(errs) > 0 {
		return Settings{}, fmt.Errorf("invalid configuration: %w", errors.Join(errs...))
	}
	return s, nil
}

// intList reads a list of integers given as a YAML list or a comma/space separated
// string (environment variables).
func intList(v *viper.Viper, key string) ([]int, error) {
	var out []int
	switch x := v.Get(key).(type) {
	case []int:
		return x, nil
	case []any:
		for _, e := range x {
			n, err := strconv.Atoi(strings.TrimSpace(fmt.Sprint(e)))
			if err != nil {
				return nil, fmt.Errorf("%s: %v is not an integer", key, e)
			}
			out = append(out, n)
		}
	default:
		for _, f := range strings.FieldsFunc(fmt.Sprint(x), func(r rune) bool { return r == ',' || r == ' ' || r == '[' || r == ']' }) {
			n, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("%s: %q is not an integer (want a list like [1, 2, 4])", key, f)
			}
			out = append(out, n)
		}
	}
	return out, nil
}

func newLogger(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
