// Command lifeevents runs one configuration of the lifetime benchmark (fulcrum/lifetime:
// fulcrumd's own code on virtual time, the board answering from a truth table) and prints
// the controller's event log and what the run did: the way to read why a run of
// `fulcrumctl bench --lifetime` trained what it did (docs/benchmarks.md, "Why GMD pauses
// at 20 W").
//
//	go run ./scripts/lifeevents --truth /tmp/agx4.csv --board agx-orin-64gb --searcher gmd \
//	    --train resnet18-train --infer mobilenetv3-infer --rate 10 --latency-ms 200 --power-w 20 \
//	    --duration 30m --seed 3368749347194225895
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench"
	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon"
	"github.com/fulcrum-edge/fulcrum/fulcrum/lifetime"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/internal/vclock"
	"github.com/fulcrum-edge/fulcrum/truth"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "lifeevents:", err)
		os.Exit(1)
	}
}

func run() error {
	truthPath := flag.String("truth", "", "ground-truth table (fulcrumctl sim truth --out)")
	board := flag.String("board", "agx-orin-64gb", "catalog board the table is of")
	searcher := flag.String("searcher", "gmd", "gmd, als or preset")
	train := flag.String("train", "resnet18-train", "training workloads, comma-separated")
	infer := flag.String("infer", "mobilenetv3-infer", "inference workloads, comma-separated")
	rateRPS := flag.Float64("rate", 10, "each stream's arrival rate, req/s")
	latencyMS := flag.Float64("latency-ms", 200, "each stream's p99 latency budget, ms")
	powerW := flag.Float64("power-w", 20, "power budget, W (0: none)")
	duration := flag.Duration("duration", 30*time.Minute, "virtual time run")
	seed := flag.Int64("seed", 1, "run seed (fulcrumctl bench --lifetime derives one per configuration)")
	boardInterval := flag.Duration("board-interval", 0, "the simulated board's physics step (0: lifetime.DefaultBoardInterval)")
	maxProfiles := flag.Int("max-profiles", 0, "the controller's max_profiles (0: fulcrumd's default)")
	logPath := flag.String("log", "", "write fulcrumd's debug log here")
	refine := flag.Bool("refine", true, "live refinement (controller.refine.enabled)")
	trials := flag.Bool("trials", true, "live refinement's trials (controller.refine.trials)")
	micro := flag.Bool("micro", false, "the trainers declare the table's micro-batch sizes (bench --lifetime --micro)")
	benchSeed := flag.Uint64("bench-seed", 0, "with --index: the seed of fulcrumctl bench --lifetime --seed N's run of that configuration (overrides --seed)")
	index := flag.Int("index", -1, "with --bench-seed: the configuration's index in the bench report's configurations (from 0)")
	budgetsEvery := flag.Duration("budgets-every", 0, "with --bench-seed and --index: replay bench --budgets-every D's budget tour of that configuration (give the sweep's --sweep-latency-ms and --sweep-power-w)")
	sweepLat := flag.String("sweep-latency-ms", "", "with --budgets-every: the bench sweep's latency budgets, ms, comma-separated")
	sweepPow := flag.String("sweep-power-w", "", "with --budgets-every: the bench sweep's power budgets, W, comma-separated")
	trace := flag.Bool("trace", false, "print each second a latency budget was over (the scheduler's recent window), with the configuration in force, among the events")
	flag.Parse()
	if *index >= 0 {
		*seed = bench.LifetimeRunSeed(*benchSeed, *index)
	}
	if *truthPath == "" {
		return fmt.Errorf("--truth is required: make one with fulcrumctl sim truth --board %s --out FILE", *board)
	}
	f, err := os.Open(*truthPath)
	if err != nil {
		return fmt.Errorf("open the truth table: %w", err)
	}
	tb, err := truth.Read(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("read the truth table %s: %w", *truthPath, err)
	}
	sc := lifetime.Scenario{Board: *board, Truth: tb, Train: strings.Split(*train, ","), PowerBudgetMW: *powerW * 1000,
		Searcher: *searcher, Duration: *duration, Seed: *seed, BoardInterval: *boardInterval}
	sc.MicroBatches = *micro
	sc.Configure = func(o *daemon.Options) {
		if *maxProfiles > 0 {
			o.Control.MaxProfiles = *maxProfiles
		}
		o.Control.Refine.Enabled = *refine
		o.Control.Refine.Trials = *trials
	}
	for _, w := range strings.Split(*infer, ",") {
		sc.Infer = append(sc.Infer, lifetime.Stream{Workload: w, RateRPS: *rateRPS, LatencyMS: *latencyMS})
	}
	if *budgetsEvery > 0 {
		if *index < 0 {
			return fmt.Errorf("--budgets-every replays a bench configuration's tour: give --bench-seed and --index")
		}
		lats, err := floats(*sweepLat, 1)
		if err != nil {
			return fmt.Errorf("--sweep-latency-ms: %w", err)
		}
		pows, err := floats(*sweepPow, 1000)
		if err != nil {
			return fmt.Errorf("--sweep-power-w: %w", err)
		}
		spec := bench.LifetimeSpec{Seed: *benchSeed, Duration: *duration, BudgetsEvery: *budgetsEvery, LatenciesMS: lats, PowersMW: pows}
		for _, c := range bench.BudgetTour(spec, *latencyMS, *powerW*1000, *index) {
			fmt.Printf("tour: at %v latency %g ms, power %g W\n", c.At, c.LatencyMS, c.PowerMW/1000)
			sc.Changes = append(sc.Changes, lifetime.Change{At: c.At, LatencyMS: c.LatencyMS, PowerBudgetMW: c.PowerMW})
		}
	}
	if *logPath != "" {
		lf, err := os.Create(*logPath)
		if err != nil {
			return fmt.Errorf("create the log: %w", err)
		}
		defer lf.Close()
		sc.Log = slog.New(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	type line struct {
		atS  float64
		text string
	}
	var lines []line
	if *trace {
		sc.Probes = append(sc.Probes, lifetime.Probe{At: time.Second, Every: time.Second, Do: func(in *lifetime.Instant) {
			snap, st := in.Snapshot(), in.Status()
			for _, w := range snap.Workloads {
				r := w.LatencyRecent
				if w.Role != proto.RoleInfer || r.Count < 20 || r.P99MS <= w.LatencyBudgetMS {
					continue
				}
				s := fmt.Sprintf("%7.1fs %-10s %s p99 %.1f ms > %.0f ms over %d (max %.1f), room %.1f ms",
					in.Elapsed().Seconds(), "BROKEN", w.Workload, r.P99MS, w.LatencyBudgetMS, r.Count, r.MaxMS, w.AdmissionRoomMS)
				if c := st.Current; c != nil {
					s += fmt.Sprintf(" | in force: %s batch %d micro %d, predicted p99 %.1f ms", c.Mode, c.Batch(), c.MicroBatch(), c.Predicted.LatencyMS)
				}
				for _, wk := range snap.Workers {
					if wk.Role == proto.RoleTrain {
						s += fmt.Sprintf(" | %s turns of %d", wk.Workload, wk.MicroBatch)
					}
				}
				if snap.TrainingPaused {
					s += " | training paused"
				}
				if st.Stepped {
					s += " | stepped"
				}
				lines = append(lines, line{in.Elapsed().Seconds(), s})
			}
		}})
	}
	res, err := lifetime.Run(context.Background(), sc)
	if err != nil {
		return err
	}
	for _, e := range res.Events {
		s := fmt.Sprintf("%7.1fs %-10s %s", e.Time.Sub(vclock.Epoch).Seconds(), e.Kind, e.Reason)
		if p := e.Predicted; p != nil {
			s += fmt.Sprintf(" | predicted: %.1f samples/s, p99 %.1f ms, %.1f W, feasible %v", p.ThroughputSPS, p.LatencyMS, p.PowerMW/1000, p.Feasible)
		}
		if m := e.Measured; m != nil {
			s += fmt.Sprintf(" | measured: %.2f req/s, p99 %.1f ms, %.1f W (1 s)", m.RateRPS, m.LatencyP99MS, m.PowerMW/1000)
		}
		for len(lines) > 0 && lines[0].atS <= e.Time.Sub(vclock.Epoch).Seconds() {
			fmt.Println(lines[0].text)
			lines = lines[1:]
		}
		fmt.Println(s)
	}
	for _, l := range lines {
		fmt.Println(l.text)
	}
	fmt.Printf("trained %v samples; first plan %.1f s; %d profiles; search %.0f s; training paused %.0f s; latency broken %.0f s (%.0f s after the first plan); power broken %.1f s (%.1f s after it); mean power %.1f W; final mode %s\n",
		res.TrainSamples, res.FirstPlanS, res.ProfilesTaken, res.SearchS, res.TrainPausedS, res.LatencyBrokenS, res.LatencyBrokenAfterPlanS, res.PowerBrokenS, res.PowerBrokenAfterPlanS, res.MeanPowerMW/1000, res.FinalMode)
	if p := res.PowerOneSecond; p.MeanMW > 0 {
		fmt.Printf("1 s average power: mean %.2f W, sd %.2f W (%.1f %%), 99.5th percentile %.2f W (%.1f %% over the mean), max %.2f W\n",
			p.MeanMW/1000, p.StdDevMW/1000, 100*p.StdDevMW/p.MeanMW, p.P995MW/1000, 100*(p.P995MW/p.MeanMW-1), p.MaxMW/1000)
	}
	if len(res.PhaseSamples) > 0 {
		fmt.Printf("samples by stretch between changes: %v\n", res.PhaseSamples)
	}
	for _, s := range res.Streams {
		fmt.Printf("stream %s: %d served, %d late, p99 %.1f ms (after the first plan %.1f ms, %d of %d late)\n", s.Workload, s.Served, s.Late, s.P99MS, s.P99AfterPlanMS, s.LateAfterPlan, s.ServedAfterPlan)
	}
	return nil
}

// floats parses a comma-separated list of numbers, each times scale.
func floats(list string, scale float64) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(list, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return nil, fmt.Errorf("%q: want numbers separated by commas, e.g. 50,150", list)
		}
		out = append(out, v*scale)
	}
	return out, nil
}
