package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fulcrum-edge/fulcrum/configs"
	"github.com/fulcrum-edge/fulcrum/fulcrum/bench"
	fplot "github.com/fulcrum-edge/fulcrum/fulcrum/plot"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/nvpmodel"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

func newProfilePlotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plot --workload NAME --out FILE.svg|FILE.png",
		Short: "Plot minibatch time against board power of the profiled modes, with the Pareto front",
		Long: `plot draws one workload's profiles (one role, one batch size) from the store:
mean minibatch time (ms) against mean board power (W) of every profiled mode, the
Pareto front (no other mode is both faster and lower-power), the board's nvpmodel
presets that were profiled (labelled with their names), and optionally a chosen mode
(--mark cores/cpu_khz/gpu_hz/emc_hz) and a power budget (--budget-power).

The image type follows --out's extension: .svg or .png. The store is opened read-only,
but fulcrumd holds its lock while it runs; plot a copy of the daemon's profiles then:
  fulcrumctl daemon profiles export --format json -o /tmp/p.json
  fulcrumctl profile import --db /tmp/p.db /tmp/p.json
  fulcrumctl profile plot --db /tmp/p.db --workload NAME --out plot.svg`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	workload := f.String("workload", "", "workload name (required)")
	roleS := f.String("role", "train", "role: train or infer")
	batch := f.Int("batch", 0, "batch size (default: the only one stored, or the smallest for inference)")
	board := f.String("board", "", "board catalog name (default: the only board in the store)")
	budget := f.String("budget-power", "", "draw a power budget line, in watts (30, 30W) or 30000mW")
	mark := f.String("mark", "", "highlight a chosen mode: cores/cpu_khz/gpu_hz/emc_hz, e.g. 8/1728000/612000000/3199000000")
	out := f.String("out", "", "output image, .svg or .png (required)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *workload == "" {
			return errors.New("--workload is required (list stored workloads with fulcrumctl profile ls)")
		}
		if *out == "" {
			return errors.New("--out is required: an .svg or .png file")
		}
		role, err := truth.ParseRole(*roleS)
		if err != nil {
			return fmt.Errorf("--role: %w", err)
		}
		opt := fplot.ProfileOptions{}
		if *budget != "" {
			if opt.BudgetPowerMW, err = parsePowerMW(*budget); err != nil {
				return fmt.Errorf("--budget-power: %w", err)
			}
		}
		if *mark != "" {
			m, err := powermode.ParseMode(*mark)
			if err != nil {
				return fmt.Errorf("--mark: %w", err)
			}
			opt.Mark = &m
		}
		s, err := store.Open(dbFlag(cmd), store.Options{ReadOnly: true})
		if err != nil {
			return err
		}
		ps, err := s.List(store.Filter{Board: *board, Workload: *workload, Role: role})
		s.Close()
		if err != nil {
			return err
		}
		pts, boardName, b, err := selectPlotPoints(ps, *batch)
		if err != nil {
			return fmt.Errorf("%s %s in %s: %w", *workload, role, dbFlag(cmd), err)
		}
		if c, err := powermode.LoadCatalog(configs.FS, "boards"); err == nil {
			if spec, err := c.Board(boardName); err == nil {
				// Every catalog preset, its caps snapped at or below onto the levels (the
				// mode it was profiled at); reboot-only ones are worth marking on a figure.
				if bp, err := nvpmodel.Catalog(spec, spec.NVP.Default, false); err == nil {
					for _, pr := range bp.Presets {
						opt.Presets = append(opt.Presets, fplot.Preset{Name: pr.Name, Mode: pr.Mode})
					}
				}
			}
		}
		opt.Title = fmt.Sprintf("%s %s, batch %d, on %s", *workload, role, b, boardName)
		p, res, err := fplot.ProfileFigure(pts, opt)
		if err != nil {
			return err
		}
		if err := fplot.Save(p, *out); err != nil {
			return err
		}
		w := cmd.ErrOrStderr()
		fmt.Fprintf(w, "wrote %s: %d modes, %d on the Pareto front", *out, len(pts), len(res.Front))
		if len(res.PresetsShown) > 0 {
			fmt.Fprintf(w, "; presets marked: %s", strings.Join(res.PresetsShown, ", "))
		}
		if len(res.PresetsMissing) > 0 {
			fmt.Fprintf(w, "; presets not profiled (not shown): %s", strings.Join(res.PresetsMissing, ", "))
		}
		fmt.Fprintln(w)
		return nil
	}
	return cmd
}

// selectPlotPoints keeps one board and one batch size of the listed profiles (already
// filtered by workload and role) and returns them as plot points.
func selectPlotPoints(ps []store.Profile, batch int) ([]fplot.Point, string, int, error) {
	if len(ps) == 0 {
		return nil, "", 0, errors.New("no profiles stored: check --workload, --role and --board (fulcrumctl profile ls lists what is stored)")
	}
	var boards []string
	batches := map[int]bool{}
	for _, p := range ps {
		if !slices.Contains(boards, p.Board) {
			boards = append(boards, p.Board)
		}
		batches[p.Batch] = true
	}
	if len(boards) > 1 {
		return nil, "", 0, fmt.Errorf("profiles from several boards (%s): pick one with --board", strings.Join(boards, ", "))
	}
	if batch == 0 {
		keys := make([]int, 0, len(batches))
		for k := range batches {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		batch = keys[0]
	} else if !batches[batch] {
		var have []string
		for _, p := range ps {
			if s := fmt.Sprint(p.Batch); !slices.Contains(have, s) {
				have = append(have, s)
			}
		}
		return nil, "", 0, fmt.Errorf("no profiles at batch %d: stored batches are %s", batch, strings.Join(have, ", "))
	}
	var pts []fplot.Point
	for _, p := range ps {
		if p.Batch == batch && p.MicroBatch == 0 { // a micro-batch turn (issue 32) is not the minibatch's point
			pts = append(pts, fplot.Point{Mode: p.Mode, TimeMS: p.TimeMS.Mean, PowerMW: p.PowerMW.Mean})
		}
	}
	return pts, boards[0], batch, nil
}

// benchPlot is bench's --plot flag: a summary figure of the report.
type benchPlot struct{ path *string }

func newBenchPlotFlag(f *pflag.FlagSet) benchPlot {
	return benchPlot{f.String("plot", "", "also draw a summary figure (per searcher: % within budgets, mean throughput / oracle %, profiles) to FILE.svg or FILE.png")}
}

// check refuses a bad file name before the benchmark runs, not after.
func (b benchPlot) check() error {
	if *b.path == "" {
		return nil
	}
	switch strings.ToLower(filepath.Ext(*b.path)) {
	case ".svg", ".png":
		return nil
	}
	return fmt.Errorf("--plot %s: name the file .svg or .png", *b.path)
}

func (b benchPlot) draw(w io.Writer, rep *bench.BenchReport) error {
	if *b.path == "" {
		return nil
	}
	if err := fplot.PlotBenchSummary(rep, *b.path); err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	fmt.Fprintf(w, "wrote the summary figure to %s\n", *b.path)
	return nil
}
