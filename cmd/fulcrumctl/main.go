// Command fulcrumctl inspects and drives a Jetson board (or a simulated one), runs
// profiling campaigns and benchmarks, and talks to fulcrumd.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fulcrum-edge/fulcrum/internal/buildinfo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "fulcrumctl:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "fulcrumctl",
		Short: "Train and serve DNNs on one Jetson within latency and power budgets",
		Long: `fulcrumctl inspects and drives a Jetson board's power modes, runs profiling
campaigns and searcher benchmarks, runs the simulated board, and controls fulcrumd.

Every command that touches the board takes --root (default /): the filesystem root under
which /sys, /proc/device-tree and /etc are read, so the same commands work on a
simulated board's tree.`,
		Version:       buildinfo.Version(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// One constructor per command group, each in its own file.
	root.AddCommand(
		newBoardCmd(),
		newSimCmd(),
		newProfileCmd(),
		newBenchCmd(),
		newBundleCmd(),
		newGPUCmd(),
		newStatusCmd(), newBudgetCmd(), newWorkersCmd(), newModeCmd(), newOptimizeCmd(), newEventsCmd(), newWatchCmd(), newDaemonCmd(),
	)
	return root
}
