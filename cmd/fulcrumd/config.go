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

	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// DefaultConfigPath is read when --config is not given and the file exists.
const DefaultConfigPath = "/etc/fulcrum/fulcrum.yaml"

// defaults lists every configuration key with its default. configs/fulcrum.yaml documents
// each one (a test checks the two agree).
var defaults = map[string]any{
	"runtime_dir":                   "/run/fulcrum",
	"state_dir":                     "/var/lib/fulcrum",
	"db":                            "",
	"db_timeout_ms":                 1000,
	"board":                         "auto",
	"board_root":                    "/",
	"log.format":                    "text",
	"log.level":                     "info",
	"budgets.latency_ms":            100.0,
	"budgets.power_w":               0.0,
	"budgets.rate":                  "auto",
	"budgets.quantile":              0.99,
	"scheduler.default_train_ms":    100.0,
	"scheduler.default_infer_ms":    20.0,
	"scheduler.ewma_alpha":          0.2,
	"scheduler.overrun_factor":      3.0,
	"scheduler.overrun_min_ms":      50.0,
	"scheduler.idle_admit_arrivals": 0.1,
	"scheduler.dev_k":               2.0,
	"scheduler.margin_ms":           5.0,
	"scheduler.starve_ms":           5000.0,
	"scheduler.window_s":            30.0,
	"scheduler.window_samples":      10000,
	"worker.socket_mode":            "0660",
	"worker.max_line_bytes":         65536,
	"worker.max_workers":            64,
	"worker.write_timeout_ms":       5000,
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
	if board != "auto" && board != "none" && !(strings.HasPrefix(board, "sim:") && len(board) > 4) {
		bad(`board must be "auto", "sim:NAME" or "none", got %q`, board)
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
				Window:            time.Duration(positive("scheduler.window_s") * float64(time.Second)),
				WindowSamples:     intKey("scheduler.window_samples"),
			},
		},
		StateDir:     v.GetString("state_dir"),
		DBPath:       v.GetString("db"),
		StoreTimeout: msDur(positive("db_timeout_ms")),
		Board:        board,
		BoardRoot:    v.GetString("board_root"),
	}
	if s.Daemon.Server.RuntimeDir == "" {
		bad("runtime_dir must be set (default /run/fulcrum)")
	}
	if len(errs) > 0 {
		return Settings{}, fmt.Errorf("invalid configuration: %w", errors.Join(errs...))
	}
	return s, nil
}

func newLogger(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
