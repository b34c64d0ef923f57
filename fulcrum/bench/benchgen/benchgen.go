// Package benchgen generates synthetic ground-truth tables (docs/design.md §8) whose shapes
// differ from the simulator's: other sensitivities to each knob, plateaus, power that is
// not monotone in a knob (static leakage at a voltage floor), smaller spaces. The
// benchmark runs the searchers on them to check that nothing is tuned to one truth.
// The model is deliberately simple and separate from powermode/sim.
package benchgen

import (
	"fmt"
	"hash/fnv"
	"math"
	"slices"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// Workload is a synthetic workload. At the fastest mode a minibatch of Batch samples
// takes BaseMS·(1 + BatchSlope·(Batch−1)) for inference, BaseMS for training. Time
// splits into shares that scale with 1/clock of the GPU, the EMC and the CPU (the rest
// is fixed); the CPU share also scales with NeedCores/cores when fewer cores are online.
type Workload struct {
	Name       string
	Role       truth.Role
	Batches    []int
	BaseMS     float64
	BatchSlope float64 // inference: extra time per extra sample, relative to batch 1
	GPU        float64 // share of time bound by the GPU clock at the fastest mode
	EMC        float64 // share bound by memory bandwidth
	CPU        float64 // share bound by the CPU (clock × cores)
	NeedCores  int     // cores the CPU share can use
	// GPUPlateau: above this fraction of the top GPU clock the GPU share stops
	// shrinking (e.g. a memory stall the clock cannot fix); 0 means none.
	GPUPlateau float64
	Activity   float64 // how hard the workload drives the GPU, 0..1
}

// Board is a synthetic board: its levels and power coefficients (watts at the top
// clock with full use).
type Board struct {
	Name    string
	Levels  powermode.Levels
	StaticW float64 // always on
	CPUW    float64 // all cores busy at the top clock
	GPUW    float64 // GPU busy at the top clock, activity 1
	EMCW    float64 // memory at the top clock, fully used
	// LeakW is GPU leakage that grows as the clock drops below VfloorFrac of the top
	// clock (the voltage stays at its floor while the minibatch runs longer): it makes
	// power non-monotone in the GPU clock.
	LeakW      float64
	VfloorFrac float64
}

// Variant is a board, its workloads, and which share of the grid appears in the table.
type Variant struct {
	Name      string
	Board     Board
	Workloads []Workload
	// Keep is the fraction of grid modes kept (chosen by a hash of the mode, so the
	// table is deterministic); 1 keeps the full grid.
	Keep float64
}

// Generate returns the noise-free table rows of a variant.
func Generate(v Variant) ([]truth.Row, error) {
	sp, err := powermode.NewSpace(v.Board.Levels)
	if err != nil {
		return nil, fmt.Errorf("variant %s: %w", v.Name, err)
	}
	var rows []truth.Row
	for _, m := range sp.Modes() {
		if v.Keep < 1 && hashFrac(m) >= v.Keep {
			continue
		}
		for _, w := range v.Workloads {
			for _, b := range w.Batches {
				t, p := point(&v.Board, &w, m, b)
				rows = append(rows, truth.Row{Workload: w.Name, Role: w.Role, Mode: m, Batch: b, TimeMS: t, PowerMW: p})
			}
		}
	}
	return rows, nil
}

// Table is Generate followed by truth.NewTable.
func Table(v Variant) (*truth.Table, error) {
	rows, err := Generate(v)
	if err != nil {
		return nil, err
	}
	return truth.NewTable(rows)
}

func hashFrac(m powermode.Mode) float64 {
	h := fnv.New64a()
	h.Write([]byte(m.String()))
	return float64(h.Sum64()>>11) / (1 << 53)
}

// point is the model: time in ms and mean board power in mW.
func point(bd *Board, w *Workload, m powermode.Mode, batch int) (float64, float64) {
	l := &bd.Levels
	maxCores := float64(slices.Max(l.Cores))
	cpuRel := float64(m.CPUKHz) / float64(slices.Max(l.CPUKHz))
	gpuRel := float64(m.GPUHz) / float64(slices.Max(l.GPUHz))
	emcRel := float64(m.EMCHz) / float64(slices.Max(l.EMCHz))
	base := w.BaseMS
	if w.Role == truth.Infer {
		base *= 1 + w.BatchSlope*float64(batch-1)
	}
	gpuEff := gpuRel
	if w.GPUPlateau > 0 {
		gpuEff = math.Min(gpuRel/w.GPUPlateau, 1)
	}
	coreFactor := math.Max(1, float64(w.NeedCores)/float64(m.Cores))
	fixed := 1 - w.GPU - w.EMC - w.CPU
	tGPU := base * w.GPU / gpuEff
	tEMC := base * w.EMC / emcRel
	tCPU := base * w.CPU / cpuRel * coreFactor
	total := base*fixed + tGPU + tEMC + tCPU

	gpuUtil := math.Min(1, (tGPU+0.5*tEMC)/total)
	cpuBusyCores := math.Min(float64(m.Cores), float64(min(w.NeedCores, m.Cores))*tCPU/total+1)
	emcUtil := math.Min(1, (tEMC+0.3*tGPU)/total)
	// Dynamic power ∝ f·V², with V rising linearly above a floor: ≈ f^2.5 at high clocks.
	dyn := func(rel float64) float64 { return rel * math.Pow(math.Max(rel, 0.4), 1.5) }
	w1 := bd.StaticW
	w1 += bd.CPUW * cpuBusyCores / maxCores * dyn(cpuRel)
	w1 += 0.15 * bd.CPUW * float64(m.Cores) / maxCores // online cores leak even idle
	w1 += bd.GPUW * w.Activity * gpuUtil * dyn(gpuRel)
	w1 += bd.EMCW * (0.3 + 0.7*emcUtil) * emcRel
	if bd.VfloorFrac > 0 && gpuRel < bd.VfloorFrac {
		w1 += bd.LeakW * (bd.VfloorFrac - gpuRel) / bd.VfloorFrac
	}
	return total, w1 * 1000
}

func orinLevels(coreStep int) powermode.Levels {
	var cores []int
	for c := coreStep; c <= 12; c += coreStep {
		cores = append(cores, c)
	}
	return powermode.Levels{
		Cores: cores,
		CPUKHz: []int64{115200, 192000, 268800, 345600, 422400, 499200, 576000, 652800, 729600, 806400,
			883200, 960000, 1036800, 1113600, 1190400, 1267200, 1344000, 1420800, 1497600, 1574400,
			1651200, 1728000, 1804800, 1881600, 1958400, 2035200, 2112000, 2188800, 2201600},
		GPUHz: []int64{306000000, 408000000, 510000000, 612000000, 714000000, 816000000, 918000000,
			1020000000, 1122000000, 1224000000, 1300500000},
		EMCHz: []int64{204000000, 665600000, 2133000000, 3199000000},
	}
}

func xavierLevels() powermode.Levels {
	return powermode.Levels{
		Cores:  []int{2, 4, 6, 8},
		CPUKHz: []int64{422400, 729600, 1036800, 1344000, 1651200, 1958400, 2265600},
		GPUHz: []int64{114750000, 216750000, 318750000, 420750000, 522750000, 624750000, 675750000,
			828750000, 905250000, 1032750000, 1198500000, 1236750000, 1338750000, 1377000000},
		EMCHz: []int64{204000000, 408000000, 665600000, 800000000, 1065600000, 1331200000, 1600000000, 1866000000, 2133000000},
	}
}

func trainW(name string, baseMS, gpu, emc, cpu float64, need int, plateau, act float64) Workload {
	return Workload{Name: name, Role: truth.Train, Batches: []int{32}, BaseMS: baseMS, GPU: gpu, EMC: emc, CPU: cpu, NeedCores: need, GPUPlateau: plateau, Activity: act}
}

func inferW(name string, baseMS, slope, gpu, emc, cpu float64, need int, plateau, act float64) Workload {
	return Workload{Name: name, Role: truth.Infer, Batches: []int{1, 2, 4, 8, 16, 32}, BaseMS: baseMS, BatchSlope: slope, GPU: gpu, EMC: emc, CPU: cpu, NeedCores: need, GPUPlateau: plateau, Activity: act}
}

// Small is a 4×6×6×3 = 432-mode synthetic board with one training (net-train) and one
// inference workload (net-infer): small enough for tests to check searchers against the
// exhaustive optimum.
func Small() Variant {
	return Variant{
		Name: "small",
		Board: Board{
			Name: "small",
			Levels: powermode.Levels{
				Cores:  []int{2, 4, 6, 8},
				CPUKHz: []int64{400000, 800000, 1200000, 1600000, 2000000, 2200000},
				GPUHz:  []int64{300000000, 500000000, 700000000, 900000000, 1100000000, 1300000000},
				EMCHz:  []int64{665600000, 2133000000, 3199000000},
			},
			StaticW: 6, CPUW: 12, GPUW: 30, EMCW: 6,
		},
		Keep: 1,
		Workloads: []Workload{
			{Name: "net-train", Role: truth.Train, Batches: []int{32}, BaseMS: 100, GPU: 0.7, EMC: 0.15, CPU: 0.1, NeedCores: 4, Activity: 0.9},
			{Name: "net-infer", Role: truth.Infer, Batches: []int{1, 2, 4, 8}, BaseMS: 6, BatchSlope: 0.4, GPU: 0.6, EMC: 0.25, CPU: 0.1, NeedCores: 2, Activity: 0.8},
		},
	}
}

// Variants returns the named variants the robustness benchmark runs. Each has two
// training and two inference workloads of contrasting shape.
func Variants() []Variant {
	orin := Board{Name: "orin-like", Levels: orinLevels(2), StaticW: 7, CPUW: 14, GPUW: 32, EMCW: 6}
	leaky := orin
	leaky.Name, leaky.LeakW, leaky.VfloorFrac = "orin-leaky", 6, 0.5
	xavier := Board{Name: "xavier-like", Levels: xavierLevels(), StaticW: 5, CPUW: 10, GPUW: 20, EMCW: 4, LeakW: 2, VfloorFrac: 0.3}
	return []Variant{
		{Name: "gpu-bound", Board: orin, Keep: 1, Workloads: []Workload{
			trainW("convnet", 100, 0.75, 0.1, 0.05, 4, 0, 0.9),
			trainW("transformer", 180, 0.65, 0.2, 0.05, 2, 0, 1.0),
			inferW("detector", 8, 0.45, 0.7, 0.15, 0.1, 2, 0, 0.8),
			inferW("classifier", 3, 0.3, 0.6, 0.2, 0.15, 1, 0, 0.7),
		}},
		{Name: "memory-bound", Board: orin, Keep: 1, Workloads: []Workload{
			trainW("recsys", 60, 0.2, 0.6, 0.1, 4, 0, 0.5),
			trainW("lstm", 90, 0.35, 0.45, 0.1, 2, 0, 0.6),
			inferW("embedding", 4, 0.2, 0.15, 0.65, 0.1, 1, 0, 0.4),
			inferW("segmenter", 12, 0.5, 0.4, 0.45, 0.05, 2, 0, 0.7),
		}},
		{Name: "cpu-starved", Board: orin, Keep: 1, Workloads: []Workload{
			trainW("augment-heavy", 120, 0.35, 0.1, 0.45, 10, 0, 0.7),
			trainW("audio", 80, 0.3, 0.15, 0.4, 6, 0, 0.6),
			inferW("preproc", 6, 0.35, 0.3, 0.1, 0.5, 4, 0, 0.5),
			inferW("tokenizer", 2, 0.25, 0.35, 0.15, 0.4, 2, 0, 0.6),
		}},
		{Name: "plateau-leaky", Board: leaky, Keep: 0.55, Workloads: []Workload{
			trainW("convnet-plateau", 100, 0.7, 0.15, 0.05, 4, 0.6, 0.9),
			trainW("vit", 150, 0.6, 0.25, 0.05, 2, 0.75, 1.0),
			inferW("detector-plateau", 8, 0.45, 0.65, 0.2, 0.1, 2, 0.55, 0.8),
			inferW("pose", 5, 0.35, 0.5, 0.3, 0.1, 2, 0, 0.7),
		}},
		{Name: "xavier-like", Board: xavier, Keep: 1, Workloads: []Workload{
			trainW("resnet", 220, 0.7, 0.15, 0.1, 4, 0, 0.9),
			trainW("yolo", 300, 0.6, 0.25, 0.1, 3, 0.8, 1.0),
			inferW("mobilenet", 10, 0.3, 0.55, 0.25, 0.15, 2, 0, 0.6),
			inferW("bert", 25, 0.5, 0.65, 0.25, 0.05, 1, 0, 0.9),
		}},
	}
}

// Presets returns nvpmodel-like presets for a variant's board: three below the maximum
// plus MAXN, snapped into its levels. Like NVIDIA's, each is named after its power
// envelope: the highest power any of the variant's workloads draws there, rounded up
// to 5 W (MODE_20W); MAXN has no envelope.
func Presets(v Variant) (names []string, modes []powermode.Mode) {
	l := v.Board.Levels
	pick := func(frac float64, n int) int { return int(math.Round(frac * float64(n-1))) }
	type p struct{ core, cpu, gpu, emc float64 }
	for i, q := range []p{{0.34, 0.45, 0.3, 0.67}, {0.67, 0.75, 0.5, 1}, {1, 0.65, 0.7, 1}, {1, 1, 1, 1}} {
		m := powermode.Mode{
			Cores:  l.Cores[pick(q.core, len(l.Cores))],
			CPUKHz: l.CPUKHz[pick(q.cpu, len(l.CPUKHz))],
			GPUHz:  l.GPUHz[pick(q.gpu, len(l.GPUHz))],
			EMCHz:  l.EMCHz[pick(q.emc, len(l.EMCHz))],
		}
		modes = append(modes, m)
		if i == 3 {
			names = append(names, "MAXN")
			continue
		}
		top := 0.0
		for _, w := range v.Workloads {
			for _, b := range w.Batches {
				_, pw := point(&v.Board, &w, m, b)
				top = math.Max(top, pw)
			}
		}
		names = append(names, fmt.Sprintf("MODE_%dW", 5*int(math.Ceil(top/5000))))
	}
	return names, modes
}
