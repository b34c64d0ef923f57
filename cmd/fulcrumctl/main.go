// Command fulcrumctl inspects and drives a Jetson board (or a simulated one), runs
// profiling campaigns and benchmarks, and talks to fulcrumd.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fulcrum-edge/fulcrum/internal/buildinfo"
	"github.com/fulcrum-edge/fulcrum/internal/gendocs"
)

func main() {
	// `fulcrumctl __gendocs DIR`: man pages and completions for make package/install.
	if ok, code := gendocs.Main(os.Args, newRootCmd); ok {
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "fulcrumctl:", shownLines(err.Error()))
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
		newStatusCmd(), newBudgetCmd(), newWorkersCmd(), newModeCmd(), newOptimizeCmd(), newEventsCmd(), newWatchCmd(), newTopCmd(), newDaemonCmd(), newHealthCmd(),
	)
	// cobra adds its completion command only when the root executes; add it now so that
	// `completion bogus` fails like every other group.
	root.InitDefaultCompletionCmd()
	requireKnownSubcommands(root)
	return root
}

// requireKnownSubcommands makes every command group (subcommands, no action of its own)
// fail on an unknown subcommand, with the usage, instead of printing help and exiting 0
// as cobra does below the root. With no argument a group prints its help.
func requireKnownSubcommands(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		requireKnownSubcommands(sub)
	}
	if !cmd.HasSubCommands() || cmd.Runnable() || !cmd.HasParent() {
		return
	}
	cmd.Args = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
		if c.SuggestionsMinimumDistance <= 0 {
			c.SuggestionsMinimumDistance = 2 // cobra's default, set by the root's check only
		}
		if s := c.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		}
		return fmt.Errorf("%s\n\n%s", msg, c.UsageString())
	}
	cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
}
