package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// newDaemonCmd groups what is done to a running fulcrumd's own data. Its profile store
// is locked while fulcrumd runs, so `fulcrumctl profile ls/export/import --db` cannot
// open it; these go through the control API instead.
func newDaemonCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Work on a running fulcrumd's data through its control API",
	}
	client := addSocketFlag(cmd)
	profiles := &cobra.Command{
		Use:   "profiles",
		Short: "List, export and import the profiles fulcrumd holds (its store is locked while it runs)",
	}
	cmd.AddCommand(profiles)

	ls := &cobra.Command{Use: "ls", Short: "List stored profiles", Args: cobra.NoArgs}
	lsFilter := remoteFilterFlags(ls)
	lsFmt := addOutputFlag(ls, "table", "json", "yaml")
	ls.RunE = func(cmd *cobra.Command, _ []string) error {
		f, err := lsFilter()
		if err != nil {
			return err
		}
		format, err := lsFmt.Format()
		if err != nil {
			return err
		}
		c := client()
		defer c.Close()
		ps, err := c.Profiles(cmd.Context(), api.ProfileFilter{Board: f.Board, Workload: f.Workload, Role: string(f.Role)})
		if err != nil {
			return explain("profiles", err)
		}
		if err := printProfiles(cmd.OutOrStdout(), storeProfiles(ps), format); err != nil || format != "table" {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "%d profile(s) in fulcrumd at %s\n", len(ps), c.Socket())
		return nil
	}

	export := &cobra.Command{Use: "export", Short: "Export stored profiles (CSV: the ground-truth table plus lossless columns; or JSON)", Args: cobra.NoArgs}
	exFilter := remoteFilterFlags(export)
	exFormat := export.Flags().String("format", "csv", "csv or json")
	// -o and --output are this command's file (--out) already: --json is the alias here.
	exJSON := export.Flags().Bool("json", false, "same as --format json")
	exOut := export.Flags().StringP("out", "o", "-", "file to write (- for stdout)")
	// --out is every fulcrumctl command's name for the file written; --output was this one's.
	export.Flags().StringVar(exOut, "output", "-", "")
	_ = export.Flags().MarkDeprecated("output", "use --out (-o)")
	_ = export.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]string{"csv", "json"}, cobra.ShellCompDirectiveNoFileComp))
	export.RunE = func(cmd *cobra.Command, _ []string) error {
		f, err := exFilter()
		if err != nil {
			return err
		}
		if *exJSON {
			if cmd.Flags().Changed("format") && *exFormat != "json" {
				return fmt.Errorf("--json and --format %s contradict: give one", *exFormat)
			}
			*exFormat = "json"
		}
		format, err := store.ParseFormat(*exFormat)
		if err != nil {
			return fmt.Errorf("--format: %w", err)
		}
		c := client()
		defer c.Close()
		var w io.Writer = cmd.OutOrStdout()
		var file *os.File
		if *exOut != "-" {
			// Write beside the target and rename, so a failed export leaves no half file.
			file, err = os.CreateTemp(dirOf(*exOut), ".fulcrum-export-*")
			if err != nil {
				return fmt.Errorf("create %s: %w", *exOut, err)
			}
			defer os.Remove(file.Name())
			defer file.Close()
			w = file
		}
		if err := c.ExportProfiles(cmd.Context(), w, string(format), api.ProfileFilter{Board: f.Board, Workload: f.Workload, Role: string(f.Role)}); err != nil {
			return explain("export", err)
		}
		if file != nil {
			if err := file.Close(); err != nil {
				return fmt.Errorf("write %s: %w", *exOut, err)
			}
			if err := os.Rename(file.Name(), *exOut); err != nil {
				return fmt.Errorf("write %s: %w", *exOut, err)
			}
		}
		return nil
	}

	imp := &cobra.Command{Use: "import FILE", Short: "Import profiles (an export, or a plain ground-truth CSV with --board); a refused file stores nothing",
		Long: `import sends FILE (or - for stdin) to fulcrumd, which checks every profile first (format,
values, field limits, duplicates, conflicts): a file refused there stores nothing. It is then
written in chunks with an undo log; a failure fulcrumd reports takes the written chunks back.
It is not atomic against a crash: fulcrumd killed while writing (SIGKILL, a power cut) can
leave part of the file stored. Run the same import again to complete it (identical profiles
count as unchanged); fulcrumd removes the crashed import's temporary files when it starts.`,
		Args: cobra.ExactArgs(1)}
	impFormat := imp.Flags().String("format", "", "csv or json (default: guessed from the content)")
	impBoard := imp.Flags().String("board", "", "board for CSV rows without a board column")
	impOverwrite := imp.Flags().Bool("overwrite", false, "replace stored profiles that differ (otherwise such a conflict fails the import)")
	_ = imp.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]string{"csv", "json"}, cobra.ShellCompDirectiveNoFileComp))
	imp.RunE = func(cmd *cobra.Command, args []string) error {
		opts := api.ImportOptions{Board: *impBoard, Overwrite: *impOverwrite}
		if *impFormat != "" {
			f, err := store.ParseFormat(*impFormat)
			if err != nil {
				return fmt.Errorf("--format: %w", err)
			}
			opts.Format = string(f)
		}
		var r io.Reader = cmd.InOrStdin()
		if args[0] != "-" {
			f, err := os.Open(args[0])
			if err != nil {
				return fmt.Errorf("open %s: %w", args[0], err)
			}
			defer f.Close()
			r = f
		}
		c := client()
		defer c.Close()
		res, err := c.ImportProfiles(cmd.Context(), r, opts)
		if err != nil {
			return explain("import", err)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "imported: %d added, %d unchanged, %d replaced\n", res.Added, res.Unchanged, res.Replaced)
		return nil
	}
	profiles.AddCommand(ls, export, imp)
	return cmd
}

func dirOf(path string) string { return filepath.Dir(path) }

// remoteFilterFlags adds --board, --workload, --role.
func remoteFilterFlags(cmd *cobra.Command) func() (store.Filter, error) {
	board := cmd.Flags().String("board", "", "only this board (catalog name, e.g. agx-orin-64gb)")
	workload := cmd.Flags().String("workload", "", "only this workload")
	role := cmd.Flags().String("role", "", "only this role: train or infer")
	_ = cmd.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]string{"train", "infer"}, cobra.ShellCompDirectiveNoFileComp))
	return func() (store.Filter, error) {
		f := store.Filter{Board: *board, Workload: *workload}
		if *role != "" {
			r, err := truth.ParseRole(*role)
			if err != nil {
				return f, fmt.Errorf("--role: %w", err)
			}
			f.Role = r
		}
		return f, nil
	}
}

// storeProfiles are the daemon's profiles (the API's wire form) as the store holds them,
// so that fulcrumctl daemon profiles ls prints them as profile ls does.
func storeProfiles(ps []api.Profile) []store.Profile {
	out := make([]store.Profile, len(ps))
	for i, p := range ps {
		out[i] = store.Profile{Board: p.Board, Workload: p.Workload, Role: truth.Role(p.Role), Mode: p.Mode, Batch: p.Batch, MicroBatch: p.MicroBatch,
			TimeMS:  store.TimeStats{Mean: p.TimeMS.Mean, P50: p.TimeMS.P50, P95: p.TimeMS.P95, Stddev: p.TimeMS.Stddev},
			PowerMW: store.PowerStats{Mean: p.PowerMW.Mean, Stddev: p.PowerMW.Stddev},
			Samples: p.Samples, PowerSamples: p.PowerSamples, Warmup: p.Warmup, StartedAt: p.StartedAt, FinishedAt: p.FinishedAt,
			RSE: p.RSE, Source: p.Source, Repeats: p.Repeats}
		if t := p.Throttled; t != nil {
			out[i].Throttled = &store.Throttled{Readings: t.Readings, GPUHzMin: t.GPUHzMin, CPUKHzMin: t.CPUKHzMin}
		}
	}
	return out
}
