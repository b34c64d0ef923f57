package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// TruthOptions selects what a ground-truth table covers.
type TruthOptions struct {
	// Workloads are the workload names to include; empty means all, sorted by name.
	Workloads []string
	// Cores are the online-core levels; empty means 2, 4, … up to the board's cores
	// (plus the board's core count when odd). Levels above the board's are dropped.
	Cores []int
	// Batches overrides the inference batch sizes; empty means each workload's own.
	// Training rows are always at the workload's B_T.
	Batches []int
	// MicroSplits adds, for every training workload, rows of one micro-batch turn of
	// B_T/k samples for each k here that divides B_T (k ≥ 2; issue 32): the table's
	// micro_batch column. Empty: whole minibatches only (the table of before).
	MicroSplits []int
	// MicroTurnCostRel, when positive, raises each micro-batch turn to at least
	// c·τ(B_T) + (1−c)·τ(B_T)·b/B_T at b samples: a per-turn fixed cost of c of the
	// minibatch's time, so a sample costs at least 1 + c·(B_T/b − 1) times the
	// minibatch's. 0: the workload model alone. Real PyTorch on the CPU measured 0.18–0.49
	// (docs/simulator.md "Micro-batches").
	MicroTurnCostRel float64
	// Noise adds run-to-run noise to every row (a log-normal factor with mean 1):
	// NoiseNone, NoiseWorkload (each workload's documented sigmas), or NoiseSigma (time
	// sigma Sigma, power sigma Sigma/2).
	Noise NoiseKind
	Sigma float64
	// Rand draws the noise; required when Noise is not NoiseNone.
	Rand *rand.Rand
}

// NoiseKind says which noise TruthRows adds.
type NoiseKind int

// The noise kinds of TruthOptions.
const (
	NoiseNone NoiseKind = iota
	NoiseWorkload
	NoiseSigma
)

// DefaultCores is 2, 4, … up to the board's core count (the count itself included).
func DefaultCores(spec *powermode.BoardSpec) []int {
	var out []int
	for c := 2; c <= spec.CPU.Cores; c += 2 {
		out = append(out, c)
	}
	if len(out) == 0 || out[len(out)-1] != spec.CPU.Cores {
		out = append(out, spec.CPU.Cores)
	}
	return out
}

// TruthSpace is the mode space a table with these core levels covers: every CPU, GPU
// and EMC level of the board.
func TruthSpace(spec *powermode.BoardSpec, cores []int) (*powermode.Space, error) {
	if len(cores) == 0 {
		cores = DefaultCores(spec)
	}
	var kept []int
	for _, c := range cores {
		if c >= 1 && c <= spec.CPU.Cores {
			kept = append(kept, c)
		}
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("ground truth: no core level in %v fits board %s (1..%d cores)", cores, spec.Name, spec.CPU.Cores)
	}
	l := spec.Levels()
	l.Cores = kept
	return powermode.NewSpace(l)
}

// TruthRows computes a ground-truth table (docs/design.md §8) for the board from the models.
// Rows come workload by workload (sorted by name), then mode by mode in space order,
// then batch by batch.
func TruthRows(spec *powermode.BoardSpec, workloads map[string]*Workload, opt TruthOptions) ([]truth.Row, error) {
	names := opt.Workloads
	if len(names) == 0 {
		for n := range workloads {
			names = append(names, n)
		}
		slices.Sort(names)
	}
	for _, n := range names {
		if _, ok := workloads[n]; !ok {
			known := make([]string, 0, len(workloads))
			for k := range workloads {
				known = append(known, k)
			}
			slices.Sort(known)
			return nil, fmt.Errorf("ground truth: unknown workload %q: known workloads are %s", n, strings.Join(known, ", "))
		}
	}
	for _, b := range opt.Batches {
		if b < 1 {
			return nil, fmt.Errorf("ground truth: batch size %d must be at least 1", b)
		}
	}
	if c := opt.MicroTurnCostRel; math.IsNaN(c) || c < 0 || c >= 1 {
		return nil, fmt.Errorf("ground truth: micro-batch turn cost %v: want a share of the minibatch's time in [0, 1), e.g. 0.18", c)
	}
	for _, k := range opt.MicroSplits {
		if k < 2 {
			return nil, fmt.Errorf("ground truth: micro-batch split %d: want k ≥ 2 turns per minibatch (k = 1 is the whole minibatch, always written)", k)
		}
	}
	if opt.Noise != NoiseNone && opt.Rand == nil {
		return nil, fmt.Errorf("ground truth: noise needs a random source (seed)")
	}
	if opt.Noise == NoiseSigma && (opt.Sigma < 0 || opt.Sigma > 0.5) {
		return nil, fmt.Errorf("ground truth: noise sigma %v must be in [0, 0.5]", opt.Sigma)
	}
	space, err := TruthSpace(spec, opt.Cores)
	if err != nil {
		return nil, err
	}
	h := HardwareFor(spec)
	modes := space.Modes()
	var rows []truth.Row
	for _, n := range names {
		w := workloads[n]
		batches := w.BatchSizes()
		if w.Role == truth.Infer && len(opt.Batches) > 0 {
			batches = opt.Batches
		}
		tSigma, pSigma := 0.0, 0.0
		switch opt.Noise {
		case NoiseWorkload:
			tSigma, pSigma = w.NoiseSigma, w.PowerNoiseSigma
		case NoiseSigma:
			tSigma, pSigma = opt.Sigma, opt.Sigma/2
		}
		micros := w.microBatches(opt.MicroSplits)
		for _, m := range modes {
			row := func(b, micro int) {
				size := b
				if micro > 0 {
					size = micro
				}
				tb := w.Time(&h, m, size)
				sec, mw := tb.TotalSec, w.powerOf(&h, m, tb).TotalMW()
				if c := opt.MicroTurnCostRel; micro > 0 && c > 0 {
					whole := w.Time(&h, m, b).TotalSec
					sec = math.Max(sec, whole*(c+(1-c)*float64(micro)/float64(b)))
				}
				if opt.Noise != NoiseNone {
					sec *= NoisyFactor(opt.Rand, tSigma)
					mw *= NoisyFactor(opt.Rand, pSigma)
				}
				rows = append(rows, truth.Row{Workload: w.Name, Role: w.Role, Mode: m, Batch: b, MicroBatch: micro, TimeMS: sec * 1e3, PowerMW: mw})
			}
			for _, b := range batches {
				row(b, 0)
			}
			for _, micro := range micros {
				row(w.Batch, micro)
			}
		}
	}
	return rows, nil
}

// microBatches returns a training workload's micro-batch sizes B_T/k for the splits k
// that divide B_T, largest first; none for inference. One micro-batch turn is the
// workload's time model at B_T/k samples: forward and backward over the micro-batch with
// every per-minibatch cost (kernel launches, weight and gradient traffic, the serial host
// work) paid again per turn. That over-counts the optimizer step, which runs once per
// minibatch, and stands for the turn's hand-over; docs/simulator.md "Micro-batches"
// compares the per-sample cost it gives with real PyTorch.
func (w *Workload) microBatches(splits []int) []int {
	if w.Role != truth.Train {
		return nil
	}
	var out []int
	for _, k := range splits {
		if k >= 2 && w.Batch%k == 0 && !slices.Contains(out, w.Batch/k) {
			out = append(out, w.Batch/k)
		}
	}
	slices.Sort(out)
	slices.Reverse(out)
	return out
}
