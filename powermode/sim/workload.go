// Package sim is the simulated Jetson board: workload models (minibatch time and board
// power as functions of the power mode and batch size), ground-truth tables generated
// from them, a physics loop that keeps a fake sysfs tree's sensor files current, and a
// runner that executes a minibatch against the frequencies written in that tree.
// docs/simulator.md describes the model and its calibration.
package sim

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/fulcrum-edge/fulcrum/configs"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// Workload is one DNN workload's parametric model (configs/workloads/*.yaml). Work is
// expressed in physical quantities (GFLOP, MB of DRAM traffic, kernel launches, CPU
// milliseconds) so one set of parameters serves every board; Hardware turns them into
// seconds and watts.
type Workload struct {
	Name        string     `yaml:"name"`
	Role        truth.Role `yaml:"role"`
	Description string     `yaml:"description"`
	Character   string     `yaml:"character"` // compute-bound, memory-bound, data-loader-bound, launch-bound (documentation)
	// Batch is the training minibatch size B_T (train only).
	Batch int `yaml:"batch"`
	// Batches are the inference batch sizes a ground-truth table lists (infer only).
	Batches []int `yaml:"batches"`

	GPU  GPUWork  `yaml:"gpu"`
	Host HostWork `yaml:"host"`

	// NoiseSigma is the run-to-run spread of the minibatch time (log-normal sigma,
	// e.g. 0.03 = 3%); PowerNoiseSigma that of its mean power.
	NoiseSigma      float64 `yaml:"noise_sigma"`
	PowerNoiseSigma float64 `yaml:"power_noise_sigma"`
}

// GPUWork is the device side of one minibatch: fixed + per-sample amounts.
type GPUWork struct {
	GFLOPFixed     float64 `yaml:"gflop_fixed"`
	GFLOPPerSample float64 `yaml:"gflop_per_sample"`
	// Efficiency is the fraction of the FP32 CUDA-core peak (2 FLOP × cores × f) the
	// kernels reach when compute-bound. Above 1 means tensor cores (FP16/TF32).
	Efficiency  float64 `yaml:"efficiency"`
	MBFixed     float64 `yaml:"mb_fixed"`      // DRAM traffic per minibatch: weights, gradients, optimizer state
	MBPerSample float64 `yaml:"mb_per_sample"` // DRAM traffic per sample: activations
	// Activity scales GPU switching power when compute-bound (dense tensor-core GEMMs
	// ≈ 1; depthwise/elementwise-heavy nets less).
	Activity float64 `yaml:"activity"`
}

// HostWork is the CPU side of one minibatch, in milliseconds of one Cortex-A78AE core
// at 2.2 GHz (the reference core).
type HostWork struct {
	Kernels  float64 `yaml:"kernels"`   // kernel launches (framework ops) per minibatch
	LaunchUS float64 `yaml:"launch_us"` // host cost per launch: Python + dispatcher + driver
	SerialMS float64 `yaml:"serial_ms"` // per-minibatch host work that nothing overlaps (sync, bookkeeping)
	// DataMSPerSample is per-sample input work (decode, augmentation, collation, or
	// pre/post-processing for inference).
	DataMSPerSample float64 `yaml:"data_ms_per_sample"`
	// Prefetch says the input work runs in data-loader workers on the other online cores,
	// overlapped with the GPU (training loaders); otherwise it runs inline on the main
	// thread before/after the forward pass (inference pre/post-processing).
	Prefetch bool `yaml:"prefetch"`
}

// BatchSizes returns the batch sizes of the workload: {B_T} for training, the inference
// list otherwise.
func (w *Workload) BatchSizes() []int {
	if w.Role == truth.Train {
		return []int{w.Batch}
	}
	return slices.Clone(w.Batches)
}

// Validate reports a workload file's mistakes.
func (w *Workload) Validate() error {
	var errs []string
	add := func(f string, a ...any) { errs = append(errs, fmt.Sprintf(f, a...)) }
	if w.Name == "" {
		add("name is empty")
	}
	switch w.Role {
	case truth.Train:
		if w.Batch < 1 {
			add("batch (B_T) must be at least 1 for a training workload")
		}
	case truth.Infer:
		if len(w.Batches) == 0 {
			add("batches must list the inference batch sizes")
		}
		for _, b := range w.Batches {
			if b < 1 {
				add("batches: %d is not a positive batch size", b)
			}
		}
	default:
		add("role %q must be train or infer", w.Role)
	}
	nonNeg := map[string]float64{
		"gpu.gflop_fixed": w.GPU.GFLOPFixed, "gpu.gflop_per_sample": w.GPU.GFLOPPerSample,
		"gpu.mb_fixed": w.GPU.MBFixed, "gpu.mb_per_sample": w.GPU.MBPerSample,
		"host.kernels": w.Host.Kernels, "host.launch_us": w.Host.LaunchUS,
		"host.serial_ms": w.Host.SerialMS, "host.data_ms_per_sample": w.Host.DataMSPerSample,
		"noise_sigma": w.NoiseSigma, "power_noise_sigma": w.PowerNoiseSigma,
	}
	for _, k := range slices.Sorted(maps.Keys(nonNeg)) {
		if v := nonNeg[k]; v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			add("%s = %v must be a non-negative number", k, v)
		}
	}
	if w.GPU.Efficiency <= 0 {
		add("gpu.efficiency must be positive")
	}
	if w.GPU.Activity <= 0 || w.GPU.Activity > 2 {
		add("gpu.activity must be in (0, 2]")
	}
	if w.GPU.GFLOPFixed+w.GPU.GFLOPPerSample <= 0 {
		add("gpu: a workload needs some GFLOP")
	}
	if w.NoiseSigma > 0.5 || w.PowerNoiseSigma > 0.5 {
		add("noise sigmas above 0.5 are not a plausible run-to-run spread")
	}
	if len(errs) > 0 {
		return fmt.Errorf("workload %q: %s", w.Name, strings.Join(errs, "; "))
	}
	return nil
}

// LoadWorkloads reads every *.yaml in dir of fsys (configs.FS's "workloads", usually),
// keyed by workload name. Unknown fields are errors, so a typo cannot silently zero a
// parameter.
func LoadWorkloads(fsys fs.FS, dir string) (map[string]*Workload, error) {
	out := map[string]*Workload{}
	err := configs.DecodeDir(fsys, dir, func(p string, w *Workload) error {
		if err := w.Validate(); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if _, dup := out[w.Name]; dup {
			return fmt.Errorf("%s: workload %q defined twice", p, w.Name)
		}
		out[w.Name] = w
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("workload models: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("workload models: no *.yaml in " + dir)
	}
	return out, nil
}

// Noisy returns v times a log-normal factor with the workload's time sigma and mean 1,
// drawn from rng: one run's measurement of a quantity whose mean is v.
func (w *Workload) Noisy(rng *rand.Rand, v float64) float64 {
	return NoisyFactor(rng, w.NoiseSigma) * v
}

// NoisyPower is Noisy with the power sigma.
func (w *Workload) NoisyPower(rng *rand.Rand, v float64) float64 {
	return NoisyFactor(rng, w.PowerNoiseSigma) * v
}

// NoisyFactor is a log-normal factor with the given sigma and mean exactly 1.
func NoisyFactor(rng *rand.Rand, sigma float64) float64 {
	if sigma <= 0 {
		return 1
	}
	return math.Exp(sigma*rng.NormFloat64() - sigma*sigma/2)
}
