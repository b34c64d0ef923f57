package main

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fulcrum-edge/fulcrum/configs"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// newSimCmd is the simulated-board command group. Subcommands each have their own
// constructor below; add new ones (e.g. a synthetic worker) to the AddCommand list.
func newSimCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run a simulated Jetson board and generate ground-truth tables from its models",
		Long: `sim runs a simulated Jetson board (a fake sysfs tree kept current by a physics loop)
and generates ground-truth tables from the workload models in configs/workloads.
docs/simulator.md describes the models.`,
	}
	cmd.AddCommand(newSimBoardCmd(), newSimTruthCmd(), newSimWorkerCmd())
	return cmd
}

// simCatalogBoard loads the board catalog and returns the named board.
func simCatalogBoard(name string) (*powermode.BoardSpec, error) {
	c, err := powermode.LoadCatalog(configs.FS, "boards")
	if err != nil {
		return nil, err
	}
	if name == "" {
		return nil, fmt.Errorf("--board is required: one of %s", strings.Join(c.Names(), ", "))
	}
	return c.Board(name)
}

// simLoadModels reads the workload models: the embedded ones, or every *.yaml in dir.
func simLoadModels(dir string) (map[string]*sim.Workload, error) {
	if dir == "" {
		return sim.LoadWorkloads(configs.FS, "workloads")
	}
	return sim.LoadWorkloads(os.DirFS(dir), ".")
}

func newSimTruthCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "truth --board NAME --out FILE",
		Short: "Write a ground-truth table (time and power per workload, mode and batch) from the models",
		Long: `truth evaluates the workload models at every mode of a board and writes the
ground-truth CSV the benchmark and the planner read (docs/design.md §8):
workload,role,cores,cpu_khz,gpu_hz,emc_hz,batch,time_ms,power_mw.

The modes are every CPU, GPU and EMC level of the board at the given core counts
(default 2, 4, … up to the board's cores). Training rows are at the workload's
minibatch size B_T, plus one micro-batch turn of B_T/k samples for each k of
--micro-splits that divides B_T (column micro_batch; --micro-splits none leaves them
out and writes the table of before), inference rows at each batch size. Values are noise-free unless
--noise is given: "workload" applies each workload's documented run-to-run spread, a
number applies that log-normal sigma to times and half of it to powers.`,
		Args: cobra.NoArgs,
	}
	board := cmd.Flags().String("board", "", "catalog board name, e.g. agx-orin-64gb")
	wl := cmd.Flags().StringSlice("workloads", nil, "workloads to include (default all), e.g. resnet18-train,mobilenetv3-infer")
	cores := cmd.Flags().IntSlice("cores", nil, "online-core levels (default 2,4,… up to the board's cores)")
	batches := cmd.Flags().IntSlice("batches", nil, "inference batch sizes (default each workload's own: 1,2,4,8,16,32)")
	out := cmd.Flags().String("out", "", "output CSV file, - for stdout (required)")
	noise := cmd.Flags().String("noise", "0", `run-to-run noise: 0 (none), "workload" (each model's sigma) or a sigma such as 0.03`)
	seed := cmd.Flags().Uint64("seed", 1, "random seed for --noise")
	models := cmd.Flags().String("models", "", "directory of workload model *.yaml to use instead of the built-in ones")
	splits := cmd.Flags().String("micro-splits", "2,4,8", `training micro-batch rows: turns k per minibatch (rows at B_T/k samples), e.g. 2,4,8, or "none"`)
	turnCost := cmd.Flags().Float64("micro-turn-cost", 0, "per-turn fixed cost of a micro-batch as a share of the minibatch's time (0: the workload model alone; real PyTorch on the CPU measured 0.18 to 0.49, docs/simulator.md)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *out == "" {
			return errors.New("--out is required: a CSV file path, or - for stdout")
		}
		spec, err := simCatalogBoard(*board)
		if err != nil {
			return err
		}
		ws, err := simLoadModels(*models)
		if err != nil {
			return err
		}
		opt := sim.TruthOptions{Workloads: *wl, Cores: *cores, Batches: *batches, MicroTurnCostRel: *turnCost}
		if n := strings.TrimSpace(*splits); n != "" && n != "none" && n != "0" {
			for _, f := range strings.Split(n, ",") {
				k, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || k < 2 {
					return fmt.Errorf("--micro-splits %q: want turns per minibatch k ≥ 2, comma-separated (e.g. 2,4,8), or none", n)
				}
				opt.MicroSplits = append(opt.MicroSplits, k)
			}
		}
		switch n := strings.TrimSpace(*noise); n {
		case "", "0", "none":
		case "workload", "auto":
			opt.Noise = sim.NoiseWorkload
		default:
			v, err := strconv.ParseFloat(n, 64)
			if err != nil || v < 0 || v > 0.5 {
				return fmt.Errorf("--noise %q: want 0, workload, or a sigma between 0 and 0.5 (e.g. 0.03)", n)
			}
			if v > 0 {
				opt.Noise, opt.Sigma = sim.NoiseSigma, v
			}
		}
		if opt.Noise != sim.NoiseNone {
			opt.Rand = rand.New(rand.NewPCG(*seed, *seed^0x5eed))
		}
		rows, err := sim.TruthRows(spec, ws, opt)
		if err != nil {
			return err
		}
		write := func(w io.Writer) error { return truth.Write(w, rows) }
		if *out == "-" {
			return write(cmd.OutOrStdout())
		}
		if err := simWriteFileAtomic(*out, write); err != nil {
			return err
		}
		space, _ := sim.TruthSpace(spec, *cores)
		fmt.Fprintf(cmd.ErrOrStderr(), "wrote %d rows (%d modes of %s) to %s\n", len(rows), space.Size(), spec.Name, *out)
		return nil
	}
	return cmd
}

// simWriteFileAtomic writes path through a temporary file and a rename, so a reader
// never sees half a table and a failed run leaves the old file.
func simWriteFileAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	werr := write(f)
	if err := errors.Join(werr, f.Chmod(0o644), f.Close()); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func newSimBoardCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "board --dir DIR --board NAME",
		Short: "Materialise a simulated board's sysfs tree and run its physics loop until stopped",
		Long: `board builds a Jetson sysfs/procfs tree for a catalog board under --dir and runs the
physics loop in the foreground until SIGINT or SIGTERM: it follows the frequencies and
online cores written into the tree and keeps cur_freq, GPU load, the INA3221 rails and
the thermal zones current from what runs (minibatches register under
` + sim.ActivityDir + `).

--dir must be new, empty, or a stopped simulator tree of the same board (rebuilt from
scratch). Point other commands at the tree with --root DIR.`,
		Args: cobra.NoArgs,
	}
	dir := cmd.Flags().String("dir", "", "directory for the tree (required)")
	board := cmd.Flags().String("board", "", "catalog board name, e.g. agx-orin-64gb")
	layout := cmd.Flags().String("layout", "", "sysfs layout: jp4, jp5 or jp6 (default the board's newest)")
	interval := cmd.Flags().Duration("interval", sim.DefaultInterval, "physics loop period")
	models := cmd.Flags().String("models", "", "directory of workload model *.yaml to use instead of the built-in ones")
	heat := cmd.Flags().Bool("heat", false, "model thermal throttling: past a zone's trip point the simulated firmware caps the clocks (off: the cold steady state)")
	ambient := cmd.Flags().Float64("ambient-c", sim.DefaultAmbientC, "air temperature around the heat sink, °C")
	tau := cmd.Flags().Duration("thermal-tau", sim.DefaultThermalTau, "the heat sink's time constant")
	cPerW := cmd.Flags().Float64("c-per-w", sim.DefaultCPerW, "with --heat: steady-state rise per board watt, °C/W (1.5-2 for a passively cooled module)")
	tripC := cmd.Flags().Float64("trip-c", 0, "with --heat: every zone's passive trip point, °C (default the tree's 99)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *dir == "" {
			return errors.New("--dir is required: a new or empty directory for the simulated tree")
		}
		if *interval < time.Millisecond {
			return fmt.Errorf("--interval %v: want at least 1ms", *interval)
		}
		spec, err := simCatalogBoard(*board)
		if err != nil {
			return err
		}
		ws, err := simLoadModels(*models)
		if err != nil {
			return err
		}
		if *tau <= 0 || *cPerW <= 0 || *tripC < 0 {
			return fmt.Errorf("--thermal-tau %v, --c-per-w %v, --trip-c %v: want positive values (--trip-c 0 keeps the tree's)", *tau, *cPerW, *tripC)
		}
		opts := sim.Options{Layout: *layout, Interval: *interval, Workloads: ws, AmbientC: *ambient, ThermalTau: *tau}
		if *heat {
			opts.Heat = &sim.HeatOptions{CPerW: *cPerW, TripC: *tripC}
		}
		b, err := sim.New(*dir, spec, opts)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "simulated %s (%s layout) running in %s, physics every %v\n", spec.Display, b.Tree().Layout(), b.Root(), *interval)
		if *heat {
			fmt.Fprintf(cmd.OutOrStdout(), "heat on: ambient %.0f °C, %.2f °C/W, time constant %v; clocks capped past the trip point\n", *ambient, *cPerW, *tau)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "point other commands at it with --root %s (Ctrl-C or SIGTERM stops it)\n", b.Root())
		if err := b.Run(cmd.Context()); err != nil {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), "simulated board stopped")
		return nil
	}
	return cmd
}
