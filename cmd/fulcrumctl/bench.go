package main

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fulcrum-edge/fulcrum/configs"
	"github.com/fulcrum-edge/fulcrum/fulcrum/bench"
	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/fulcrum/search"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench --truth FILE",
		Short: "Score the searchers against a ground-truth table over a sweep of budgets",
		Long: `bench sweeps every training × inference pair of a ground-truth table (docs/design.md §8) ×
arrival rates × latency budgets × power budgets. Each searcher answers each
configuration through its own profiler, which replays the table with multiplicative
Gaussian noise (--noise); every answer is then re-evaluated on the noise-free table with
model v1 and compared with the oracle (the exhaustive optimum). What is scored is what
fulcrumd would run: after a searcher has profiled, the daemon's decision (the same code,
with fulcrumd's defaults: --confidence, --admission-margin, --dev-k) chooses from what
it profiled. Percentages and ratios are over the configurations the oracle can satisfy;
false claims are over the ones it cannot. docs/benchmarks.md explains every column and
has the reference results.

Searchers: gmd, als, preset, maxn, random-<K>, oracle, oracle-m<percent> (the oracle
claiming only what fits with that margin: the ceiling of any searcher keeping it), and
GMD variants: gmd-m<percent>
(another budget margin), gmd-p<penalty>, gmd-b<profiles>, gmd-c<n> (profiles kept back
for repeat measurements near a budget edge; gmd-c0: none), gmd-f<tenths of σ> (the
reduced margin tried when nothing fits with the full one; gmd-f0: none), gmd-s0 (no
smoothing); combinable, e.g. gmd-c0-f0.

--streams k (k ≥ 2) plans k inference streams together with a trainer (model v1 for
several workloads, docs/design.md §2): every training workload with every set of k
inference workloads, each stream at the swept rate and latency budget. GMD and ALS run
as fulcrumd runs them there: the search walks one pooled stream standing for all of them
(their rate-weighted times and share-weighted powers) while every workload is measured at
each mode it asks for, and the joint decision chooses the mode and every batch
(docs/benchmarks.md "Several streams"). --jobs m (m ≥ 2) does the
same with every set of m training workloads sharing the training time equally.
` + benchLifetimeHelp,
		Example: `  fulcrumctl sim truth --board agx-orin-64gb --out /tmp/agx.csv
  fulcrumctl bench --truth /tmp/agx.csv --rates 5,15,30 --latency 50ms,100ms,200ms,400ms \
      --power 15W,20W,30W,40W,50W --searchers gmd,preset,maxn,random-15 --format table` + benchLifetimeExample,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	truthPath := f.String("truth", "", "ground-truth CSV (required), e.g. from fulcrumctl sim truth")
	pairs := f.StringSlice("pairs", nil, "train:infer workload pairs (default every pair in the table)")
	rates := f.StringSlice("rates", []string{"5", "15", "30"}, "inference arrival rates, requests per second")
	lats := f.StringSlice("latency", []string{"50ms", "100ms", "200ms", "400ms"}, "p99 latency budgets, with a unit (100ms, 0.2s)")
	powers := f.StringSlice("power", []string{"15W", "20W", "30W", "40W", "50W"}, "power budgets in watts (15, 15W, 15.5W) or milliwatts with the unit (15000mW)")
	searchers := f.StringSlice("searchers", []string{"oracle", "gmd", "preset", "maxn", "random-15"}, "searchers to score")
	noise := f.Float64("noise", 0.03, "profiling noise: relative standard deviation of each measured time and power")
	seed := f.Uint64("seed", 1, "random seed (results depend only on it, not on --parallel)")
	parallel := f.Int("parallel", runtime.NumCPU(), "worker goroutines")
	board := f.String("board", "agx-orin-64gb", "catalog board whose nvpmodel presets are snapped into the table's space (GMD start, preset baseline)")
	format := f.String("format", "table", "output format: table, json or csv (same as -o)")
	outFmt := addOutputFlag(cmd, "table", "json", "csv").withFormatAlias(format)
	maxProfiles := f.Int("max-profiles", 0, "profile budget per searcher run (0: each searcher's default)")
	quantile := f.Float64("quantile", plan.DefaultQuantile, "latency quantile the budgets apply to")
	defRules := control.DecisionRules(control.DefaultConfig(), sched.DefaultConfig())
	defSched := sched.DefaultConfig()
	confidence := f.Float64("confidence", defRules.Confidence, "claim a choice only when it meets every budget with this probability (fulcrumd's controller.plan_confidence)")
	admMargin := f.Duration("admission-margin", defSched.Margin, "room kept before every deadline by the scheduler's admission test (fulcrumd's scheduler.margin_ms)")
	devK := f.Float64("dev-k", defSched.DevK, "deviations of the turn times the admission test adds (fulcrumd's scheduler.dev_k)")
	decisionNoise := f.Float64("decision-noise", -1, "profiling noise the decision assumes (fulcrumd's controller.noise_rel; default: --noise)")
	quiet := f.Bool("quiet", false, "no progress lines on stderr")
	streams := f.Int("streams", 1, "inference streams planned together: 1 sweeps training × inference pairs; k ≥ 2 every training workload with every set of k inference workloads")
	jobs := f.Int("jobs", 1, "training jobs planned together: m ≥ 2 sweeps every set of m training workloads (equal time shares) with every set of --streams inference workloads")
	micro := f.Bool("micro", true, "let the decision and the oracles run training as micro-batch turns where the truth has micro_batch rows (issue 32; with --lifetime the simulated trainers declare them too); --micro=false scores whole minibatches only (k = 1)")
	plot := newBenchPlotFlag(f) // plot.go
	life := newLifetimeFlags(f) // benchlife.go
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkLifetimeFlags(cmd.Flags(), life); err != nil {
			return err
		}
		if err := plot.check(); err != nil {
			return err
		}
		if *truthPath == "" {
			return errors.New("--truth is required: a ground-truth CSV, e.g. from `fulcrumctl sim truth --board agx-orin-64gb --out /tmp/agx.csv`")
		}
		chosen, ferr := outFmt.Format()
		if ferr != nil {
			return ferr
		}
		*format = chosen
		if *streams < 1 {
			return fmt.Errorf("--streams %d: want 1 (pairs) or more", *streams)
		}
		if *jobs < 1 {
			return fmt.Errorf("--jobs %d: want 1 or more", *jobs)
		}
		if (*streams > 1 || *jobs > 1) && len(*pairs) > 0 {
			return errors.New("--pairs and --streams 2 or more: give one (with several streams every training workload is run with every set of inference workloads)")
		}
		sw := benchSweepFlags{truthPath: *truthPath, board: *board, format: *format, pairs: *pairs, rates: *rates, lats: *lats, pows: *powers,
			noise: *noise, seed: *seed, parallel: *parallel, streams: *streams, jobs: *jobs, quiet: *quiet, micro: *micro}
		if *life.duration > 0 {
			return runLifetimeBench(cmd, life, sw)
		}
		spec := bench.BenchSpec{Searchers: *searchers, Noise: *noise, Seed: *seed, Parallel: *parallel, MaxProfiles: *maxProfiles, Quantile: *quantile, Streams: *streams, Jobs: *jobs, Micro: *micro}
		var err error
		if spec.Rules, err = benchRules(*noise, *decisionNoise, *confidence, *admMargin, *devK); err != nil {
			return err
		}
		if !*quiet {
			spec.Progress = newProgress(cmd.ErrOrStderr(), time.Now, 3*time.Second)
		}
		return runOneShotBench(cmd, sw, spec, plot)
	}
	return cmd
}

// runOneShotBench is bench without --lifetime: spec (searchers, rules, progress) with
// the sweep of sw, scored by bench.RunBench, drawn (--plot) and written.
func runOneShotBench(cmd *cobra.Command, sw benchSweepFlags, spec bench.BenchSpec, plot benchPlot) error {
	var err error
	if spec.RatesRPS, spec.LatenciesMS, spec.PowersMW, err = sw.budgets(); err != nil {
		return err
	}
	if spec.Pairs, err = parsePairs(sw.pairs); err != nil {
		return err
	}
	for _, s := range spec.Searchers {
		if _, err := search.Parse(s); err != nil {
			return fmt.Errorf("--searchers: %w", err)
		}
	}
	cat, err := powermode.LoadCatalog(configs.FS, "boards")
	if err != nil {
		return err
	}
	bs, err := cat.Board(sw.board)
	if err != nil {
		return fmt.Errorf("--board: %w", err)
	}
	for _, p := range bs.NVP.Presets {
		spec.Presets = append(spec.Presets, bs.PresetMode(p))
		spec.PresetNames = append(spec.PresetNames, p.Name)
	}
	if spec.Truth, err = readTruthFile(sw.truthPath); err != nil {
		return err
	}
	rep, err := bench.RunBench(cmd.Context(), spec)
	if err != nil {
		return err
	}
	if err := plot.draw(cmd.ErrOrStderr(), rep); err != nil {
		return err
	}
	return writeBench(cmd.OutOrStdout(), sw.format, rep)
}

// budgets parses the sweep's rates, latency and power budgets.
func (sw benchSweepFlags) budgets() (ratesRPS, latenciesMS, powersMW []float64, err error) {
	if ratesRPS, err = parseList(sw.rates, "--rates", parseRate); err != nil {
		return nil, nil, nil, err
	}
	if latenciesMS, err = parseList(sw.lats, "--latency", parseLatencyMS); err != nil {
		return nil, nil, nil, err
	}
	if powersMW, err = parseList(sw.pows, "--power", parsePowerMW); err != nil {
		return nil, nil, nil, err
	}
	return ratesRPS, latenciesMS, powersMW, nil
}

// parsePairs reads --pairs (train:infer each); none gives nil (every pair).
func parsePairs(in []string) ([]bench.Pair, error) {
	var out []bench.Pair
	for _, p := range in {
		t, i, ok := strings.Cut(p, ":")
		if !ok || t == "" || i == "" {
			return nil, fmt.Errorf("--pairs %q: want train:infer, e.g. resnet18-train:mobilenetv3-infer", p)
		}
		out = append(out, bench.Pair{Train: t, Infer: i})
	}
	return out, nil
}

// readTruthFile reads the --truth table.
func readTruthFile(path string) (*truth.Table, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--truth: %w", err)
	}
	tab, err := truth.Read(fh)
	fh.Close()
	if err != nil {
		return nil, fmt.Errorf("--truth %s: %w", path, err)
	}
	return tab, nil
}

// benchRules are the decision rules bench decides by: fulcrumd's (control.DecisionRules)
// for the flags' values.
func benchRules(noise, decisionNoise, confidence float64, margin time.Duration, devK float64) (plan.Rules, error) {
	switch {
	case math.IsNaN(confidence) || confidence < 0.5 || confidence >= 1:
		return plan.Rules{}, fmt.Errorf("--confidence %v: want a probability from 0.5 to below 1, e.g. 0.99", confidence)
	case margin < 0:
		return plan.Rules{}, fmt.Errorf("--admission-margin %v: want 0 or more, e.g. 5ms", margin)
	case math.IsNaN(devK) || devK < 0:
		return plan.Rules{}, fmt.Errorf("--dev-k %v: want 0 or more, e.g. 2", devK)
	}
	r := control.DecisionRules(control.Config{Confidence: confidence}, sched.Config{Margin: margin, DevK: devK})
	r.NoiseRel = noise
	if decisionNoise >= 0 {
		r.NoiseRel = decisionNoise
	}
	if math.IsNaN(r.NoiseRel) || r.NoiseRel > 1 {
		return plan.Rules{}, fmt.Errorf("--decision-noise %v: want a relative standard deviation from 0 to 1 (0.03 = 3%%)", r.NoiseRel)
	}
	return r, nil
}

// newProgress returns a bench progress callback that writes a line to w at most once
// a second, once the run has taken longer than after: answers scored, of how many,
// and the time left at the rate so far.
func newProgress(w io.Writer, now func() time.Time, after time.Duration) func(done, total int) {
	return newProgressOf(w, now, after, "bench", "answers scored")
}

// newProgressOf is newProgress with its own prefix and noun ("bench", "answers scored").
func newProgressOf(w io.Writer, now func() time.Time, after time.Duration, prefix, noun string) func(done, total int) {
	var mu sync.Mutex
	start := now()
	var last time.Time
	return func(done, total int) {
		mu.Lock()
		defer mu.Unlock()
		t := now()
		el := t.Sub(start)
		if el < after || (t.Sub(last) < time.Second && done < total) || total <= 0 {
			return
		}
		last = t
		left := time.Duration(float64(el) * float64(total-done) / float64(max(done, 1)))
		fmt.Fprintf(w, "%s: %d/%d %s (%.0f%%), %s elapsed, about %s left\n", prefix, done, total, noun, 100*float64(done)/float64(total), el.Round(time.Second), left.Round(time.Second))
	}
}

func parseList(in []string, flag string, parse func(string) (float64, error)) ([]float64, error) {
	if len(in) == 0 {
		return nil, fmt.Errorf("%s: give at least one value", flag)
	}
	out := make([]float64, 0, len(in))
	for _, s := range in {
		v, err := parse(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		out = append(out, v)
	}
	return out, nil
}

func parseRate(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.ToLower(s), "/s"), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		return 0, fmt.Errorf("rate %q: want a positive number of requests per second, e.g. 15", s)
	}
	return v, nil
}

// parseLatencyMS takes a Go duration; a bare number is refused because ms and s are
// both common and a wrong guess is off by 1000.
func parseLatencyMS(s string) (float64, error) {
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return 0, fmt.Errorf("latency %q has no unit: write e.g. %sms or %ss", s, s, s)
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("latency %q: want a positive duration such as 100ms or 0.2s", s)
	}
	return float64(d) / float64(time.Millisecond), nil
}

// parsePowerMW takes watts (15, 15W, 15.5W) or milliwatts with their unit (15000mW).
// A bare number above 1000 is refused: it is almost certainly milliwatts without the
// unit, and no Jetson draws a kilowatt.
func parsePowerMW(s string) (float64, error) {
	l := strings.ToLower(s)
	scale := 1000.0
	switch {
	case strings.HasSuffix(l, "mw"):
		l, scale = strings.TrimSuffix(l, "mw"), 1
	case strings.HasSuffix(l, "w"):
		l = strings.TrimSuffix(l, "w")
	default:
		if v, err := strconv.ParseFloat(l, 64); err == nil && v > 1000 {
			return 0, fmt.Errorf("power %q: a bare number is watts and %s W is more than any Jetson draws; write %gW, or %smW if you meant milliwatts", s, s, v/1000, s)
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(l), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		return 0, fmt.Errorf("power %q: want watts such as 15, 15W or 15.5W (or 15000mW)", s)
	}
	return v * scale, nil
}

func writeBench(w io.Writer, format string, rep *bench.BenchReport) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	case "csv":
		cw := csv.NewWriter(w)
		_ = cw.Write([]string{"name", "within_budget_pct", "violation_pct", "no_answer_pct", "false_claim_pct", "mean_opt_ratio", "p5_opt_ratio", "mean_profiles", "max_profiles", "wall_s", "errors"})
		for _, s := range rep.Searchers {
			_ = cw.Write([]string{s.Name, ff(s.WithinBudgetPct, 2), ff(s.ViolationPct, 2), ff(s.NoAnswerPct, 2), ff(s.FalseClaimPct, 2), ff(s.MeanOptRatio, 4), ff(s.P5OptRatio, 4), ff(s.MeanProfiles, 2), strconv.Itoa(s.MaxProfiles), ff(s.WallS, 2), strconv.Itoa(s.Errors)})
		}
		cw.Flush()
		return cw.Error()
	}
	sets := fmt.Sprintf("%d pairs", rep.Pairs)
	switch {
	case rep.Jobs > 1:
		sets = fmt.Sprintf("%d sets of %d training jobs and %d inference streams, each stream at the rate and latency budget", rep.Pairs, rep.Jobs, rep.Streams)
	case rep.Streams > 1:
		sets = fmt.Sprintf("%d sets of a trainer and %d inference streams, each stream at the rate and latency budget", rep.Pairs, rep.Streams)
	}
	micro := "whole minibatches only (k = 1)"
	if rep.Micro {
		micro = "training micro-batches on"
	}
	fmt.Fprintf(w, "%d configurations (%s), %d the oracle cannot satisfy; noise %g, seed %d, %s, wall %.1fs\n",
		rep.ConfigsTotal, sets, rep.ConfigsOracleInfeasible, rep.Noise, rep.Seed, micro, rep.WallS)
	r := rep.Rules
	fmt.Fprintf(w, "decided as fulcrumd decides: P(within budgets) ≥ %g at %g%% noise per measurement, admission room %g ms + %g%% of the turn times\n",
		r.Confidence, 100*r.NoiseRel, r.Admission.MarginMS, 100*r.Admission.DevRel)
	fmt.Fprintf(w, "within / violation / no answer %% and ratios: over the %d satisfiable configurations; false claim %%: over the %d unsatisfiable\n\n",
		rep.ConfigsTotal-rep.ConfigsOracleInfeasible, rep.ConfigsOracleInfeasible)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "searcher\twithin\twithin %\tviolation %\tno answer %\tfalse claim %\tmean opt\tp5 opt\tmean profiles\tmax profiles\tsearch s\terrors\t")
	for _, s := range rep.Searchers {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.3f\t%.3f\t%.1f\t%d\t%.1f\t%d\t\n", s.Name, s.WithinBudget, s.WithinBudgetPct, s.ViolationPct, s.NoAnswerPct, s.FalseClaimPct, s.MeanOptRatio, s.P5OptRatio, s.MeanProfiles, s.MaxProfiles, s.WallS, s.Errors)
	}
	return tw.Flush()
}

func ff(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
