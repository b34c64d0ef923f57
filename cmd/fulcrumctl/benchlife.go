package main

// bench --lifetime D (issue 30 item 3): the sweep's configurations run for D of virtual
// time by the whole daemon (fulcrum/lifetime) and scored by bench.RunLifetime.

import (
	"cmp"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fulcrum-edge/fulcrum/configs"
	"github.com/fulcrum-edge/fulcrum/fulcrum/bench"
	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

const benchLifetimeHelp = `
--lifetime D runs every configuration of the sweep for D of virtual time (e.g. 1h) with
the whole daemon: its controller, scheduler, live profiler, searchers and store, workers
simulated in process with per-minibatch noise on a simulated board, starting from an empty store at the board's default mode. Each method (--methods:
gmd, als, preset) is one run per configuration; oracle-m<percent> is the margin oracle's
one-shot decision at t = 0 held for D, computed from the truth. Scored (docs/benchmarks.md
"Lifetime benchmark"): the lifetime ratio, training samples done ÷ what the truth's best
configuration keeping the scheduler's admission room would do in D (the ratio of the sums
over the sweep, and the mean and p5 of the per-configuration ratios; configurations where
nothing keeps the room are reported apart); the share of time a latency or power budget
was broken; time to the first plan; profiles taken; training time lost to searches.
Mid-run changes: --rate-double-at T (every stream's arrival rate doubles at T),
--power-drop-at T --power-drop-to P (the power budget becomes P at T), --budgets-every T
(every T each configuration's latency and power budgets move to another pair of the swept
--latency × --power budgets, on a tour drawn from --seed that starts at its own and
visits every other pair once before repeating). oracle-m<percent>-replan is the margin
oracle decided again at every change (a searcher that re-plans for free). The daemon's board
answers from the --truth table (--lifetime-board truth, the default; the table must be of
--board, whose tree and presets the run uses), or is the physics simulator of --board
(--lifetime-board physics: the table must then be that board's fulcrumctl sim truth,
since the denominator is read from it). --micro (default on) makes the simulated trainers
declare micro-batches (the sizes the table has micro_batch rows for, their turns timed
by those rows; with --lifetime-board physics the divisors of the minibatch down to an
eighth, timed by the model) and lets the denominator and oracle-m<percent> choose them;
--micro=false runs and scores whole minibatches only (k = 1). The one-shot
flags --searchers, --max-profiles, --confidence, --admission-margin, --dev-k,
--decision-noise, --quantile and --plot do not apply: the daemon runs with its defaults.`

const benchLifetimeExample = `
  # 4 configurations × gmd, als, preset for 1 h each, the rate doubling at 30 min:
  fulcrumctl bench --truth /tmp/agx.csv --lifetime 1h --pairs resnet18-train:mobilenetv3-infer \
      --rates 10,20 --latency 200ms --power 20W,30W --rate-double-at 30m --seed 1 --parallel 2 -o json
  # 8 h with the budgets changed every hour, ALS against GMD and the re-planning oracle:
  fulcrumctl bench --truth /tmp/agx.csv --lifetime 8h --budgets-every 1h --methods als,gmd,oracle-m3-replan \
      --pairs resnet18-train:mobilenetv3-infer --rates 10,30 --latency 50ms,150ms --power 20W,50W -o json`

// lifetimeFlags are bench's --lifetime flags.
type lifetimeFlags struct {
	duration     *time.Duration
	methods      *[]string
	rateDoubleAt *time.Duration
	powerDropAt  *time.Duration
	powerDropTo  *string
	budgetsEvery *time.Duration
	boardFrom    *string
}

func newLifetimeFlags(f *pflag.FlagSet) lifetimeFlags {
	return lifetimeFlags{
		duration:     f.Duration("lifetime", 0, "run every configuration for this much virtual time with the whole daemon (e.g. 1h) and score the lifetime instead of one decision"),
		methods:      f.StringSlice("methods", []string{"gmd", "als", "preset", "oracle-m3"}, "with --lifetime: gmd, als, preset (run on virtual time) and oracle-m<percent> (the one-shot decision held, from the truth)"),
		rateDoubleAt: f.Duration("rate-double-at", 0, "with --lifetime: every stream's arrival rate doubles at this time from the start (e.g. 30m)"),
		powerDropAt:  f.Duration("power-drop-at", 0, "with --lifetime: the power budget drops at this time from the start (e.g. 30m); give --power-drop-to"),
		powerDropTo:  f.String("power-drop-to", "", "with --lifetime: the power budget from --power-drop-at on, in watts (e.g. 15W); below every --power"),
		budgetsEvery: f.Duration("budgets-every", 0, "with --lifetime: every this much virtual time (e.g. 1h) each configuration's latency and power budgets move to another pair of the --latency × --power budgets (a tour drawn from --seed, starting at the configuration's own)"),
		boardFrom:    f.String("lifetime-board", "truth", "with --lifetime: the simulated board answers from the --truth table (truth), or is the physics simulator of --board (physics; --truth must then be its `fulcrumctl sim truth`, the denominator is read from it)"),
	}
}

// lifetimeOnly and oneShotOnly are the flags that belong to one mode of bench.
var (
	lifetimeOnly = []string{"methods", "rate-double-at", "power-drop-at", "power-drop-to", "budgets-every", "lifetime-board"}
	oneShotOnly  = []string{"searchers", "max-profiles", "confidence", "admission-margin", "dev-k", "decision-noise", "quantile", "plot"}
)

// checkLifetimeFlags refuses flags of the other mode, saying which to use.
func checkLifetimeFlags(f *pflag.FlagSet, lf lifetimeFlags) error {
	if *lf.duration == 0 {
		for _, n := range lifetimeOnly {
			if f.Changed(n) {
				return fmt.Errorf("--%s is for the lifetime benchmark: add --lifetime D (e.g. --lifetime 1h)", n)
			}
		}
		return nil
	}
	if *lf.duration < 0 {
		return fmt.Errorf("--lifetime %v: want a positive virtual time, e.g. 1h", *lf.duration)
	}
	if b := *lf.boardFrom; b != "truth" && b != "physics" {
		return fmt.Errorf("--lifetime-board %q: want truth (the board answers from --truth) or physics (the physics simulator of --board)", b)
	}
	for _, n := range oneShotOnly {
		if f.Changed(n) {
			hint := "the daemon runs with its defaults"
			if n == "searchers" {
				hint = "give --methods (gmd, als, preset, oracle-m<percent>)"
			}
			return fmt.Errorf("--%s is the one-shot bench's and does not apply with --lifetime: drop it (%s)", n, hint)
		}
	}
	return nil
}

// changes builds the mid-run changes from the flags, checked against the sweep.
func (lf lifetimeFlags) changes(f *pflag.FlagSet, powersMW []float64) ([]bench.LifeChange, error) {
	d := *lf.duration
	var out []bench.LifeChange
	within := func(name string, at time.Duration) error {
		if at <= 0 || at >= d {
			return fmt.Errorf("--%s %v: want a time after the start and before the end of --lifetime %v, e.g. %v", name, at, d, d/2)
		}
		return nil
	}
	if f.Changed("rate-double-at") {
		if err := within("rate-double-at", *lf.rateDoubleAt); err != nil {
			return nil, err
		}
		out = append(out, bench.LifeChange{At: *lf.rateDoubleAt, RateFactor: 2})
	}
	at, to := f.Changed("power-drop-at"), f.Changed("power-drop-to")
	switch {
	case at && !to:
		return nil, errors.New("--power-drop-at needs --power-drop-to: the budget it drops to, e.g. --power-drop-to 15W")
	case to && !at:
		return nil, errors.New("--power-drop-to needs --power-drop-at: when it drops, e.g. --power-drop-at 30m")
	case at:
		if err := within("power-drop-at", *lf.powerDropAt); err != nil {
			return nil, err
		}
		mw, err := parsePowerMW(*lf.powerDropTo)
		if err != nil {
			return nil, fmt.Errorf("--power-drop-to: %w", err)
		}
		for _, p := range powersMW {
			if mw >= p {
				return nil, fmt.Errorf("--power-drop-to %s is not below the --power budget %gW: give a value below every --power budget, or leave that budget out", *lf.powerDropTo, p/1000)
			}
		}
		out = append(out, bench.LifeChange{At: *lf.powerDropAt, PowerMW: mw})
	}
	return out, nil
}

// benchSweepFlags are the sweep flags the one-shot and the lifetime benchmark share.
type benchSweepFlags struct {
	truthPath, board, format string
	pairs, rates, lats, pows []string
	noise                    float64
	seed                     uint64
	parallel, streams, jobs  int
	quiet                    bool
	micro                    bool
}

// runLifetimeBench is bench --lifetime D.
func runLifetimeBench(cmd *cobra.Command, lf lifetimeFlags, sw benchSweepFlags) error {
	spec := bench.LifetimeSpec{Board: sw.board, Duration: *lf.duration, Methods: *lf.methods, Noise: sw.noise, Seed: sw.seed,
		Parallel: sw.parallel, Streams: sw.streams, Jobs: sw.jobs, BoardFrom: *lf.boardFrom, Micro: sw.micro}
	if sw.parallel < 1 {
		return fmt.Errorf("--parallel %d: want 1 or more configurations at once", sw.parallel)
	}
	if sw.noise < 0 || sw.noise > 1 {
		return fmt.Errorf("--noise %v: want a relative standard deviation from 0 to 1 (0.03 = 3%%)", sw.noise)
	}
	var err error
	if spec.RatesRPS, spec.LatenciesMS, spec.PowersMW, err = sw.budgets(); err != nil {
		return err
	}
	if spec.Changes, err = lf.changes(cmd.Flags(), spec.PowersMW); err != nil {
		return err
	}
	if spec.BudgetsEvery = *lf.budgetsEvery; cmd.Flags().Changed("budgets-every") {
		switch d := *lf.duration; {
		case spec.BudgetsEvery <= 0 || spec.BudgetsEvery >= d:
			return fmt.Errorf("--budgets-every %v: want a time after the start and below --lifetime %v, e.g. %v", spec.BudgetsEvery, d, d/8)
		case len(spec.LatenciesMS)*len(spec.PowersMW) < 2:
			return errors.New("--budgets-every moves the budgets between the --latency × --power pairs: give two or more latency or power budgets")
		}
	}
	if spec.Pairs, err = parsePairs(sw.pairs); err != nil {
		return err
	}
	// The room the daemon's scheduler keeps with its defaults: the denominator's.
	spec.Admission = control.DecisionRules(control.DefaultConfig(), sched.DefaultConfig()).Admission
	harness := false
	for _, m := range spec.Methods {
		harness = harness || m == "gmd" || m == "als" || m == "preset"
	}
	if harness {
		if spec.Run, err = lifetimeHarness(*lf.boardFrom == "physics", nil); err != nil {
			return err
		}
	}
	tab, err := readTruthFile(sw.truthPath)
	if err != nil {
		return err
	}
	spec.Truth = tab
	if harness {
		if err := truthOfBoard(tab, sw.board, sw.truthPath); err != nil {
			return err
		}
	}
	if !sw.quiet {
		spec.Progress = newProgressOf(cmd.ErrOrStderr(), time.Now, 3*time.Second, "lifetime", "runs done")
	}
	rep, err := bench.RunLifetime(cmd.Context(), spec)
	if err != nil {
		return err
	}
	runs, failed := 0, []error{}
	for mi, outs := range rep.Outcomes {
		if rep.Methods[mi].Source != "harness" {
			continue
		}
		for _, o := range outs {
			runs++
			if o.Err != nil {
				failed = append(failed, o.Err)
				fmt.Fprintf(cmd.ErrOrStderr(), "lifetime: run failed (counted as no training): %v\n", o.Err)
			}
		}
	}
	if runs > 0 && len(failed) == runs {
		return fmt.Errorf("every lifetime run failed, nothing to score; the first: %w", failed[0])
	}
	if !sw.quiet {
		fmt.Fprintf(cmd.ErrOrStderr(), "lifetime: %d configurations in %.1fs wall\n", rep.Configs, rep.WallS)
	}
	return writeLifetime(cmd.OutOrStdout(), sw.format, rep)
}

func writeLifetime(w io.Writer, format string, rep *bench.LifetimeReport) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	case "csv":
		cw := csv.NewWriter(w)
		_ = cw.Write([]string{"name", "source", "lifetime_ratio", "mean_ratio", "p5_ratio", "train_samples", "ideal_samples", "latency_broken_pct", "power_broken_pct",
			"mean_first_plan_s", "max_first_plan_s", "no_plan", "mean_profiles", "max_profiles", "mean_search_s", "search_pct",
			"apart_configs", "apart_train_samples", "apart_latency_broken_pct", "apart_power_broken_pct", "errors",
			"within_budget", "within_budget_pct", "violation_pct"})
		for _, s := range rep.Methods {
			_ = cw.Write([]string{s.Name, s.Source, ff(s.LifetimeRatio, 4), ff(s.MeanRatio, 4), ff(s.P5Ratio, 4), ff(s.TrainSamples, 0), ff(s.IdealSamples, 0),
				ff(s.LatencyBrokenPct, 2), ff(s.PowerBrokenPct, 2), ff(s.MeanFirstPlanS, 1), ff(s.MaxFirstPlanS, 1), strconv.Itoa(s.NoPlan),
				ff(s.MeanProfiles, 2), strconv.Itoa(s.MaxProfiles), ff(s.MeanSearchS, 1), ff(s.SearchPct, 2),
				strconv.Itoa(s.Apart.Configs), ff(s.Apart.TrainSamples, 0), ff(s.Apart.LatencyBrokenPct, 2), ff(s.Apart.PowerBrokenPct, 2), strconv.Itoa(s.Errors),
				strconv.Itoa(s.WithinBudget), ff(s.WithinBudgetPct, 2), ff(s.ViolationPct, 2)})
		}
		cw.Flush()
		return cw.Error()
	}
	sets := fmt.Sprintf("%d pairs", rep.Sets)
	if rep.Streams > 1 || rep.Jobs > 1 {
		sets = fmt.Sprintf("%d sets of %d training jobs and %d inference streams", rep.Sets, rep.Jobs, rep.Streams)
	}
	board := rep.Board + ", answering from the truth table"
	if rep.BoardFrom == "physics" {
		board = rep.Board + "'s physics simulator"
	}
	micro := "whole minibatches only (k = 1)"
	if rep.Micro {
		micro = "training micro-batches on"
	}
	fmt.Fprintf(w, "%d configurations (%s) × %s of virtual time on %s; %d where nothing keeps the admission room (apart); noise %g, seed %d; %s; wall %.1fs\n",
		rep.Configs, sets, time.Duration(rep.DurationS*float64(time.Second)), board, rep.ConfigsApart, rep.Noise, rep.Seed, micro, rep.WallS)
	for _, c := range rep.Changes {
		var what []string
		if c.RateFactor > 0 {
			what = append(what, fmt.Sprintf("rates ×%g", c.RateFactor))
		}
		if c.PowerMW > 0 {
			what = append(what, fmt.Sprintf("power budget %gW", c.PowerMW/1000))
		}
		if c.LatencyMS > 0 {
			what = append(what, fmt.Sprintf("latency budget %g ms", c.LatencyMS))
		}
		fmt.Fprintf(w, "at %s: %s\n", time.Duration(c.AtS*float64(time.Second)), strings.Join(what, ", "))
	}
	if rep.BudgetsEveryS > 0 {
		fmt.Fprintf(w, "every %s: each configuration's latency and power budgets move to another of the swept pairs (its tour in the JSON)\n", time.Duration(rep.BudgetsEveryS*float64(time.Second)))
	}
	fmt.Fprintf(w, "ratio: training samples ÷ the best room-keeping configuration's over the run (sum over sum; mean, p5 per configuration); broken %%: of the run's time;\n"+
		"within: configurations where the run trained after its first plan (≥ 1 %% of the denominator) and broke no budget for over 1 %% of the time after it (%% of the scored); viol %%: trained, but broke one\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "method\tsource\tratio\tmean\tp5\twithin\tviol %\tlatency broken %\tpower broken %\tfirst plan s\tno plan\tprofiles\tsearch s\tapart: samples\tlat %\tpow %\terrors\t")
	for _, s := range rep.Methods {
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.3f\t%.3f\t%d (%.1f%%)\t%.1f\t%.2f\t%.2f\t%.0f (max %.0f)\t%d\t%.1f (max %d)\t%.0f (%.1f%%)\t%.0f\t%.2f\t%.2f\t%d\t\n",
			s.Name, s.Source, s.LifetimeRatio, s.MeanRatio, s.P5Ratio, s.WithinBudget, s.WithinBudgetPct, s.ViolationPct, s.LatencyBrokenPct, s.PowerBrokenPct, s.MeanFirstPlanS, s.MaxFirstPlanS, s.NoPlan,
			s.MeanProfiles, s.MaxProfiles, s.MeanSearchS, s.SearchPct, s.Apart.TrainSamples, s.Apart.LatencyBrokenPct, s.Apart.PowerBrokenPct, s.Errors)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeByBudgets(w, rep.Methods)
}

// writeByBudgets is the ratio of every method over the stretches run at each rate and
// pair of budgets (runs with changes; nothing otherwise).
func writeByBudgets(w io.Writer, methods []bench.LifetimeStats) error {
	type key struct{ rate, lat, pow float64 }
	var keys []key
	rows := map[key]map[string]bench.BudgetStretches{}
	for _, m := range methods {
		for _, b := range m.ByBudgets {
			k := key{b.RateRPS, b.LatencyMS, b.PowerMW}
			if rows[k] == nil {
				rows[k] = map[string]bench.BudgetStretches{}
				keys = append(keys, k)
			}
			rows[k][m.Name] = b
		}
	}
	if len(keys) == 0 {
		return nil
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.pow, b.pow), cmp.Compare(a.lat, b.lat), cmp.Compare(a.rate, b.rate))
	})
	fmt.Fprintf(w, "\nby budgets: each method's ratio over the stretches between changes run at that rate and pair of budgets (sum over sum; - where nothing keeps the room)\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "rate\tlatency ms\tpower W\tstretches\t"
	for _, m := range methods {
		head += m.Name + "\t"
	}
	fmt.Fprintln(tw, head)
	for _, k := range keys {
		cells, n := "", 0
		for _, m := range methods {
			b, ok := rows[k][m.Name]
			n = max(n, b.Stretches)
			switch {
			case !ok:
				cells += "\t"
			case b.Ratio == nil:
				cells += "-\t"
			default:
				cells += fmt.Sprintf("%.3f\t", *b.Ratio)
			}
		}
		fmt.Fprintf(tw, "%g\t%g\t%g\t%d\t%s\n", k.rate, k.lat, k.pow/1000, n, cells)
	}
	return tw.Flush()
}

// truthOfBoard refuses a table whose modes are not board's: the runs use board's tree,
// presets and space (and with --lifetime-board physics its physics), so they and their
// denominators would be on different boards.
func truthOfBoard(tab *truth.Table, board, path string) error {
	cat, err := powermode.LoadCatalog(configs.FS, "boards")
	if err != nil {
		return err
	}
	bs, err := cat.Board(board)
	if err != nil {
		return fmt.Errorf("--board: %w", err)
	}
	space, err := bs.Space()
	if err != nil {
		return fmt.Errorf("--board %s: %w", board, err)
	}
	for _, m := range tab.Modes() {
		if !space.Contains(m) {
			return fmt.Errorf("--truth %s has mode %s, which %s does not: the runs are on --board's simulated board, so give the --board the table was made for, or a table from `fulcrumctl sim truth --board %s`", path, m, board, board)
		}
	}
	return nil
}
