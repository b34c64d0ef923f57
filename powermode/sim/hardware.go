package sim

import (
	"math"
	"slices"
	"strings"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Hardware is what the workload model needs to know about a board beyond its catalog
// entry: how much GPU and memory a clock cycle buys, and what power it costs. Sizing
// (CUDA cores, bus width, base power) is per module; voltage curves and energy
// coefficients are per SoC, because modules of one SoC share the silicon.
//
// Numbers are estimates from public datasheets and teardown-level measurements
// (NVIDIA Jetson module datasheets for core counts and bus widths; tegrastats/jtop
// readings people publish for power); docs/simulator.md lists them.
type Hardware struct {
	Name string // what the board was matched as, e.g. "agx-orin-64gb (p3701-0005)"

	GPUCores      int     // CUDA cores (FP32 lanes): peak FP32 FLOP/s = 2 × cores × f
	MemBytesPerHz float64 // DRAM bytes per EMC clock: bus bytes × transfers per EMC clock
	MemEfficiency float64 // achievable fraction of the DRAM peak for DNN kernels
	CPUPerf       float64 // per-core speed per Hz relative to a Cortex-A78AE

	// Absolute voltage-frequency curves of the SoC (same silicon on every module).
	CPUVolt VoltCurve
	GPUVolt VoltCurve

	BaseMW        float64 // always-on power: carrier board, 5 V system rail, SoC always-on domains
	SoCMWPerGHz   float64 // SoC fabric/memory-controller power per GHz of EMC clock (background)
	DRAMMWPerGBps float64 // DRAM I/O energy: mW per GB/s of traffic
	DRAMIdleMW    float64 // DRAM self-refresh/standby power
	CPUDynMW      float64 // one fully busy core at 1 GHz and 1 V
	CPULeakMW     float64 // one online core at 1 V (leakage + clock tree, pinned clocks)
	CPUIdleUtil   float64 // background utilisation of one online core (OS, daemons)
	GPUDynMW      float64 // one CUDA core fully busy at 1 GHz and 1 V, activity 1
	GPULeakMW     float64 // whole GPU at 1 V, clocked but idle
}

// VoltCurve is a supply voltage as a function of frequency: MinV up to LowHz, rising as
// ((f−LowHz)/(HighHz−LowHz))^Exp to MaxV at HighHz, flat above. DVFS tables of Tegra
// parts look like this: a floor at low clocks, then a convex rise.
type VoltCurve struct {
	MinV, MaxV    float64
	LowHz, HighHz float64
	Exp           float64
}

// V is the voltage at f hertz.
func (c VoltCurve) V(hz float64) float64 {
	x := (hz - c.LowHz) / (c.HighHz - c.LowHz)
	x = math.Min(math.Max(x, 0), 1)
	return c.MinV + (c.MaxV-c.MinV)*math.Pow(x, c.Exp)
}

// tegra234 (Orin) silicon: CPU Cortex-A78AE, GPU Ampere ga10b. Voltages are estimates:
// the CPU rail runs ~0.6 V at low clocks and ~1.0 V at 2.2 GHz; the GPU ~0.6 V at
// 306 MHz and ~1.0 V at 1.3 GHz.
func tegra234() Hardware {
	return Hardware{
		MemEfficiency: 0.75,
		CPUPerf:       1.0,
		CPUVolt:       VoltCurve{MinV: 0.60, MaxV: 1.00, LowHz: 0.6e9, HighHz: 2.2016e9, Exp: 1.4},
		GPUVolt:       VoltCurve{MinV: 0.65, MaxV: 1.00, LowHz: 0.3e9, HighHz: 1.3005e9, Exp: 1.6},
		SoCMWPerGHz:   400,
		DRAMMWPerGBps: 28,
		DRAMIdleMW:    250,
		CPUDynMW:      780, // A78AE ~1.7 W per busy core at 2.2 GHz, 1 V
		CPULeakMW:     115,
		CPUIdleUtil:   0.03,
		GPUDynMW:      13.5, // 2048 cores at 1.3 GHz, 1 V → ~36 W fully busy at activity 1
		GPULeakMW:     1100,
	}
}

// tegra194 (Xavier) silicon: Carmel CPU, Volta gv11b GPU.
func tegra194() Hardware {
	return Hardware{
		MemEfficiency: 0.70,
		CPUPerf:       0.75,
		CPUVolt:       VoltCurve{MinV: 0.62, MaxV: 1.05, LowHz: 0.6e9, HighHz: 2.2656e9, Exp: 1.4},
		GPUVolt:       VoltCurve{MinV: 0.62, MaxV: 1.05, LowHz: 0.3e9, HighHz: 1.377e9, Exp: 1.5},
		SoCMWPerGHz:   400,
		DRAMMWPerGBps: 35,
		DRAMIdleMW:    300,
		CPUDynMW:      900,
		CPULeakMW:     220,
		CPUIdleUtil:   0.03,
		GPUDynMW:      28, // 512 cores at 1.377 GHz, 1.05 V → ~22 W fully busy
		GPULeakMW:     1500,
	}
}

// HardwareFor returns the hardware profile of a catalog board: matched by module part
// number, then by SoC, then derived from the spec with Orin silicon (so a newly added
// catalog board always simulates, if roughly).
func HardwareFor(spec *powermode.BoardSpec) Hardware {
	type sizing struct {
		name      string
		modules   []string
		gpuCores  int
		busBytes  float64 // bytes per EMC clock
		baseMW    float64
		xavierSoC bool
	}
	// Module datasheets: CUDA cores and DRAM bus width (LPDDR5: 2 transfers per EMC
	// clock as the BPMP reports it, so 256-bit → 64 bytes per EMC Hz).
	known := []sizing{
		{"agx-orin-64gb", []string{"p3701-0005", "p3701-0000"}, 2048, 64, 5600, false},
		{"agx-orin-32gb", []string{"p3701-0004"}, 1792, 64, 5400, false},
		{"orin-nx-16gb", []string{"p3767-0000"}, 1024, 32, 3600, false},
		{"orin-nx-8gb", []string{"p3767-0001"}, 1024, 32, 3500, false},
		{"orin-nano-8gb", []string{"p3767-0003", "p3767-0005"}, 1024, 32, 3000, false},
		{"orin-nano-4gb", []string{"p3767-0004"}, 512, 16, 2800, false},
		{"agx-xavier", []string{"p2888-0001", "p2888-0004", "p2888-0005", "p2888"}, 512, 64, 5500, true},
		// Xavier NX: 384 Volta cores, 128-bit LPDDR4x (half the AGX Xavier's bus).
		{"xavier-nx", []string{"p3668-0000", "p3668-0001", "p3668-0003"}, 384, 32, 3500, true},
	}
	for _, k := range known {
		for _, m := range spec.Modules {
			if slices.Contains(k.modules, m) || (k.xavierSoC && strings.HasPrefix(m, "p2888")) {
				h := tegra234()
				if k.xavierSoC {
					h = tegra194()
				}
				h.Name = k.name + " (" + m + ")"
				h.GPUCores, h.MemBytesPerHz, h.BaseMW = k.gpuCores, k.busBytes, k.baseMW
				return h
			}
		}
	}
	// Unknown module: derive the size from the catalog entry. The GPU is assumed to
	// scale with its top clock (bigger parts clock higher), the bus with the core count.
	h := tegra234()
	if spec.SoC == "tegra194" {
		h = tegra194()
	}
	h.Name = spec.Name + " (derived from " + spec.SoC + ")"
	topGHz := float64(slices.Max(append([]int64{1}, spec.GPU.FreqsHz...))) / 1e9
	h.GPUCores = 1024
	if topGHz > 1.0 {
		h.GPUCores = 2048
	}
	h.MemBytesPerHz = 32
	h.BaseMW = 3500
	if spec.CPU.Cores >= 8 {
		h.MemBytesPerHz = 64
		h.BaseMW = 6000
	}
	return h
}
