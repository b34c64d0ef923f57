package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
)

// --- top -----------------------------------------------------------------------------

func newTopCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Live view: streams' p99 against budget, power, training, mode, temperatures, events",
		Long: `top redraws one screen every --interval, in the spirit of jtop: each inference
stream's p99 against its latency budget, board power against the power budget, training
samples/s, the mode and the clocks the board really runs, GPU load, every thermal zone
against its trip point (THROTTLED when the firmware holds a clock under the mode's), and
the latest events.

On a terminal the screen is cleared and redrawn in place (works over SSH); when stdout
is not a terminal every frame is printed after a time line, so it can be logged.`,
		Args: cobra.NoArgs,
	}
	client := addSocketFlag(cmd)
	interval := cmd.Flags().Duration("interval", time.Second, "refresh period")
	count := cmd.Flags().Int("count", 0, "stop after this many frames (0: until Ctrl-C)")
	nEvents := cmd.Flags().Int("events", 6, "how many recent events to show")
	width := cmd.Flags().Int("width", 0, "frame width in columns (default the terminal's, else 100)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *interval < 100*time.Millisecond {
			return fmt.Errorf("--interval %s: want at least 100ms", *interval)
		}
		if *nEvents < 0 || *width < 0 || *count < 0 {
			return fmt.Errorf("--events %d, --width %d, --count %d: want zero or more", *nEvents, *width, *count)
		}
		c := client()
		defer c.Close()
		out := cmd.OutOrStdout()
		return top(cmd.Context(), out, isTerminal(out), c, topOptions{interval: *interval, count: *count, events: *nEvents, width: *width})
	}
	return cmd
}

type topOptions struct {
	interval      time.Duration
	count, events int
	width         int
}

// termWidth is the terminal's width in columns (0 when unknown).
func termWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}

// top draws frames until ctx ends or count frames were drawn. The first status must
// be readable; later failures (a daemon restart) are shown in the frame.
func top(ctx context.Context, out io.Writer, tty bool, c *client.Client, o topOptions) error {
	t := time.NewTicker(o.interval)
	defer t.Stop()
	seen := false
	for n := 0; o.count == 0 || n < o.count; n++ {
		if n > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
		width := o.width
		if width == 0 && tty {
			width = termWidth(out)
		}
		if width == 0 {
			width = 100
		}
		var b bytes.Buffer
		if tty {
			b.WriteString("\x1b[H\x1b[2J") // home and clear: redraw in place
		} else {
			fmt.Fprintf(&b, "--- %s\n", time.Now().Format("15:04:05"))
		}
		st, err := c.Status(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && !seen:
			return explain("top", err)
		case err != nil:
			fmt.Fprintf(&b, "%v\n", explain("status", err))
		default:
			seen = true
			var evs []api.Event
			if o.events > 0 {
				if r, err := c.Events(ctx, 0); err == nil {
					evs = r.Events
				}
			}
			renderTop(&b, st, lastEvents(evs, o.events), time.Now(), width, time.Local)
		}
		if _, err := out.Write(b.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

func lastEvents(evs []api.Event, n int) []api.Event {
	if len(evs) > n {
		return evs[len(evs)-n:]
	}
	return evs
}

// fit cuts s to width runes, marking a cut with "…".
func fit(s string, width int) string {
	if width <= 0 || utf8.RuneCountInString(s) <= width {
		return s
	}
	r := []rune(s)
	return string(r[:width-1]) + "…"
}

// bar is a width-wide gauge of v against limit: '#' up to the value, '.' after; over
// the limit it is all '!'. No limit: blank.
func bar(v, limit float64, width int) string {
	if limit <= 0 {
		return "[" + strings.Repeat(" ", width) + "]"
	}
	if v > limit {
		return "[" + strings.Repeat("!", width) + "]"
	}
	n := int(v / limit * float64(width))
	n = min(max(n, 0), width)
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}

func pct(v, limit float64) string {
	if limit <= 0 {
		return "    "
	}
	return fmt.Sprintf("%3.0f%%", 100*v/limit)
}

// renderTop writes one frame of status and events, each line at most width columns,
// times in loc.
func renderTop(w io.Writer, st api.Status, evs []api.Event, now time.Time, width int, loc *time.Location) {
	var lines []string
	add := func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) }
	name := "fulcrumd"
	if st.Version != "" {
		name += " " + shown(st.Version)
	}
	add("%s on %s  up %s  %s", name, shown(st.Board), uptime(st.UptimeS), now.In(loc).Format("15:04:05"))
	mode := "none (no board)"
	if st.Mode.Cores > 0 {
		mode = st.Mode.Human()
	}
	switch {
	case st.StoodDown:
		mode += "  (set by another tool: fulcrumd stands down)"
	case st.ModeHeld:
		mode += "  (held)"
	}
	add("MODE   %s", mode)
	state := "ok"
	if st.Degraded {
		state = "DEGRADED: " + shown(st.DegradedReason)
	}
	if st.TrainingPaused {
		state += "; training paused"
	}
	if st.Optimizing != "" {
		state += "; optimizing (" + shown(st.Optimizing) + ")"
	}
	if p := st.Plan; p != nil {
		feas := "feasible"
		if !p.Feasible {
			feas = "INFEASIBLE"
			if p.Binding != "" {
				feas += " (" + p.Binding + ")"
			}
		}
		add("PLAN   %s, infer batch %d, %s  STATE %s", feas, p.InferBatch, shown(p.Source), state)
	} else {
		add("PLAN   none yet  STATE %s", state)
	}
	const barW = 20
	if p := st.Power; p != nil {
		now := p.Avg1sMW
		if p.Avg1sSamples == 0 && now == 0 {
			now = p.TotalMW
		}
		budget := "no budget"
		if st.Budgets.PowerMW > 0 {
			budget = watts(st.Budgets.PowerMW) + " budget"
		}
		add("POWER  %s %s %7s / %s (1 s avg; now %s)", bar(now, st.Budgets.PowerMW, barW), pct(now, st.Budgets.PowerMW), watts(now), budget, watts(p.TotalMW))
	} else {
		add("POWER  no power sensors")
	}
	if h := st.Heat; h != nil {
		load := "-"
		if h.GPULoad != nil {
			load = fmt.Sprintf("%.0f%%", 100**h.GPULoad)
		}
		add("GPU    load %-4s  runs %d MHz (set %d)  CPU runs %d MHz (set %d)", load, h.GPUHz/1e6, h.GPUFloorHz/1e6, h.CPUKHz/1000, h.CPUFloorKHz/1000)
		heat := "ok"
		if h.Throttled {
			heat = "THROTTLED"
			if h.ThrottledSince != nil {
				heat += " since " + h.ThrottledSince.In(loc).Format("15:04:05")
			}
			heat += ": " + shown(h.ThrottleReason)
		}
		if h.CapGPUHz > 0 || h.CapCPUKHz > 0 {
			heat += fmt.Sprintf("; plan capped at GPU ≤ %d MHz", h.CapGPUHz/1e6)
			if h.CapCPUKHz > 0 {
				heat += fmt.Sprintf(", CPU ≤ %d MHz", h.CapCPUKHz/1000)
			}
		}
		add("HEAT   %s", heat)
		for _, z := range h.Zones {
			if z.Error != "" {
				add("  %-16s    -      (unreadable)", fit(shown(z.Zone), 16))
				continue
			}
			trip, mark := "", ""
			if z.TripC > 0 {
				trip = fmt.Sprintf("trip %5.1f°C", z.TripC)
				if z.Celsius >= z.TripC {
					mark = "  OVER TRIP"
				}
			}
			add("  %-16s %5.1f°C %s %s%s", fit(shown(z.Zone), 16), z.Celsius, bar(z.Celsius, z.TripC, barW), trip, mark)
		}
	}
	lines = append(lines, "")
	add("%-22s %9s %9s %-22s %5s %8s %5s", "STREAM", "P99_MS", "BUDGET", "", "", "RATE/S", "BATCH")
	streams := st.Streams
	if len(streams) == 0 {
		for _, wl := range st.Workloads {
			if wl.Role == "infer" {
				streams = append(streams, api.StreamStatus{Workload: wl.Workload, LatencyBudgetMS: st.Budgets.LatencyMS,
					RateRPS: wl.ArrivalRateHz, MeasuredP99MS: wl.LatencyRecent.P99MS, ServedRecent: wl.LatencyRecent.Count})
			}
		}
	}
	if len(streams) == 0 {
		add("  (no inference stream)")
	}
	for _, s := range streams {
		p99 := "-"
		if s.ServedRecent > 0 {
			p99 = fmt.Sprintf("%.1f", s.MeasuredP99MS)
		}
		over := ""
		if s.ServedRecent > 0 && s.LatencyBudgetMS > 0 && s.MeasuredP99MS > s.LatencyBudgetMS {
			over = "  OVER"
		}
		add("%-22s %9s %9.0f %s %s %8.1f %5s%s", fit(shown(s.Workload), 22), p99, s.LatencyBudgetMS,
			bar(s.MeasuredP99MS, s.LatencyBudgetMS, barW), pct(s.MeasuredP99MS, s.LatencyBudgetMS), s.RateRPS, dash(s.Batch > 0, fmt.Sprint(s.Batch)), over)
	}
	var train []api.WorkloadStats
	for _, wl := range st.Workloads {
		if wl.Role == "train" {
			train = append(train, wl)
		}
	}
	if len(train) > 0 {
		add("%-22s %9s", "TRAINING", "SAMPLES/S")
		for _, wl := range train {
			add("%-22s %9.1f", fit(shown(wl.Workload), 22), wl.ThroughputPerS)
		}
	}
	if len(evs) > 0 {
		lines = append(lines, "")
		add("EVENTS")
		for _, e := range evs {
			add("%s %-10s %s", e.Time.In(loc).Format("15:04:05"), shown(e.Kind), shown(e.Message))
		}
	}
	for _, l := range lines {
		fmt.Fprintln(w, strings.TrimRight(fit(l, width), " "))
	}
}

// writeHeat adds the heat lines of fulcrumctl status (and watch): the hottest zones
// against their trip points, GPU load, and throttling with the plan's thermal cap.
func writeHeat(w io.Writer, h *api.Heat) {
	if h == nil {
		return
	}
	var zones []string
	for _, z := range h.Zones {
		if z.Error != "" {
			continue
		}
		s := fmt.Sprintf("%s %.1f°C", shown(z.Zone), z.Celsius)
		if z.TripC > 0 && z.Celsius >= z.TripC {
			s += fmt.Sprintf(" (OVER its %.1f°C trip point)", z.TripC)
		}
		zones = append(zones, s)
	}
	load := ""
	if h.GPULoad != nil {
		load = fmt.Sprintf("GPU load %.0f%%, ", 100**h.GPULoad)
	}
	fmt.Fprintf(w, "heat\t%sGPU runs %d MHz, CPU %d MHz  %s\n", load, h.GPUHz/1e6, h.CPUKHz/1000, strings.Join(zones, "  "))
	if h.Throttled {
		since := "now"
		if h.ThrottledSince != nil {
			since = "since " + h.ThrottledSince.Local().Format("15:04:05")
		}
		fmt.Fprintf(w, "throttled\t%s: %s (the board runs slower than the mode set)\n", since, shown(h.ThrottleReason))
	}
	if h.CapGPUHz > 0 || h.CapCPUKHz > 0 {
		fmt.Fprintf(w, "thermal cap\tthe plan keeps the GPU ≤ %d MHz", h.CapGPUHz/1e6)
		if h.CapCPUKHz > 0 {
			fmt.Fprintf(w, ", CPU ≤ %d MHz", h.CapCPUKHz/1000)
		}
		fmt.Fprintf(w, " (the clocks the board ran while it throttled) until every zone is %.0f°C under its trip point\n", control.HeatClearC)
	}
}
