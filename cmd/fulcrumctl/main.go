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
	"github.com/spf13/pflag"

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
	root.SetHelpCommand(newHelpCmd())
	requireKnownSubcommands(root)
	return root
}

// newHelpCmd is cobra's help command, except that an unknown topic fails (exit 1):
// cobra's prints "Unknown help topic" and exits 0, so a script cannot tell.
func newHelpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long:  "Help prints the help of any command: fulcrumctl help budget set.",
		ValidArgsFunction: func(c *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			cmd, _, err := c.Root().Find(args)
			if err != nil || cmd == nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []string
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() {
					names = append(names, sub.Name())
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err == nil && cmd != nil && len(rest) == 0 {
				cmd.InitDefaultHelpFlag()
				cmd.InitDefaultVersionFlag()
				return cmd.Help()
			}
			return fmt.Errorf("unknown help topic %q: fulcrumctl help lists the commands", strings.Join(args, " "))
		},
	}
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
	// The group parses no flags of its own: with parsing, "budget sett --latency 10ms"
	// failed on the flag ("unknown flag: --latency") before the misspelt command.
	cmd.DisableFlagParsing = true
	cmd.Args = func(c *cobra.Command, raw []string) error {
		args, unknown := splitGroupArgs(c, raw)
		if len(args) == 0 && unknown != "" {
			return fmt.Errorf("unknown flag %s for %q: flags go after a subcommand, e.g. %s %s %s\n\n%s",
				unknown, c.CommandPath(), c.CommandPath(), firstSubcommand(c), unknown, c.UsageString())
		}
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

// splitGroupArgs splits a command group's unparsed arguments into its positional ones
// and the first flag it does not know. A flag it knows (--socket, --help) takes its
// value as the flag set says; an unknown one takes the next word unless that is a flag,
// as pflag does with unknown flags allowed.
func splitGroupArgs(c *cobra.Command, raw []string) (args []string, unknown string) {
	for i := 0; i < len(raw); i++ {
		a := raw[i]
		if a == "--" {
			return append(args, raw[i+1:]...), unknown
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			args = append(args, a)
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		var fl *pflag.Flag
		if strings.HasPrefix(a, "--") {
			fl = c.Flags().Lookup(name)
		} else if len(name) == 1 {
			fl = c.Flags().ShorthandLookup(name)
		}
		takesValue := fl == nil || fl.NoOptDefVal == ""
		if fl == nil && unknown == "" && name != "help" && name != "h" {
			unknown = a
		}
		if !hasValue && takesValue && i+1 < len(raw) && !strings.HasPrefix(raw[i+1], "-") {
			i++ // the flag's value
		}
	}
	return args, unknown
}

// firstSubcommand names a group's first subcommand that takes flags (for examples).
func firstSubcommand(c *cobra.Command) string {
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() && sub.Name() == "set" {
			return sub.Name()
		}
	}
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			return sub.Name()
		}
	}
	return "SUBCOMMAND"
}
