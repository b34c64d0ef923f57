// Command fulcrumd is the Fulcrum daemon: it owns the GPU turn (workers connect to its
// worker socket), the profile store and the board's power mode. Configuration comes from
// /etc/fulcrum/fulcrum.yaml (or --config), FULCRUM_* environment variables and flags, in
// increasing precedence; configs/fulcrum.yaml documents every key.
package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon"
	"github.com/fulcrum-edge/fulcrum/internal/buildinfo"
	"github.com/fulcrum-edge/fulcrum/internal/gendocs"
	"github.com/fulcrum-edge/fulcrum/internal/units"
)

func main() {
	// `fulcrumd __gendocs DIR`: man pages and completions for make package/install.
	if ok, code := gendocs.Main(os.Args, newRootCmd); ok {
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "fulcrumd:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command { return newRootCmdFor(newViper()) }

// newRootCmdFor binds the command's flags to v (tests decode through the same viper).
func newRootCmdFor(v *viper.Viper) *cobra.Command {
	var configPath, checkPath string
	cmd := &cobra.Command{
		Use:   "fulcrumd",
		Short: "Fulcrum daemon: interleave DNN training and inference on one Jetson within latency and power budgets",
		Long: `fulcrumd runs training and inference workers one minibatch at a time on the GPU,
keeping inference requests within the latency budget, and stores profiles of the board's
power modes.

Configuration: /etc/fulcrum/fulcrum.yaml (or --config), then FULCRUM_* environment
variables (FULCRUM_RUNTIME_DIR, FULCRUM_BUDGETS_LATENCY, ...: the key upper-cased with
dots as underscores), then flags. configs/fulcrum.yaml documents every key.
fulcrumd --check-config FILE checks a file (with the environment and flags) and exits.`,
		Version:       buildinfo.Version(),
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if checkPath != "" {
				return checkConfig(cmd, v, checkPath)
			}
			s, err := load(cmd.Flags(), v, configPath)
			if err != nil {
				return err
			}
			log := newLogger(os.Stderr, s.LogFormat, s.LogLevel)
			for _, w := range s.Warnings {
				log.Warn("configuration: " + w)
			}
			s.Daemon.Log = log
			s.Daemon.Version = buildinfo.Version()
			ctx := cmd.Context()
			d, err := daemon.Open(ctx, s.Daemon)
			if err != nil {
				return err
			}
			ctlSock := ""
			if d.API != nil {
				ctlSock = d.API.SocketPath()
			}
			log.Info("fulcrumd started", "pid", os.Getpid(), "socket", d.Server.SocketPath(), "control_socket", ctlSock,
				"latency_budget_ms", s.Daemon.Targets.LatencyMS, "power_budget_mw", s.Daemon.Targets.PowerMW, "board", s.Daemon.Board)
			// Tell systemd (Type=notify) we are ready; a no-op outside systemd.
			_, _ = sddaemon.SdNotify(false, sddaemon.SdNotifyReady)
			startWatchdog(ctx, log, d) // WATCHDOG=1 pings while the scheduler answers (notify.go)
			err = d.Run(ctx)
			_, _ = sddaemon.SdNotify(false, sddaemon.SdNotifyStopping)
			log.Info("fulcrumd stopped")
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "configuration file (default "+DefaultConfigPath+" when it exists)")
	f.StringVar(&checkPath, "check-config", "", "check configuration FILE (with the environment and flags), print what is wrong or that it is valid, and exit 1 or 0 without starting")
	flags := []struct{ name, key, usage string }{
		{"runtime-dir", "runtime_dir", "directory for worker.sock and the pid lock"},
		{"state-dir", "state_dir", "directory for the profile database"},
		{"db", "db", "profile database path (default <state-dir>/profiles.db)"},
		{"board", "board", `board: "auto", "sim:NAME", "nvml" (discrete GPU) or "none"`},
		{"board-root", "board_root", "filesystem root of the board's /sys, /proc, /etc (also --root, as in fulcrumctl)"},
		{"log-format", "log.format", "log format: text or json"},
		{"log-level", "log.level", "log level: debug, info, warn, error"},
		{"rate", "budgets.rate", `inference arrival rate (requests/s) or "auto" to measure it`},
	}
	defs := defaultValues()
	for _, fl := range flags {
		f.String(fl.name, fmt.Sprint(defs[fl.key]), fl.usage)
		_ = v.BindPFlag(fl.key, f.Lookup(fl.name))
	}
	// The budgets as fulcrumctl budget set takes them, with units; the old unit-in-name
	// flags still work and print a deprecation line.
	f.String("latency", fmt.Sprint(defs["budgets.latency"]), "inference latency budget on the budgets.quantile, a duration: 100ms, 0.2s (key budgets.latency)")
	f.String("power", fmt.Sprint(defs["budgets.power"]), "board power budget on the 1 s average: 30W, 30000mW, or none (key budgets.power)")
	f.String("latency-ms", "", "deprecated: --latency")
	f.String("power-w", "", "deprecated: --power")
	_ = f.MarkDeprecated("latency-ms", "use --latency with a unit, e.g. --latency 200ms")
	_ = f.MarkDeprecated("power-w", "use --power with a unit, e.g. --power 30W (or none)")
	// fulcrumctl's board commands call the same thing --root.
	f.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "root" {
			name = "board-root"
		}
		return pflag.NormalizedName(name)
	})
	return cmd
}

// load reads the configuration file, the environment and the flags into Settings.
func load(f *pflag.FlagSet, v *viper.Viper, path string) (Settings, error) {
	if err := readConfigFile(v, path); err != nil {
		return Settings{}, err
	}
	if err := budgetFlags(f, v); err != nil {
		return Settings{}, err
	}
	return settings(v)
}

// checkConfig is --check-config (as nginx -t): it decodes and validates path with the
// environment and flags, prints each problem with its key (or that the file is valid)
// and touches nothing else: no board, socket or store.
func checkConfig(cmd *cobra.Command, v *viper.Viper, path string) error {
	s, err := load(cmd.Flags(), v, path)
	out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if err != nil {
		var ce configErrors
		if !errors.As(err, &ce) {
			ce = configErrors{err}
		}
		fmt.Fprintf(errOut, "configuration %s is invalid:\n", path)
		for _, e := range ce {
			fmt.Fprintf(errOut, "  %v\n", e)
		}
		return fmt.Errorf("configuration %s is invalid", path)
	}
	for _, w := range s.Warnings {
		fmt.Fprintf(errOut, "warning: %s\n", w)
	}
	fmt.Fprintf(out, "configuration %s is valid\n", path)
	return nil
}

// budgetFlags applies --latency and --power (with units, as fulcrumctl budget set reads
// them) over the configuration; each excludes its deprecated unit-in-name form, which
// still works (a bare number of ms or W). A flag wins over every other spelling, the
// deprecated key included: that one is blanked ("", read as unset by resolveDeprecated).
func budgetFlags(f *pflag.FlagSet, v *viper.Viper) error {
	for _, b := range deprecatedKeys() {
		flag := strings.TrimPrefix(b.key, "budgets.")
		old := flag + "-" + strings.ToLower(b.unit)
		newSet, oldSet := f.Changed(flag), f.Changed(old)
		var val string
		switch {
		case newSet && oldSet:
			return fmt.Errorf("give --%s or the deprecated --%s, not both", flag, old)
		case newSet:
			val = f.Lookup(flag).Value.String()
		case oldSet:
			x := f.Lookup(old).Value.String()
			n, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
			if err != nil || math.IsNaN(n) || math.IsInf(n, 0) || n < 0 {
				return fmt.Errorf("--%s %q: want a number of %s (better: --%s %s)", old, x, b.unit, flag, b.write(30))
			}
			val = b.write(n)
		default:
			continue
		}
		parse := map[string]func(string) (float64, error){"latency": units.LatencyMS, "power": units.PowerMW}[flag]
		if _, err := parse(val); err != nil {
			return err
		}
		v.Set(b.key, val)
		v.Set(b.old, "")
	}
	return nil
}
