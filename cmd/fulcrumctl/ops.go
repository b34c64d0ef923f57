package main

// Operating commands: they talk to a running fulcrumd over its control API
// (docs/api.md; docs/operations.md shows them in use).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/internal/units"
)

// socketEnv overrides the default control socket.
const socketEnv = "FULCRUM_SOCKET"

func defaultSocket() string {
	if s := os.Getenv(socketEnv); s != "" {
		return s
	}
	return api.DefaultSocket
}

// addSocketFlag gives cmd (and its subcommands) --socket and returns a client maker.
func addSocketFlag(cmd *cobra.Command) func() *client.Client {
	p := cmd.PersistentFlags().String("socket", defaultSocket(), "fulcrumd's control socket (env "+socketEnv+")")
	_ = cmd.MarkPersistentFlagFilename("socket", "sock")
	return func() *client.Client { return client.New(*p) }
}

// workerSocketAlias keeps a worker command's old --socket (the worker socket there, the
// control socket everywhere else) as a deprecated alias of --worker-socket.
func workerSocketAlias(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "socket", "", "fulcrumd's worker socket (deprecated: --worker-socket)")
	_ = cmd.Flags().MarkHidden("socket")
	_ = cmd.MarkFlagFilename("worker-socket", "sock")
	// Noted on stderr here: cobra's deprecation note goes to the command's output, where
	// the worker prints its JSON report.
	prev := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		if c.Flags().Changed("socket") {
			fmt.Fprintln(c.ErrOrStderr(), "fulcrumctl: --socket is deprecated here: use --worker-socket (--socket is fulcrumd's control socket in the other commands)")
		}
		if prev != nil {
			return prev(c, args)
		}
		return nil
	}
}

// explain turns a daemon error into the user's problem and its fix.
func explain(what string, err error) error {
	var ae *api.Error
	if !errors.As(err, &ae) {
		return err
	}
	switch {
	case ae.Status == http.StatusForbidden:
		return fmt.Errorf("%s refused: %s", what, shown(ae.Message))
	case ae.Status == http.StatusConflict:
		return fmt.Errorf("%s not started: %s", what, shown(ae.Message))
	case ae.Status == http.StatusServiceUnavailable:
		return fmt.Errorf("%s unavailable: %s", what, shown(ae.Message))
	case ae.Status >= 400 && ae.Status < 500:
		return fmt.Errorf("%s rejected: %s", what, shown(ae.Message))
	}
	return fmt.Errorf("%s failed in fulcrumd: %s (see journalctl -u fulcrumd)", what, shown(ae.Message))
}

// flagWords rewords a daemon's budget error in fulcrumctl's flags: an operator typed
// --latency, not latency_ms. Other errors pass unchanged.
func flagWords(err error) error {
	var ae *api.Error
	if !errors.As(err, &ae) {
		return err
	}
	// Longest first where one name starts another; the replaced text is not scanned again.
	words := strings.NewReplacer(
		"rate_auto = true", "--rate auto", "rate_auto = false", "a --rate", "rate_auto", "--rate auto",
		"latency_ms", "--latency", "power_mw", "--power", "rate_rps", "--rate", "train_weight", "--weight",
		"rho_max", "--rho-max", "shared = true", "--shared", "without workload", "without --workload")
	out := *ae
	out.Message = words.Replace(ae.Message)
	return &out
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// --- units -------------------------------------------------------------------------

// budgetRate reads "auto" or requests per second.
func budgetRate(s string) (auto bool, rps float64, err error) {
	s = strings.TrimSpace(strings.ToLower(s))
	if s == "auto" {
		return true, 0, nil
	}
	v, perr := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSuffix(s, "/s"), "rps"), 64)
	if perr != nil || !(v >= plan.MinRateRPS) || v > plan.MaxRateRPS {
		// Checked here: the daemon's message names rate_rps and rate_auto.
		return false, 0, fmt.Errorf("--rate %s: want auto (measure it) or requests per second, %g to %g", s, plan.MinRateRPS, plan.MaxRateRPS)
	}
	return false, v, nil
}

// budgetQuantile reads 0.99 or p99 / p99.9.
func budgetQuantile(s string) (float64, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	given, div := s, 1.0
	if rest, ok := strings.CutPrefix(s, "p"); ok {
		s, div = rest, 100
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v/div >= plan.MinQuantile) || v/div > plan.MaxQuantile {
		return 0, fmt.Errorf("--quantile %s: want a fraction like 0.99 or p99 (valid %g to %g)", given, plan.MinQuantile, plan.MaxQuantile)
	}
	return v / div, nil
}

// --- status --------------------------------------------------------------------------

func newStatusCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show fulcrumd's state: mode, plan, budgets, power, workloads",
		Args:  cobra.NoArgs,
	}
	client := addSocketFlag(cmd)
	outFmt := addOutputFlag(cmd, "table", "json", "yaml")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c := client()
		defer c.Close()
		st, err := c.Status(cmd.Context())
		if err != nil {
			return explain("status", err)
		}
		if ok, err := outFmt.Print(cmd.OutOrStdout(), st); ok {
			return err
		}
		return writeStatus(cmd.OutOrStdout(), st)
	}
	return cmd
}

// dash is v when ok, else "-".
func dash(ok bool, v string) string {
	if ok {
		return v
	}
	return "-"
}

func watts(mw float64) string { return strconv.FormatFloat(mw/1000, 'f', 1, 64) + "W" }

func uptime(s float64) string {
	d := time.Duration(s) * time.Second
	if d >= 24*time.Hour {
		return fmt.Sprintf("%dd%s", d/(24*time.Hour), (d % (24 * time.Hour)).String())
	}
	return d.String()
}

// noPlan says why a status has no plan and what the operator can do that works there.
func noPlan(st api.Status) string {
	roles := map[string]bool{}
	for _, wl := range st.Workloads {
		if wl.LiveWorkers > 0 {
			roles[wl.Role] = true
		}
	}
	switch {
	case st.Board == "none":
		return "none: fulcrumd has no board (board: none), so it grants GPU turns and sets batch sizes only, with no power modes to plan; " +
			"to plan modes, start fulcrumd with a board (board: auto on a Jetson, or sim:NAME beside fulcrumctl sim board)"
	case st.Optimizing != "":
		return "none yet: the " + shown(st.Optimizing) + " search is profiling modes; the plan follows when it ends (fulcrumctl events --follow shows its progress)"
	case !roles["train"] || !roles["infer"]:
		return "none yet: fulcrumd plans once a training and an inference worker are registered (fulcrumctl workers lists them)"
	}
	return "none yet (no stored profiles for the running workloads? run fulcrumctl optimize)"
}

// planMicro is the jobs' micro-batches of a plan for several streams or jobs, as the
// plan line shows them ("resnet18-train 8 (×4), mobilenetv3-train whole"; "" when every
// job runs whole minibatches).
func planMicro(jobs []api.PlanTrainJob) string {
	var parts []string
	some := false
	for _, j := range jobs {
		if j.MicroBatch > 0 && j.MicroBatch < j.Batch {
			some = true
			parts = append(parts, fmt.Sprintf("%s %d (×%d)", shown(j.Workload), j.MicroBatch, j.Batch/j.MicroBatch))
			continue
		}
		parts = append(parts, shown(j.Workload)+" whole")
	}
	if !some {
		return ""
	}
	return strings.Join(parts, ", ")
}

// writeStatus prints a readable status.
func writeStatus(w io.Writer, st api.Status) error {
	var b bytes.Buffer
	name := "fulcrumd"
	if st.Version != "" {
		name += " " + shown(st.Version)
	}
	fmt.Fprintf(&b, "%s on %s, up %s, %d stored profiles\n", name, shown(st.Board), uptime(st.UptimeS), st.Profiles)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	mode := st.Mode.Human()
	switch {
	case st.ModeError != "":
		mode = "UNKNOWN: " + st.ModeError
	case st.Mode.Cores == 0:
		mode = "none (fulcrumd has no board: it schedules only)"
	}
	switch {
	case st.StoodDown:
		mode += "  (set by another tool: fulcrumd stands down; fulcrumctl mode resume takes the board back)"
	case st.ModeHeld:
		mode += "  (held: applied by an operator)"
	}
	fmt.Fprintf(tw, "mode\t%s\n", mode)
	if n := st.Nvpmodel; n != nil {
		fmt.Fprintf(tw, "nvpmodel\t%d %s\n", n.ID, shown(n.Name))
	}
	if p := st.Plan; p != nil {
		feas := "feasible"
		predicted := p.PredLatencyMS > 0 || p.PredPowerMW > 0
		switch {
		case !p.Feasible && !predicted:
			feas = "not evaluated (no stored profile at this mode)"
		case !p.Feasible && p.Binding != "":
			feas = "INFEASIBLE (" + shown(p.Binding) + " budget)"
		case !p.Feasible:
			feas = "INFEASIBLE"
		}
		batch := "-"
		if p.InferBatch > 0 {
			batch = strconv.Itoa(p.InferBatch)
		}
		switch micro := planMicro(p.TrainJobs); {
		case micro != "":
			batch += ", training micro-batches " + micro
		case p.TrainMicroBatch > 0 && len(p.TrainJobs) == 0:
			batch += fmt.Sprintf(", training micro-batch %d", p.TrainMicroBatch)
		}
		if p.ApplyError != "" {
			feas += ", NOT IN FORCE (the board refused the mode change: " + shown(p.ApplyError) + ")"
		}
		fmt.Fprintf(tw, "plan\t%s, infer batch %s, %s, from %s\n", p.Mode.Human(), batch, feas, shown(p.Source))
		if predicted {
			// Training's figure is the model's with training running: while training is
			// paused it gets no turns, and the line says so rather than a rate it is not getting.
			training := fmt.Sprintf("training %.1f samples/s", p.PredThroughputSamplesPerS)
			if st.TrainingPaused {
				training = "training paused (0 samples/s)"
			}
			fmt.Fprintf(tw, "predicted\tlatency %.1fms, power %s, %s, inference GPU share %.0f%%\n",
				p.PredLatencyMS, watts(p.PredPowerMW), training, 100*p.Rho)
		}
	} else {
		fmt.Fprintf(tw, "plan\t%s\n", noPlan(st))
	}
	fmt.Fprintf(tw, "budgets\t%s\n", shownBudgets(st.Budgets))
	if p := st.Power; p != nil {
		rails := make([]string, 0, len(p.Rails))
		for _, r := range p.Rails {
			rails = append(rails, shown(r.Name)+" "+watts(r.PowerMW))
		}
		avg := "1 s avg " + watts(p.Avg1sMW)
		if p.Avg1sSamples == 0 && p.Avg1sMW == 0 {
			avg = "1 s avg: no reading in the last second"
		}
		fmt.Fprintf(tw, "power\t%s (%s)  %s\n", watts(p.TotalMW), avg, strings.Join(rails, "  "))
	} else {
		fmt.Fprintf(tw, "power\tno power sensors\n")
	}
	writeHeat(tw, st.Heat)
	state := "ok"
	if st.Degraded {
		state = "DEGRADED: " + shown(st.DegradedReason)
	}
	if st.TrainingPaused {
		state += "; training paused: no training turns are granted"
		for _, wl := range st.Workloads {
			if wl.Role == "train" && wl.ThroughputPerS > 0 {
				// The rate is over the scheduler's window: turns before the pause, and
				// profiling turns (an optimize measures training), still count in it.
				state += fmt.Sprintf(" (%s's %.1f samples/s is the recent window: turns before the pause or profiling turns)", shown(wl.Workload), wl.ThroughputPerS)
			}
		}
	}
	if st.Optimizing != "" {
		state += "; optimizing (" + shown(st.Optimizing) + ")"
	}
	fmt.Fprintf(tw, "state\t%s\n", state)
	if st.Profiling != "" {
		fmt.Fprintf(tw, "profiling\t%s\n", shown(st.Profiling))
	}
	for _, n := range st.Notices {
		fmt.Fprintf(tw, "NOTICE\t%s\n", shown(n))
	}
	fmt.Fprintf(tw, "scheduler\t%d turns, %d overruns, %d workers\n", st.Turns, st.Overruns, len(st.Workers))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Streams) > 1 || (len(st.Streams) == 1 && st.Streams[0].OwnBudget) {
		b.WriteString("\n")
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "STREAM\tBATCH\tBUDGET_MS\tRATE_RPS\tPLANNED_RPS\tPRED_P99_MS\tP99_MS\tGPU_SHARE")
		for _, s := range st.Streams {
			budget := fmt.Sprintf("%.0f", s.LatencyBudgetMS)
			if s.OwnBudget {
				budget += " (own)"
			}
			rate := fmt.Sprintf("%.1f", s.RateRPS)
			if s.RateFixed {
				rate += " (fixed)"
			}
			p99 := "-"
			if s.ServedRecent > 0 {
				p99 = fmt.Sprintf("%.1f", s.MeasuredP99MS)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", shown(s.Workload), dash(s.Batch > 0, strconv.Itoa(s.Batch)), budget, rate,
				dash(s.PlanRateRPS > 0, fmt.Sprintf("%.1f", s.PlanRateRPS)), dash(s.PredLatencyMS > 0, fmt.Sprintf("%.1f", s.PredLatencyMS)),
				p99, dash(s.Rho > 0, fmt.Sprintf("%.0f%%", 100*s.Rho)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(st.Workloads) > 0 {
		b.WriteString("\n")
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		// ROOM_MS: the admission room before the stream's deadlines (margin + learned).
		fmt.Fprintln(tw, "WORKLOAD\tROLE\tWORKERS\tRATE_RPS\tP50_MS\tP99_MS\tMISSES\tSAMPLES_PER_S\tOVERRUNS\tROOM_MS")
		for _, wl := range st.Workloads {
			if wl.Role == "train" {
				fmt.Fprintf(tw, "%s\t%s\t%d\t-\t-\t-\t-\t%.1f\t%d\t-\n", shown(wl.Workload), shown(wl.Role), wl.LiveWorkers, wl.ThroughputPerS, wl.Overruns)
				continue
			}
			room := fmt.Sprintf("%.0f", wl.AdmissionRoomMS)
			if wl.AdmissionRoomLearnedMS > 0 {
				room += fmt.Sprintf(" (+%.0f learned)", wl.AdmissionRoomLearnedMS)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%.1f\t%.1f\t%d\t-\t%d\t%s\n", shown(wl.Workload), shown(wl.Role), wl.LiveWorkers, wl.ArrivalRateHz,
				wl.Latency.P50MS, wl.Latency.P99MS, wl.DeadlineMisses, wl.Overruns, room)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// --- budget --------------------------------------------------------------------------

func newBudgetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "budget",
		Short: "Show or set fulcrumd's latency, power and rate budgets",
	}
	client := addSocketFlag(cmd)
	cmd.AddCommand(newBudgetGetCmd(client), newBudgetSetCmd(client), newBudgetResetCmd(client))
	return cmd
}

func newBudgetGetCmd(client func() *client.Client) *cobra.Command {
	cmd := &cobra.Command{Use: "get", Short: "Show the budgets in force", Args: cobra.NoArgs}
	outFmt := addOutputFlag(cmd, "table", "json", "yaml")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c := client()
		defer c.Close()
		b, err := c.Budgets(cmd.Context())
		if err != nil {
			return explain("budget get", err)
		}
		if ok, err := outFmt.Print(cmd.OutOrStdout(), b); ok {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), shownBudgets(b))
		return nil
	}
	return cmd
}

func newBudgetSetCmd(client func() *client.Client) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "set",
		Short: "Change budgets (only the flags given); fulcrumd re-plans from stored profiles",
		Example: `  fulcrumctl budget set --latency 80ms --power 30W
  fulcrumctl budget set --rate 40 --quantile p99
  fulcrumctl budget set --power none
  fulcrumctl budget set --workload yolov8n-infer --latency 50ms --rate 30
  fulcrumctl budget set --workload yolov8n-infer --shared
  fulcrumctl budget set --workload resnet18-train --weight 2`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	latency := f.String("latency", "", "latency budget on the quantile: a duration, e.g. 80ms or 0.08s")
	power := f.String("power", "", "board power budget on the 1 s average: 30W, 30 (watts), 30000mW (1 W to 1000 W), or none to remove it")
	rate := f.String("rate", "", `inference arrival rate to plan for: requests/s, or "auto" to measure it`)
	quantile := f.String("quantile", "", "latency quantile: 0.99 or p99")
	rho := f.Float64("rho-max", 0, "cap on inference's share of GPU time (0.05 to 1)")
	workload := f.String("workload", "", "set one workload's own budgets (the name its worker registers): --latency and --rate for an inference stream, --weight for a training job, --shared to drop them")
	shared := f.Bool("shared", false, "with --workload: drop the workload's own budgets; it uses the shared ones again")
	weight := f.Float64("weight", 0, "with --workload naming a training workload: its share weight of training GPU time with several training jobs (default 1)")
	outFmt := addOutputFlag(cmd, "table", "json", "yaml")
	_ = cmd.RegisterFlagCompletionFunc("rate", cobra.FixedCompletions([]string{"auto"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("power", cobra.FixedCompletions([]string{"none", "15W", "30W", "50W"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("latency", cobra.FixedCompletions([]string{"50ms", "100ms", "200ms"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("quantile", cobra.FixedCompletions([]string{"p50", "p95", "p99", "p99.9"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		u := api.BudgetsUpdate{Workload: *workload, Shared: *shared}
		if f.Changed("workload") && strings.TrimSpace(*workload) == "" {
			// It used to set the shared budgets, as if --workload were not given.
			return errors.New(`budget set: --workload "" names no workload: give the name its worker registers (fulcrumctl workers lists them), or leave --workload out to change the shared budgets`)
		}
		if (*shared || f.Changed("weight")) && *workload == "" {
			return errors.New("budget set: --shared and --weight are one workload's: give --workload NAME")
		}
		if *shared && (f.Changed("latency") || f.Changed("rate") || f.Changed("weight")) {
			return errors.New("budget set: --shared drops the workload's own budgets: give it alone, or give --latency, --rate or --weight without it")
		}
		if f.Changed("weight") {
			if !(*weight >= plan.MinTrainWeight) || *weight > plan.MaxTrainWeight {
				return fmt.Errorf("budget set: --weight %v: want a share weight from %g to %d (default 1; weights are relative)", *weight, plan.MinTrainWeight, plan.MaxTrainWeight)
			}
			u.TrainWeight = weight
		}
		if *workload != "" {
			for _, fl := range []string{"power", "quantile", "rho-max"} {
				if f.Changed(fl) {
					return fmt.Errorf("budget set: --%s is shared by every workload, not one stream's: set it without --workload", fl)
				}
			}
		}
		if f.Changed("latency") {
			v, err := units.LatencyMS(*latency)
			if err != nil {
				return err
			}
			u.LatencyMS = &v
		}
		if f.Changed("power") {
			v, err := units.PowerMW(*power)
			if err != nil {
				return err
			}
			u.PowerMW = &v
		}
		if f.Changed("rate") {
			auto, v, err := budgetRate(*rate)
			if err != nil {
				return err
			}
			if auto {
				u.RateAuto = &auto
			} else {
				u.RateRPS = &v
			}
		}
		if f.Changed("quantile") {
			v, err := budgetQuantile(*quantile)
			if err != nil {
				return err
			}
			u.Quantile = &v
		}
		if f.Changed("rho-max") {
			if !(*rho >= plan.MinRhoMax) || *rho > plan.MaxRhoMax {
				return fmt.Errorf("budget set: --rho-max %v: want %g to %g (inference's share of GPU time)", *rho, plan.MinRhoMax, plan.MaxRhoMax)
			}
			u.RhoMax = rho
		}
		if u.Empty() {
			if *workload != "" {
				return errors.New("budget set --workload: give --latency, --rate, --weight or --shared")
			}
			return errors.New("budget set: give at least one of --latency, --power, --rate, --quantile, --rho-max")
		}
		c := client()
		defer c.Close()
		b, err := c.SetBudgets(cmd.Context(), u)
		if err != nil {
			return explain("budget", flagWords(err))
		}
		for _, w := range b.Warnings {
			fmt.Fprintln(cmd.ErrOrStderr(), "warning:", shownLines(w))
		}
		if ok, err := outFmt.Print(cmd.OutOrStdout(), b); ok {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), "budgets set:", shownBudgets(b))
		return nil
	}
	return cmd
}

func newBudgetResetCmd(client func() *client.Client) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reset",
		Short: "Return to the configuration file's budgets: drop the run-time ones (and a held mode) and their saved copy",
		Long: `Budgets set with "budget set" (global and per workload, training weights) and a mode
held with "mode apply" are saved in the state directory and restored when fulcrumd
restarts, over the configuration file's budgets. "budget reset" drops them all: the
configuration's budgets (file, environment, flags, as fulcrumd started with them) are in
force again, no workload has budgets of its own, no mode is held, and the saved copy is
deleted (docs/operations.md, "budget reset, and budgets across restarts").`,
		Args: cobra.NoArgs,
	}
	outFmt := addOutputFlag(cmd, "table", "json", "yaml")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c := client()
		defer c.Close()
		b, err := c.ResetBudgets(cmd.Context())
		if err != nil {
			return explain("budget reset", err)
		}
		if ok, err := outFmt.Print(cmd.OutOrStdout(), b); ok {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), "budgets reset to the configuration's:", shownBudgets(b))
		return nil
	}
	return cmd
}

// --- workers -------------------------------------------------------------------------

func newWorkersCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "workers", Short: "List the workers connected to fulcrumd", Args: cobra.NoArgs}
	client := addSocketFlag(cmd)
	outFmt := addOutputFlag(cmd, "table", "json", "yaml")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c := client()
		defer c.Close()
		ws, err := c.Workers(cmd.Context())
		if err != nil {
			return explain("workers", err)
		}
		if ws == nil {
			ws = []api.Worker{}
		}
		if ok, err := outFmt.Print(cmd.OutOrStdout(), ws); ok {
			return err
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tROLE\tWORKLOAD\tBATCH\tPID\tUID\tWAITING\tQUEUED")
		for _, w := range ws {
			batch := strconv.Itoa(w.Batch)
			if w.MicroBatch > 0 && w.MicroBatch < w.Batch {
				batch += fmt.Sprintf(" (micro %d ×%d)", w.MicroBatch, w.Batch/w.MicroBatch)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%v\t%d\n", shown(w.ID), shown(w.Role), shown(w.Workload), batch, w.PID, w.UID, w.Waiting, w.Queued)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "%d worker(s)\n", len(ws))
		return nil
	}
	return cmd
}

// --- mode ----------------------------------------------------------------------------

func newModeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mode",
		Short: "Show the board's power mode under fulcrumd, or apply one",
		Args:  cobra.NoArgs,
	}
	client := addSocketFlag(cmd)
	outFmt := addOutputFlag(cmd, "table", "json", "yaml")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c := client()
		defer c.Close()
		mi, err := c.Mode(cmd.Context())
		if err != nil {
			return explain("mode", err)
		}
		if ok, err := outFmt.Print(cmd.OutOrStdout(), mi); ok {
			return err
		}
		return writeModeInfo(cmd.OutOrStdout(), mi)
	}
	cmd.AddCommand(newModeApplyCmd(client), newModeResumeCmd(client))
	return cmd
}

func newModeResumeCmd(client func() *client.Client) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "resume",
		Short: "Take the board back after fulcrumd stood down for another tool's change (jetson_clocks, nvpmodel)",
		Long: `When another tool changes the board's clocks, cores or EMC while fulcrumd drives it,
fulcrumd stands down (controller.external_change: stand_down): it writes no mode and does not
enforce the power budget, and fulcrumctl status says DEGRADED. mode resume writes fulcrumd's
mode again (an operator's held mode, or its plan) and re-plans; a budget change does the same.`,
		Args: cobra.NoArgs,
	}
	outFmt := addOutputFlag(cmd, "table", "json", "yaml")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c := client()
		defer c.Close()
		mi, err := c.ResumeMode(cmd.Context())
		if err != nil {
			return explain("mode resume", err)
		}
		if ok, err := outFmt.Print(cmd.OutOrStdout(), mi); ok {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "board taken back: %s [%s]\n", mi.Current.Human(), mi.Current)
		return nil
	}
	return cmd
}

func writeModeInfo(w io.Writer, mi api.ModeInfo) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	held := ""
	if mi.Held {
		held = "  (held: applied by an operator until budgets change or an optimize runs)"
	}
	fmt.Fprintf(tw, "board\t%s\n", shown(mi.Board))
	fmt.Fprintf(tw, "current\t%s  [%s]%s\n", mi.Current.Human(), mi.Current, held)
	if mi.Planned != nil {
		fmt.Fprintf(tw, "planned\t%s  [%s]\n", mi.Planned.Human(), *mi.Planned)
	}
	if mi.Nvpmodel != "" {
		fmt.Fprintf(tw, "nvpmodel\t%s\n", shown(mi.Nvpmodel))
	}
	join := func(v []int64) string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = strconv.FormatInt(x, 10)
		}
		return strings.Join(s, " ")
	}
	cores := make([]int64, len(mi.Levels.Cores))
	for i, c := range mi.Levels.Cores {
		cores[i] = int64(c)
	}
	fmt.Fprintf(tw, "cores\t%s\n", join(cores))
	fmt.Fprintf(tw, "cpu\t%s\n", mhzList(mi.Levels.CPUKHz, 1000))
	fmt.Fprintf(tw, "gpu\t%s\n", mhzList(mi.Levels.GPUHz, 1))
	fmt.Fprintf(tw, "emc\t%s\n", mhzList(mi.Levels.EMCHz, 1))
	return tw.Flush()
}

// mhzList prints clock levels (in units of perHz Hz) as MHz: "306 408 612 MHz".
func mhzList(levels []int64, perHz int64) string {
	s := make([]string, len(levels))
	for i, v := range levels {
		s[i] = strconv.FormatFloat(float64(v*perHz)/1e6, 'f', -1, 64)
	}
	return strings.Join(s, " ") + " MHz"
}

// checkLevel refuses a knob value that is not one of the board's levels before the
// daemon does, in MHz and the flags' words: "nearest: 306000000" alone did not say
// that --gpu-hz 612 was meant as 612 MHz.
func checkLevel(flag, mhzFlag, what, board string, v int64, levels []int64, perHz int64) error {
	if len(levels) == 0 || slices.Contains(levels, v) {
		return nil
	}
	nearest := levels[0]
	for _, l := range levels {
		if abs64(l-v) < abs64(nearest-v) {
			nearest = l
		}
	}
	msg := fmt.Sprintf("--%s %d is not a %s level of %s: the nearest is %s (%d); levels: %s",
		flag, v, what, shown(board), units.MHz(nearest*perHz), nearest, mhzList(levels, perHz))
	// A value that is a level in MHz was most likely meant as MHz.
	if mhz := v * 1_000_000 / perHz; slices.Contains(levels, mhz) {
		msg += fmt.Sprintf("; --%s is in %s: did you mean --%s %dMHz?", flag, map[int64]string{1: "Hz", 1000: "kHz"}[perHz], mhzFlag, v)
	} else {
		msg += fmt.Sprintf(" (give --%s with a unit, e.g. --%s %s)", mhzFlag, mhzFlag, strings.ReplaceAll(units.MHz(nearest*perHz), " ", ""))
	}
	return errors.New(msg)
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

func newModeApplyCmd(client func() *client.Client) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "Apply a power mode now (knobs not given keep their current value); fulcrumd holds it until budgets change",
		Example: `  fulcrumctl mode apply --cores 8 --cpu 1728MHz --gpu 612MHz --emc 3199MHz
  fulcrumctl mode apply --gpu 408MHz     (or --gpu-hz 408000000)
  fulcrumctl mode apply --preset MODE_30W     (or --preset 2: a live nvpmodel preset's caps)`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	cores := f.Int("cores", 0, "online CPU cores")
	cpu := f.Int64("cpu-khz", 0, "CPU frequency in kHz (or --cpu with a unit)")
	gpu := f.Int64("gpu-hz", 0, "GPU frequency in Hz (or --gpu with a unit)")
	emc := f.Int64("emc-hz", 0, "memory (EMC) frequency in Hz (or --emc with a unit)")
	cpuU := f.String("cpu", "", "CPU frequency with its unit: 1728MHz, 1.7GHz")
	gpuU := f.String("gpu", "", "GPU frequency with its unit: 612MHz, 1.3GHz")
	emcU := f.String("emc", "", "memory (EMC) frequency with its unit: 3199MHz")
	preset := f.String("preset", "", "a live nvpmodel preset by name or id (as nvpmodel -m takes it), instead of the knobs")
	outFmt := addOutputFlag(cmd, "table", "json", "yaml")
	// Complete knob values from the board's levels, asked of the daemon.
	levelsCompletion := func(pick func(api.Levels) []string) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return func(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
			c := client()
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
			defer cancel()
			mi, err := c.Mode(ctx)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return pick(mi.Levels), cobra.ShellCompDirectiveNoFileComp
		}
	}
	i64s := func(v []int64) []string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = strconv.FormatInt(x, 10)
		}
		return s
	}
	_ = cmd.RegisterFlagCompletionFunc("cores", levelsCompletion(func(l api.Levels) []string {
		s := make([]string, len(l.Cores))
		for i, x := range l.Cores {
			s[i] = strconv.Itoa(x)
		}
		return s
	}))
	_ = cmd.RegisterFlagCompletionFunc("cpu-khz", levelsCompletion(func(l api.Levels) []string { return i64s(l.CPUKHz) }))
	_ = cmd.RegisterFlagCompletionFunc("gpu-hz", levelsCompletion(func(l api.Levels) []string { return i64s(l.GPUHz) }))
	_ = cmd.RegisterFlagCompletionFunc("emc-hz", levelsCompletion(func(l api.Levels) []string { return i64s(l.EMCHz) }))
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		// The unit flags: --gpu 612MHz is --gpu-hz 612000000.
		for _, u := range []struct {
			name, raw string
			perHz     int64
			dst       *int64
		}{{"cpu", *cpuU, 1000, cpu}, {"gpu", *gpuU, 1, gpu}, {"emc", *emcU, 1, emc}} {
			if !f.Changed(u.name) {
				continue
			}
			old := map[string]string{"cpu": "cpu-khz", "gpu": "gpu-hz", "emc": "emc-hz"}[u.name]
			if f.Changed(old) {
				return fmt.Errorf("mode apply: give --%s or --%s, not both", u.name, old)
			}
			hz, err := units.FreqHz(u.name, u.raw)
			if err != nil {
				return err
			}
			*u.dst = hz / u.perHz
			_ = f.Set(old, strconv.FormatInt(hz/u.perHz, 10)) // marks it Changed
		}
		knobs := f.Changed("cores") || f.Changed("cpu-khz") || f.Changed("gpu-hz") || f.Changed("emc-hz")
		if *preset != "" && knobs {
			return errors.New("mode apply: give --preset or knobs (--cores, --cpu, --gpu, --emc), not both")
		}
		if !knobs && *preset == "" {
			return errors.New("mode apply: give at least one of --cores, --cpu, --gpu, --emc (e.g. --gpu 612MHz), or --preset NAME (fulcrumctl mode lists the board's levels)")
		}
		c := client()
		defer c.Close()
		if *preset != "" {
			mi, err := c.ApplyPreset(cmd.Context(), *preset)
			if err != nil {
				return explain("mode", err)
			}
			if ok, err := outFmt.Print(cmd.OutOrStdout(), mi); ok {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "preset %s applied: %s [%s]\n", *preset, mi.Current.Human(), mi.Current)
			return nil
		}
		cur, err := c.Mode(cmd.Context())
		if err != nil {
			return explain("mode", err)
		}
		m := cur.Current
		lv := cur.Levels
		if f.Changed("cores") && len(lv.Cores) > 0 && !slices.Contains(lv.Cores, *cores) {
			// The daemon's answer named its JSON body ("give all four knobs ... GET /v1/mode").
			cs := make([]string, len(lv.Cores))
			for i, c := range lv.Cores {
				cs[i] = strconv.Itoa(c)
			}
			return fmt.Errorf("--cores %d is not a core count of %s: want one of %s", *cores, shown(cur.Board), strings.Join(cs, " "))
		}
		for _, k := range []struct {
			flag, mhzFlag, what string
			v                   int64
			levels              []int64
			perHz               int64
		}{{"cpu-khz", "cpu", "CPU", *cpu, lv.CPUKHz, 1000}, {"gpu-hz", "gpu", "GPU", *gpu, lv.GPUHz, 1}, {"emc-hz", "emc", "memory (EMC)", *emc, lv.EMCHz, 1}} {
			if f.Changed(k.flag) {
				if err := checkLevel(k.flag, k.mhzFlag, k.what, cur.Board, k.v, k.levels, k.perHz); err != nil {
					return fmt.Errorf("mode apply: %w", err)
				}
			}
		}
		if f.Changed("cores") {
			m.Cores = *cores
		}
		if f.Changed("cpu-khz") {
			m.CPUKHz = *cpu
		}
		if f.Changed("gpu-hz") {
			m.GPUHz = *gpu
		}
		if f.Changed("emc-hz") {
			m.EMCHz = *emc
		}
		mi, err := c.ApplyMode(cmd.Context(), m)
		if err != nil {
			return explain("mode", err)
		}
		if ok, err := outFmt.Print(cmd.OutOrStdout(), mi); ok {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "mode applied: %s [%s]\n", mi.Current.Human(), mi.Current)
		return nil
	}
	return cmd
}

// --- optimize ------------------------------------------------------------------------

func newOptimizeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "optimize",
		Short: "Profile power modes with a searcher (gmd or als) and plan from the result",
		Long: `optimize asks fulcrumd to run a searcher now: it profiles a few power modes on the
board (GMD about 15, ALS up to 50; each takes tens of seconds while the workers run),
stores the profiles and plans from them. The command waits until the search ends;
Ctrl-C stops the search and fulcrumd returns to its previous plan.`,
		Args: cobra.NoArgs,
	}
	client := addSocketFlag(cmd)
	method := cmd.Flags().String("method", api.OptimizeGMD, "searcher: gmd (about 15 profiled modes) or als (up to 50, reusable)")
	maxProfiles := cmd.Flags().Int("max-profiles", 0, "cap on modes profiled (0: the searcher's default)")
	outFmt := addOutputFlag(cmd, "table", "json", "yaml")
	_ = cmd.RegisterFlagCompletionFunc("method", cobra.FixedCompletions(
		[]string{api.OptimizeGMD + "\tgradient descent, about 15 profiled modes", api.OptimizeALS + "\tactive learning, up to 50 modes, reusable"},
		cobra.ShellCompDirectiveNoFileComp))
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *method != api.OptimizeGMD && *method != api.OptimizeALS {
			return fmt.Errorf("--method %q: want gmd or als", *method)
		}
		c := client()
		defer c.Close()
		fmt.Fprintf(cmd.ErrOrStderr(), "optimizing with %s (follow progress with fulcrumctl events --follow; Ctrl-C stops it)...\n", *method)
		start := time.Now()
		res, err := c.Optimize(cmd.Context(), api.OptimizeRequest{Method: *method, MaxProfiles: *maxProfiles})
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return errors.New("optimize stopped; fulcrumd keeps its previous plan")
			}
			return explain("optimize", err)
		}
		if ok, err := outFmt.Print(cmd.OutOrStdout(), res); ok {
			return err
		}
		out := cmd.OutOrStdout()
		p := res.Plan
		fmt.Fprintf(out, "%s: profiled %d new modes (%d from the store) in %s; stopped: %s\n", shown(res.Method), res.Profiled, res.Reused,
			time.Since(start).Round(time.Second), shown(res.StopReason))
		feas := "meets every budget"
		if !p.Feasible {
			feas = "meets no budget set: " + shown(p.Binding) + " is binding (training paused)"
		}
		fmt.Fprintf(out, "plan: %s, infer batch %d, %s\n", p.Mode.Human(), p.InferBatch, feas)
		fmt.Fprintf(out, "predicted: latency %.1fms, power %s, training %.1f samples/s\n", p.PredLatencyMS, watts(p.PredPowerMW), p.PredThroughputSamplesPerS)
		return nil
	}
	return cmd
}

// --- events --------------------------------------------------------------------------

func newEventsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Show fulcrumd's event log (budget changes, mode changes, violations, plans)",
		Args:  cobra.NoArgs,
	}
	client := addSocketFlag(cmd)
	follow := cmd.Flags().BoolP("follow", "f", false, "keep printing new events until Ctrl-C")
	since := cmd.Flags().Uint64("since", 0, "only events after this seq")
	outFmt := addOutputFlag(cmd, "table", "json", "yaml")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		format, err := outFmt.Format()
		if err != nil {
			return err
		}
		c := client()
		defer c.Close()
		out := cmd.OutOrStdout()
		print := func(e api.Event) error {
			switch format {
			case "json": // one object per line, as --json always printed
				b, err := json.Marshal(e)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(out, "%s\n", b)
				return err
			case "yaml": // one document per event
				if _, err := fmt.Fprintln(out, "---"); err != nil {
					return err
				}
				return printYAML(out, e)
			}
			_, err := fmt.Fprintln(out, formatEvent(e))
			return err
		}
		if !*follow {
			r, err := c.Events(cmd.Context(), *since)
			if err != nil {
				return explain("events", err)
			}
			for _, e := range r.Events {
				if err := print(e); err != nil {
					return err
				}
			}
			return nil
		}
		err = c.Follow(cmd.Context(), *since, print)
		if errors.Is(err, context.Canceled) {
			return nil // Ctrl-C
		}
		return explain("events", err)
	}
	return cmd
}

func formatEvent(e api.Event) string {
	by := ""
	if e.Caller != nil {
		who := shown(e.Caller.Comm)
		if who == "" {
			who = "pid " + strconv.Itoa(e.Caller.PID)
		}
		by = fmt.Sprintf("  [uid %d, %s]", e.Caller.UID, who)
	}
	msg := shown(e.Message)
	// The error an event carries says why (a search failed: "apply mode …: nvml: read-only"):
	// the table showed the reason without it, and the operator had to ask for JSON.
	var d struct {
		Err string `json:"error"`
	}
	if len(e.Data) > 0 && json.Unmarshal(e.Data, &d) == nil && d.Err != "" && !strings.Contains(e.Message, d.Err) {
		msg += ": " + shown(d.Err)
	}
	return fmt.Sprintf("%6d  %s  %-9s  %s%s", e.Seq, e.Time.Local().Format("2006-01-02 15:04:05"), shown(e.Kind), msg, by)
}

// --- watch ---------------------------------------------------------------------------

func newWatchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Live status, refreshed every second until Ctrl-C",
		Args:  cobra.NoArgs,
	}
	client := addSocketFlag(cmd)
	interval := cmd.Flags().Duration("interval", time.Second, "refresh period")
	count := cmd.Flags().Int("count", 0, "stop after this many refreshes (0: until Ctrl-C)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *interval < 100*time.Millisecond {
			return fmt.Errorf("--interval %s: want at least 100ms", *interval)
		}
		c := client()
		defer c.Close()
		out := cmd.OutOrStdout()
		return watch(cmd.Context(), out, isTerminal(out), c, *interval, *count)
	}
	return cmd
}

// watch redraws the status every interval: on a terminal it clears the screen first;
// otherwise it prints plain frames separated by a time line, so logs stay readable. It
// fails when the first status cannot be read; later failures (a daemon restart) are
// shown in the frame.
func watch(ctx context.Context, out io.Writer, tty bool, c *client.Client, interval time.Duration, count int) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	seen := false // a status was read: from then on, errors are shown and watching goes on
	for n := 0; count == 0 || n < count; n++ {
		if n > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
		var b bytes.Buffer
		if tty {
			b.WriteString("\x1b[H\x1b[2J")
		}
		fmt.Fprintf(&b, "--- %s (every %s; Ctrl-C to stop)\n", time.Now().Format("15:04:05"), interval)
		st, err := c.Status(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && !seen:
			// No daemon to watch at all: fail (exit non-zero) rather than print the
			// error every second.
			return explain("watch", err)
		case err != nil:
			// Keep watching through a daemon restart; say what is wrong meanwhile.
			fmt.Fprintf(&b, "%v\n", explain("status", err))
		default:
			seen = true
			if err := writeStatus(&b, st); err != nil {
				return err
			}
		}
		if _, err := out.Write(b.Bytes()); err != nil {
			return err
		}
	}
	return nil
}
