// Command fulcrumd is the Fulcrum daemon: it owns the GPU turn (workers connect to its
// worker socket), the profile store and the board's power mode. Configuration comes from
// /etc/fulcrum/fulcrum.yaml (or --config), FULCRUM_* environment variables and flags, in
// increasing precedence; configs/fulcrum.yaml documents every key.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
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
	var configPath string
	cmd := &cobra.Command{
		Use:   "fulcrumd",
		Short: "Fulcrum daemon: interleave DNN training and inference on one Jetson within latency and power budgets",
		Long: `fulcrumd runs training and inference workers one minibatch at a time on the GPU,
keeping inference requests within the latency budget, and stores profiles of the board's
power modes.

Configuration: /etc/fulcrum/fulcrum.yaml (or --config), then FULCRUM_* environment
variables (FULCRUM_RUNTIME_DIR, FULCRUM_BUDGETS_LATENCY_MS, ...: the key upper-cased with
dots as underscores), then flags. configs/fulcrum.yaml documents every key.`,
		Version:       buildinfo.Version(),
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := readConfigFile(v, configPath); err != nil {
				return err
			}
			if err := budgetFlags(cmd.Flags(), v); err != nil {
				return err
			}
			s, err := settings(v)
			if err != nil {
				return err
			}
			log := newLogger(os.Stderr, s.LogFormat, s.LogLevel)
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
				"latency_budget_ms", s.Daemon.Budgets.LatencyMS, "power_budget_mw", s.Daemon.Budgets.PowerMW, "board", s.Daemon.Board)
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
	flags := []struct{ name, key, usage string }{
		{"runtime-dir", "runtime_dir", "directory for worker.sock and the pid lock"},
		{"state-dir", "state_dir", "directory for the profile database"},
		{"db", "db", "profile database path (default <state-dir>/profiles.db)"},
		{"board", "board", `board: "auto", "sim:NAME", "nvml" (discrete GPU) or "none"`},
		{"board-root", "board_root", "filesystem root of the board's /sys, /proc, /etc (also --root, as in fulcrumctl)"},
		{"log-format", "log.format", "log format: text or json"},
		{"log-level", "log.level", "log level: debug, info, warn, error"},
		{"latency-ms", "budgets.latency_ms", "deprecated: --latency"},
		{"power-w", "budgets.power_w", "deprecated: --power"},
		{"rate", "budgets.rate", `inference arrival rate (requests/s) or "auto" to measure it`},
	}
	defs := defaultValues()
	for _, fl := range flags {
		f.String(fl.name, fmt.Sprint(defs[fl.key]), fl.usage)
		_ = v.BindPFlag(fl.key, f.Lookup(fl.name))
	}
	// The budgets as fulcrumctl budget set takes them, with units; the old unit-in-name
	// flags still work and print a deprecation line.
	f.String("latency", "", "inference latency budget on the budgets.quantile, a duration: 100ms, 0.2s (key budgets.latency_ms)")
	f.String("power", "", "board power budget on the 1 s average: 30W, 30000mW, or none (key budgets.power_w)")
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

// budgetFlags applies --latency and --power (with units, as fulcrumctl budget set reads
// them) over the configuration; each excludes its deprecated unit-in-name form.
func budgetFlags(f *pflag.FlagSet, v *viper.Viper) error {
	for _, b := range []struct {
		flag, old, key string
		parse          func(string) (float64, error)
	}{
		{"latency", "latency-ms", "budgets.latency_ms", units.LatencyMS},
		{"power", "power-w", "budgets.power_w", func(s string) (float64, error) {
			mw, err := units.PowerMW(s)
			return mw / 1000, err
		}},
	} {
		if !f.Changed(b.flag) {
			continue
		}
		if f.Changed(b.old) {
			return fmt.Errorf("give --%s or the deprecated --%s, not both", b.flag, b.old)
		}
		x, err := b.parse(f.Lookup(b.flag).Value.String())
		if err != nil {
			return err
		}
		v.Set(b.key, x)
	}
	return nil
}
