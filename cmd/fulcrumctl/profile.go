package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/fulcrum-edge/fulcrum/configs"
	"github.com/fulcrum-edge/fulcrum/internal/paths"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/nvpmodel"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/powermode/tegra"
	"github.com/fulcrum-edge/fulcrum/profiler"
	"github.com/fulcrum-edge/fulcrum/profiler/simprof"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// defaultProfileDB is where fulcrumd and fulcrumctl keep profiles on a board.
const defaultProfileDB = paths.Store

func newProfileCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "profile",
		Short: "Profile workloads at power modes and manage the profile store",
		Long: `profile runs profiling campaigns (one workload at many power modes) and lists,
exports, imports and checks the profile store, a bbolt file (--db, default ` + defaultProfileDB + `).

Only one process may have the store open for writing: stop fulcrumd (or use its API)
before running a campaign against the daemon's store. docs/profiler.md has the details.`,
	}
	cmd.PersistentFlags().String("db", defaultProfileDB, "profile store file (bbolt)")
	cmd.AddCommand(newProfileRunCmd(), newProfileLsCmd(), newProfileExportCmd(), newProfileImportCmd(), newProfileCheckCmd(), newProfilePlotCmd())
	return cmd
}

func dbFlag(cmd *cobra.Command) string {
	p, _ := cmd.Flags().GetString("db")
	return p
}

// filterFlags adds --board, --workload, --role to cmd and returns a reader for them.
func filterFlags(cmd *cobra.Command) func() (store.Filter, error) {
	board := cmd.Flags().String("board", "", "only this board (catalog name, e.g. agx-orin-64gb)")
	workload := cmd.Flags().String("workload", "", "only this workload")
	role := cmd.Flags().String("role", "", "only this role: train or infer")
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

func newProfileLsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List stored profiles",
		Args:  cobra.NoArgs,
	}
	filter := filterFlags(cmd)
	outFmt := addOutputFlag(cmd, "table", "json", "yaml")
	campaigns := cmd.Flags().Bool("campaigns", false, "list campaign records instead (state, counts, whether a board snapshot awaits restoring)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		f, err := filter()
		if err != nil {
			return err
		}
		format, err := outFmt.Format()
		if err != nil {
			return err
		}
		s, err := store.Open(dbFlag(cmd), store.Options{ReadOnly: true})
		if err != nil {
			return err
		}
		defer s.Close()
		if *campaigns {
			return listCampaigns(cmd.OutOrStdout(), s, format)
		}
		ps, err := s.List(f)
		if err != nil {
			return err
		}
		if err := printProfiles(cmd.OutOrStdout(), ps, format); err != nil || format != "table" {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "%d profile(s) in %s\n", len(ps), s.Path())
		return nil
	}
	return cmd
}

// listCampaigns prints the campaign records, sorted by id.
func listCampaigns(out io.Writer, s *store.Store, format string) error {
	raw, err := s.Campaigns()
	if err != nil {
		return err
	}
	recs := make([]profiler.CampaignRecord, 0, len(raw))
	for id, r := range raw {
		var rec profiler.CampaignRecord
		if err := json.Unmarshal(r, &rec); err != nil {
			return fmt.Errorf("campaign record %s: %w (run fulcrumctl profile check)", id, err)
		}
		recs = append(recs, rec)
	}
	slices.SortFunc(recs, func(a, b profiler.CampaignRecord) int { return strings.Compare(a.ID, b.ID) })
	switch format {
	case "json":
		return printJSON(out, recs)
	case "yaml":
		return printYAML(out, recs)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CAMPAIGN\tSTATE\tMEASURED\tSKIPPED\tTOTAL\tUPDATED\tBOARD_SNAPSHOT\tERROR")
	for _, r := range recs {
		snap := "-"
		if r.Snapshot != nil {
			snap = "pending restore (taken " + r.Snapshot.TakenAt.UTC().Format(time.RFC3339) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", shown(r.ID), shown(r.State), r.Measured, r.Skipped, r.Total, r.UpdatedAt.UTC().Format(time.RFC3339), snap, shown(r.Error))
	}
	return tw.Flush()
}

func newProfileExportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Export profiles as a ground-truth CSV (docs/design.md §8, plus lossless extra columns) or JSON",
		Args:  cobra.NoArgs,
	}
	filter := filterFlags(cmd)
	format := cmd.Flags().String("format", "csv", "csv or json (same as -o)")
	outFmt := addOutputFlag(cmd, "csv", "json").withFormatAlias(format)
	outPath := cmd.Flags().String("out", "", "write to this file (atomically) instead of stdout")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		f, err := filter()
		if err != nil {
			return err
		}
		chosen, err := outFmt.Format()
		if err != nil {
			return err
		}
		fm, err := store.ParseFormat(chosen)
		if err != nil {
			return fmt.Errorf("--format: %w", err)
		}
		s, err := store.Open(dbFlag(cmd), store.Options{ReadOnly: true})
		if err != nil {
			return err
		}
		defer s.Close()
		if *outPath == "" {
			return s.Export(cmd.OutOrStdout(), fm, f)
		}
		return writeAtomically(*outPath, func(w io.Writer) error { return s.Export(w, fm, f) })
	}
	return cmd
}

// writeAtomically writes a temporary file next to path and renames it into place, so a
// failed export never leaves a truncated file that looks complete.
func writeAtomically(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func newProfileImportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import FILE",
		Short: "Import profiles from an export (csv or json) or a plain ground-truth CSV; - reads stdin",
		Long: `import stores every profile of FILE in one transaction: all of them, or none when
any is invalid or conflicts with a different stored profile (--overwrite replaces those).
Identical profiles already stored are counted as unchanged. A plain ground-truth CSV
(docs/design.md §8: no board column) needs --board; its profiles get source "import".`,
		Args: cobra.ExactArgs(1),
	}
	format := cmd.Flags().String("format", "", "csv or json (default: guessed from the content)")
	board := cmd.Flags().String("board", "", "board name for CSV rows without a board column")
	overwrite := cmd.Flags().Bool("overwrite", false, "replace stored profiles that differ")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		opts := store.ImportOptions{Board: *board, Overwrite: *overwrite}
		if *format != "" {
			fm, err := store.ParseFormat(*format)
			if err != nil {
				return fmt.Errorf("--format: %w", err)
			}
			opts.Format = fm
		}
		var in io.Reader = cmd.InOrStdin()
		if args[0] != "-" {
			f, err := os.Open(args[0])
			if err != nil {
				return fmt.Errorf("import: %w", err)
			}
			defer f.Close()
			in = f
		}
		s, err := store.Open(dbFlag(cmd), store.Options{})
		if err != nil {
			return err
		}
		defer s.Close()
		res, err := s.Import(in, opts)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "imported into %s: %d added, %d unchanged, %d replaced\n", s.Path(), res.Added, res.Unchanged, res.Replaced)
		return nil
	}
	return cmd
}

func newProfileCheckCmd() *cobra.Command {
	var outFmt *outputFlag
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check the profile store's integrity (bbolt pages, schema, every record); migrates an older schema",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path := dbFlag(cmd)
			// Opened for writing so an older schema is migrated (in one transaction)
			// first, but never created: a missing, empty or foreign file is an error.
			s, err := store.Open(path, store.Options{MustExist: true})
			if err != nil {
				return err
			}
			defer s.Close()
			if err := s.Check(); err != nil {
				return err
			}
			n, err := s.Count()
			if err != nil {
				return err
			}
			v, _ := s.Version()
			res := struct {
				Path          string `json:"path"`
				OK            bool   `json:"ok"`
				SchemaVersion int    `json:"schema_version"`
				Profiles      int    `json:"profiles"`
			}{s.Path(), true, v, n}
			if ok, err := outFmt.Print(cmd.OutOrStdout(), res); ok {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (schema version %s, %d profiles)\n", s.Path(), strconv.Itoa(v), n)
			return nil
		},
	}
	outFmt = addOutputFlag(cmd, "table", "json", "yaml")
	return cmd
}

// simMarker is the file the simulator writes in a simulated board's tree (in-board
// path); its presence is how fulcrumctl tells a simulated board from a real one.
const simMarker = sim.MarkerPath

// isSimTree reports whether root is a simulated board's tree.
func isSimTree(root string) bool {
	_, err := os.Stat(filepath.Join(root, simMarker))
	return err == nil
}

// simLoopRunning checks that the tree's physics loop is alive: without it the power
// rails never change and every profile's power would be wrong.
func simLoopRunning(root string) error {
	raw, err := os.ReadFile(filepath.Join(root, simMarker))
	if err != nil {
		return fmt.Errorf("simulated board %s: %w", root, err)
	}
	var m struct {
		Board string `json:"board"`
		PID   int    `json:"pid"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("simulated board %s: unreadable %s: %w", root, simMarker, err)
	}
	if m.PID > 0 {
		if err := unix.Kill(m.PID, 0); err == nil || errors.Is(err, unix.EPERM) {
			return nil
		}
	}
	return fmt.Errorf("simulated board %s: its physics loop is not running, so board power would never change: start it with fulcrumctl sim board --dir %s --board %s", root, root, m.Board)
}

func newProfileRunCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run --workload NAME --modes all|presets|random:N|FILE",
		Short: "Profile a workload at many power modes (resumable; restores the board at the end)",
		Long: `run profiles one workload at every (mode, batch size) of the campaign that is not yet in
the store, one profile per transaction. Interrupt it (Ctrl-C, SIGTERM) or lose it (crash,
SIGKILL) and run the same command again: stored entries are skipped, at most the profile
in flight is lost, nothing is duplicated. The board is snapshotted first and restored at
the end, also on Ctrl-C/SIGTERM; after a crash the next campaign restores the saved state.

--modes: all (every mode of the board), presets (the nvpmodel presets reachable without a
reboot from the running mode: a preset with another TPC mask needs one and is left out;
on an AGX Orin in MODE_30W that is MODE_30W alone), random:N (N modes
drawn with --seed; the same seed draws the same modes, so a rerun resumes), or a file
with one mode per line as cores/cpu_khz/gpu_hz/emc_hz or CSV cores,cpu_khz,gpu_hz,emc_hz.

Runner: fulcrumctl can run minibatches only on a simulated board. With --runner auto (the
default) a tree with ` + simMarker + ` under --root (written by the simulator) uses
the simulator's runner; on a real Jetson, workloads run in fulcrumd's workers, so there is
no way to run one from fulcrumctl yet and run says so.`,
		Args: cobra.NoArgs,
	}
	workload := cmd.Flags().String("workload", "", "workload to profile (for the simulator: a model in configs/workloads)")
	roleFlag := cmd.Flags().String("role", "", "train or infer (default: the workload model's role)")
	modesFlag := cmd.Flags().String("modes", "", "all, presets, random:N or a modes file (required)")
	batchesFlag := cmd.Flags().String("batches", "", "comma-separated batch sizes (default: the workload model's B_T for training, its batch list for inference)")
	root := cmd.Flags().String("root", "/", "filesystem root of the board (a simulated board's tree, or / on a Jetson)")
	seed := cmd.Flags().Uint64("seed", 1, "seed for random:N mode selection and the simulator's noise")
	runnerFlag := cmd.Flags().String("runner", "auto", "how minibatches run: auto (the simulator on a simulated tree) or sim")
	warmup := cmd.Flags().Int("warmup", 2, "warm-up minibatches discarded before measuring (0: none)")
	warmupTime := cmd.Flags().Duration("warmup-time", 500*time.Millisecond, "and keep warming up at least this long (covers the INA3221's ~430 ms averaging; 0: none)")
	minSamples := cmd.Flags().Int("min-samples", 5, "measured minibatches before the precision rule applies")
	maxSamples := cmd.Flags().Int("max-samples", 50, "cap on measured minibatches per profile")
	targetRSE := cmd.Flags().Float64("target-rse", 0.02, "stop when the mean time's relative standard error is at most this")
	powerInterval := cmd.Flags().Duration("power-interval", 100*time.Millisecond, "board power sampling period while minibatches run")
	_ = cmd.MarkFlagRequired("workload")
	_ = cmd.MarkFlagRequired("modes")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		out := cmd.OutOrStdout()
		bar := isTerminal(out)
		level := slog.LevelInfo
		if bar {
			level = slog.LevelWarn // the bar shows progress; only warnings interrupt it
		}
		log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
		if *warmup < 0 || *warmupTime < 0 {
			return errors.New("--warmup and --warmup-time must be 0 or more")
		}
		cat, err := powermode.LoadCatalog(configs.FS, "boards")
		if err != nil {
			return err
		}
		spec, info, err := powermode.Detect(*root, cat)
		if err != nil {
			return err
		}
		switch *runnerFlag {
		case "auto", "sim":
		default:
			return fmt.Errorf("--runner %q: want auto or sim", *runnerFlag)
		}
		if !isSimTree(*root) {
			if *runnerFlag == "sim" {
				return fmt.Errorf("--runner sim: %s is not a simulated board's tree (no %s): start one with fulcrumctl sim, or pass its --root", *root, simMarker)
			}
			return fmt.Errorf("board %s under %s is a real Jetson: fulcrumctl cannot run a real workload yet (workloads run in fulcrumd's workers); profile through fulcrumd, or point --root at a simulated board", info.Name, *root)
		}
		if err := simLoopRunning(*root); err != nil {
			return err
		}
		models, err := sim.LoadWorkloads(configs.FS, "workloads")
		if err != nil {
			return err
		}
		runner, err := simprof.New(*root, spec, models, *seed)
		if err != nil {
			return err
		}
		w, err := runner.Workload(*workload)
		if err != nil {
			return err
		}
		role := w.Role
		if *roleFlag != "" {
			if role, err = truth.ParseRole(*roleFlag); err != nil {
				return fmt.Errorf("--role: %w", err)
			}
			if role != w.Role {
				return fmt.Errorf("--role %s: workload %s is a %s workload", role, w.Name, w.Role)
			}
		}
		batches := w.BatchSizes()
		if *batchesFlag != "" {
			if batches, err = parseBatches(*batchesFlag); err != nil {
				return err
			}
		}
		backend, err := tegra.Open(ctx, *root, spec, info)
		if err != nil {
			return err
		}
		lock, err := lockBoard(backend)
		if err != nil {
			return err
		}
		defer lock.Close()
		nvp, err := nvpmodel.ForBoard(*root, spec)
		if err != nil {
			return err
		}
		modes, err := profiler.SelectModes(*modesFlag, spec, nvp, backend.Space(), *seed)
		if err != nil {
			return err
		}
		st, err := store.Open(dbFlag(cmd), store.Options{})
		if err != nil {
			return err
		}
		defer st.Close()
		// Options: zero means the default, negative none.
		wu, wut := *warmup, *warmupTime
		if wu == 0 {
			wu = -1
		}
		if wut == 0 {
			wut = -1
		}
		prof := &profiler.Profiler{Backend: backend, Runner: runner, Store: st, Logger: log, Options: profiler.Options{
			Warmup: wu, WarmupTime: wut, MinSamples: *minSamples, MaxSamples: *maxSamples, TargetRSE: *targetRSE, PowerSampleInterval: *powerInterval,
		}}
		c := &profiler.Campaign{Profiler: prof, Workload: w.Name, Role: role, Modes: modes, Batches: batches,
			Progress: func(p profiler.Progress) {
				if bar {
					drawBar(out, p)
					return
				}
				if p.Profile == nil {
					log.Info("skipped (already stored)", "done", p.Done, "total", p.Total, "mode", p.Key.Mode.String(), "batch", p.Key.Batch)
					return
				}
				log.Info("profiled", "done", p.Done, "total", p.Total, "mode", p.Key.Mode.String(), "batch", p.Key.Batch,
					"time_ms", round2(p.Profile.TimeMS.Mean), "power_mw", round2(p.Profile.PowerMW.Mean), "samples", p.Profile.Samples,
					"rse", fmt.Sprintf("%.4f", p.Profile.RSE), "eta", p.ETA.Round(time.Second))
			}}
		log.Info("campaign", "board", info.Name, "workload", w.Name, "role", role, "modes", len(modes), "batches", fmt.Sprint(batches), "db", st.Path())
		if bar {
			fmt.Fprintf(out, "profiling %s (%s) on %s: %d modes × %d batch sizes into %s\n", w.Name, role, info.Name, len(modes), len(batches), st.Path())
		}
		res, err := c.Run(ctx)
		if bar {
			fmt.Fprintln(out)
		}
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return fmt.Errorf("%w (%d profiled, %d already stored)", err, res.Measured, res.Skipped)
			}
			return err
		}
		fmt.Fprintf(out, "campaign done: %d entries, %d profiled, %d already stored, in %s\n", res.Total, res.Measured, res.Skipped, st.Path())
		return nil
	}
	return cmd
}

func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }

func parseBatches(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		b, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || b < 1 {
			return nil, fmt.Errorf("--batches %q: %q is not a positive integer", s, f)
		}
		if !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out, nil
}

// isTerminal reports whether w is a terminal (a progress bar makes sense there).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// drawBar redraws a one-line progress bar in place.
func drawBar(w io.Writer, p profiler.Progress) {
	const width = 30
	filled := width * p.Done / max(p.Total, 1)
	eta := "ETA --"
	if p.ETA > 0 || p.Done == p.Total {
		eta = "ETA " + p.ETA.Round(time.Second).String()
	}
	fmt.Fprintf(w, "\r\x1b[K[%s%s] %d/%d %3d%% %s  %s b=%d", strings.Repeat("#", filled), strings.Repeat(".", width-filled),
		p.Done, p.Total, 100*p.Done/max(p.Total, 1), eta, p.Key.Mode.Human(), p.Key.Batch)
}

// printProfiles writes profiles as indented JSON or as a table (fulcrumctl profile ls
// and daemon profiles ls).
func printProfiles(out io.Writer, ps []store.Profile, format string) error {
	if ps == nil {
		ps = []store.Profile{}
	}
	switch format {
	case "json":
		return printJSON(out, ps)
	case "yaml":
		return printYAML(out, ps)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BOARD\tWORKLOAD\tROLE\tMODE\tBATCH\tTIME_MS\tP95_MS\tPOWER_MW\tSAMPLES\tRSE\tSOURCE")
	for _, p := range ps {
		src := shown(p.Source)
		if p.Throttled != nil {
			src += " (throttled)" // measured while the board ran slower than the mode: docs/profiler.md
		}
		if p.Bound {
			src += " (bound)" // a whole minibatch not run, its time an upper bound: docs/profiler.md
		}
		batch := strconv.Itoa(p.Batch)
		if p.MicroBatch > 0 { // one micro-batch turn of the minibatch (issue 32), as fulcrumctl workers shows it
			batch = fmt.Sprintf("%d (micro %d ×%d)", p.Batch, p.MicroBatch, p.Batch/p.MicroBatch)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.2f\t%.2f\t%.0f\t%d\t%.4f\t%s\n",
			shown(p.Board), shown(p.Workload), shown(string(p.Role)), p.Mode, batch, p.TimeMS.Mean, p.TimeMS.P95, p.PowerMW.Mean, p.Samples, p.RSE, src)
	}
	return tw.Flush()
}
