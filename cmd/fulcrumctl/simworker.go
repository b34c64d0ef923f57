package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/fulcrum-edge/fulcrum/configs"
	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon/simworker"
	"github.com/fulcrum-edge/fulcrum/internal/tailmodel"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// newSimWorkerCmd is `fulcrumctl sim worker`: a synthetic training or inference worker
// whose minibatches run on a simulated board, under fulcrumd (--socket) or unmanaged.
func newSimWorkerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker --role train|infer --workload NAME --root DIR [--worker-socket PATH]",
		Short: "Run a synthetic training or inference worker on a simulated board",
		Long: `worker runs a synthetic worker whose minibatches take the time the workload model
gives at the clocks currently written in the simulated board's tree (fulcrumctl sim
board), sharing the GPU with every other minibatch running there.

With --socket it is managed: it registers with fulcrumd and runs one minibatch per
grant. Without it, it runs unmanaged: training back to back, inference whenever
requests are queued, and the simulator time-slices the GPU between the processes as the
CUDA driver would.

Inference requests arrive as a Poisson process (--rate) or at the offsets of a trace
file (--trace: one arrival per line, seconds since the start). At the end it prints a
JSON report: requests served, latency p50/p99/max, minibatches, throughput.`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	role := f.String("role", "", "train or infer (required)")
	workload := f.String("workload", "", "workload model name, e.g. resnet18-train (required)")
	root := f.String("root", "", "the simulated board's tree (required)")
	board := f.String("board", "", "catalog board name (default: detect from --root)")
	socket := f.String("worker-socket", "", "fulcrumd's worker socket; empty runs unmanaged")
	workerSocketAlias(cmd, socket)
	batch := f.Int("batch", 0, "minibatch size (train: default the workload's; infer: batch to serve, default ≤8)")
	rate := f.Float64("rate", 0, "inference arrival rate, requests/s (Poisson)")
	trace := f.String("trace", "", "inference arrival trace file")
	requests := f.Int("requests", 0, "inference: stop after this many requests (0: until --duration or the trace ends)")
	steps := f.Int("steps", 0, "training: stop after this many minibatches (0: until --duration)")
	duration := f.Duration("duration", 0, "stop after this long (0: no limit)")
	latency := f.Duration("latency", 100*time.Millisecond, "latency budget for counting deadline misses in the report")
	seed := f.Uint64("seed", 1, "random seed (arrivals, run-to-run noise)")
	models := f.String("models", "", "directory of workload model *.yaml to use instead of the built-in ones")
	tail := f.String("tail", "none", "heavy-tailed turn times: none, or pytorch-cpu (the tail fitted to real PyTorch on a CPU, docs/runtime.md)")
	micro := f.IntSlice("micro-batches", nil, "training: micro-batch sizes to declare to fulcrumd, divisors of the minibatch, e.g. 4,8,16 (issue 32; each turn then runs the grant's micro-batch)")
	whileAway := f.String("while-away", "wait", "training, while fulcrumd is away (restarting): wait for it, or train unmanaged (train)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *role == "" || *workload == "" || *root == "" {
			return fmt.Errorf("--role, --workload and --root are required")
		}
		if *whileAway != "wait" && *whileAway != "train" {
			return fmt.Errorf("--while-away %q: want wait or train", *whileAway)
		}
		var spec *powermode.BoardSpec
		var err error
		if *board != "" {
			spec, err = simCatalogBoard(*board)
		} else {
			spec, err = detectSimBoard(*root)
		}
		if err != nil {
			return err
		}
		ms, err := simLoadModels(*models)
		if err != nil {
			return err
		}
		w, ok := ms[*workload]
		if !ok {
			return fmt.Errorf("unknown workload %q (see configs/workloads)", *workload)
		}
		tm, err := tailmodel.Named(*tail, *role)
		if err != nil {
			return fmt.Errorf("--tail: %w", err)
		}
		o := simworker.Options{Role: *role, Workload: w, Spec: spec, Root: *root, Socket: *socket, Batch: *batch,
			RateHz: *rate, Requests: *requests, Steps: *steps, Duration: *duration, LatencyBudget: *latency, Seed: *seed,
			TrainWhileAway: *whileAway == "train", Tail: tm, MicroBatches: *micro}
		if *trace != "" {
			fh, err := os.Open(*trace)
			if err != nil {
				return fmt.Errorf("open trace: %w", err)
			}
			o.Trace, err = simworker.ReadTrace(fh)
			fh.Close()
			if err != nil {
				return err
			}
		}
		rep, err := simworker.Run(cmd.Context(), o)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(cmd.OutOrStdout())
		return enc.Encode(rep)
	}
	return cmd
}

// detectSimBoard identifies the simulated board under root from its device tree.
func detectSimBoard(root string) (*powermode.BoardSpec, error) {
	c, err := powermode.LoadCatalog(configs.FS, "boards")
	if err != nil {
		return nil, err
	}
	spec, _, err := powermode.Detect(root, c)
	if err != nil {
		return nil, fmt.Errorf("%w (or pass --board)", err)
	}
	return spec, nil
}
