package sim

import (
	"math"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Model constants shared by every workload (docs/simulator.md explains each).
const (
	refCPUHz = 2.2016e9 // the reference core clock host work is measured at (A78AE, MAXN)
	refEMCHz = 3.199e9  // the EMC clock at which host work has no memory slowdown
	// cpuMemSensitivity is how much a slower EMC slows host code: time × (1 + s·(ref/f − 1)).
	cpuMemSensitivity = 0.02
	// kernelGPUSec is the device-side floor of one kernel (launch latency, tail wave) at
	// kernelRefHz; it shrinks with the square root of the GPU clock.
	kernelGPUSec = 2e-6
	kernelRefHz  = 1.3005e9
	// Smooth-max exponents: how sharply overlapped stages hide each other. A p-norm of
	// 2 for compute vs memory traffic (kernels are a mix of both), steeper for stages
	// that really run in parallel (host launch queue vs device, loader vs step).
	pGPU    = 2.0
	pLaunch = 6.0
	pData   = 4.0
	// sysShareOfBase is the part of the always-on power that shows on the system 5 V
	// rail; the rest is SoC always-on domains.
	sysShareOfBase = 0.8
)

// TimeBreakdown is the time model's terms for one minibatch, in seconds.
type TimeBreakdown struct {
	ComputeSec float64 // GPU arithmetic at the GPU clock (incl. per-kernel floor)
	MemorySec  float64 // DRAM traffic at the EMC bandwidth
	GPUSec     float64 // device busy time: smooth max of compute and memory
	LaunchSec  float64 // host launch queue (one thread)
	DataSec    float64 // input work: per loader worker if prefetched, else inline
	DataCPUSec float64 // input work in core-seconds
	SerialSec  float64 // host work nothing overlaps
	TotalSec   float64
	TrafficGB  float64 // DRAM traffic of the minibatch
}

// PowerBreakdown is mean board power while something runs (or idles), by component.
// Rails are assembled from these (see rails.go).
type PowerBreakdown struct {
	SysMW  float64 // carrier board, 5 V system rail
	SoCMW  float64 // SoC always-on, fabric, memory controller
	CPUMW  float64
	GPUMW  float64
	DRAMMW float64
	// GPULoad is the GPU busy fraction 0..1 (what devfreq's load/1000 reports).
	GPULoad float64
	// CPUBusy is busy core-equivalents (for the thermal model and logs).
	CPUBusy float64
}

// TotalMW sums the components.
func (p PowerBreakdown) TotalMW() float64 { return p.SysMW + p.SoCMW + p.CPUMW + p.GPUMW + p.DRAMMW }

func smax(a, b, p float64) float64 {
	if a <= 0 {
		return b
	}
	if b <= 0 {
		return a
	}
	// Scale first so the powers cannot overflow.
	m := math.Max(a, b)
	return m * math.Pow(math.Pow(a/m, p)+math.Pow(b/m, p), 1/p)
}

// cpuSpeed is host throughput relative to the reference core at refCPUHz.
func cpuSpeed(h *Hardware, m powermode.Mode) float64 {
	s := h.CPUPerf * float64(m.CPUKHz) * 1e3 / refCPUHz
	return s / (1 + cpuMemSensitivity*math.Max(refEMCHz/float64(m.EMCHz)-1, 0))
}

// Time returns the time model's terms at mode m and the given batch size on hardware h.
func (w *Workload) Time(h *Hardware, m powermode.Mode, batch int) TimeBreakdown {
	var t TimeBreakdown
	b := float64(batch)
	gpuHz := float64(m.GPUHz)
	peakFLOPS := 2 * float64(h.GPUCores) * gpuHz
	t.ComputeSec = (w.GPU.GFLOPFixed+w.GPU.GFLOPPerSample*b)*1e9/(w.GPU.Efficiency*peakFLOPS) +
		w.Host.Kernels*kernelGPUSec*math.Sqrt(kernelRefHz/gpuHz)
	bwBps := h.MemBytesPerHz * float64(m.EMCHz) * h.MemEfficiency
	t.TrafficGB = (w.GPU.MBFixed + w.GPU.MBPerSample*b) / 1e3
	t.MemorySec = t.TrafficGB * 1e9 / bwBps
	t.GPUSec = smax(t.ComputeSec, t.MemorySec, pGPU)

	s := cpuSpeed(h, m)
	t.LaunchSec = w.Host.Kernels * w.Host.LaunchUS * 1e-6 / s
	t.SerialSec = w.Host.SerialMS * 1e-3 / s
	t.DataCPUSec = w.Host.DataMSPerSample * b * 1e-3 / s
	step := smax(t.LaunchSec, t.GPUSec, pLaunch)
	switch {
	case w.Host.Prefetch && m.Cores >= 2:
		// Loader workers on every core but the main thread's, overlapped with the step.
		t.DataSec = t.DataCPUSec / float64(m.Cores-1)
		step = smax(t.DataSec, step, pData)
	default:
		// Inline, or one core shared by the main thread and the loader: no overlap.
		t.DataSec = t.DataCPUSec
		step += t.DataSec
	}
	t.TotalSec = step + t.SerialSec
	return t
}

// TimeMS is the mean minibatch time in milliseconds at mode m and batch size batch on
// the board spec (noise-free).
func (w *Workload) TimeMS(spec *powermode.BoardSpec, m powermode.Mode, batch int) float64 {
	h := HardwareFor(spec)
	return w.Time(&h, m, batch).TotalSec * 1e3
}

// PowerMW is the mean total board power in milliwatts while the workload runs at mode m
// and batch size batch (noise-free).
func (w *Workload) PowerMW(spec *powermode.BoardSpec, m powermode.Mode, batch int) float64 {
	h := HardwareFor(spec)
	return w.Power(&h, m, batch).TotalMW()
}

// Power returns the power model's components while the workload runs.
func (w *Workload) Power(h *Hardware, m powermode.Mode, batch int) PowerBreakdown {
	return w.powerOf(h, m, w.Time(h, m, batch))
}

// powerOf is Power given the minibatch's time terms at m.
func (w *Workload) powerOf(h *Hardware, m powermode.Mode, t TimeBreakdown) PowerBreakdown {
	// The main thread is busy launching, in serial host work and spin-waiting on the
	// GPU (CUDA spins when cores outnumber contexts); it blocks only when it waits for
	// the data loader.
	mainBusy := math.Min(1, (smax(t.LaunchSec, t.GPUSec, pLaunch)+t.SerialSec)/t.TotalSec)
	if !w.Host.Prefetch || m.Cores < 2 {
		mainBusy = 1
	}
	loaders := 0.0
	if w.Host.Prefetch && m.Cores >= 2 {
		loaders = t.DataCPUSec / t.TotalSec
	}
	busy := math.Min(mainBusy+loaders, float64(m.Cores))

	// Compute-bound kernels switch more logic than ones stalled on memory.
	computeShare := t.ComputeSec / (t.ComputeSec + t.MemorySec)
	activity := w.GPU.Activity * (0.35 + 0.65*computeShare)
	return h.power(m, busy, t.GPUSec/t.TotalSec, activity, t.TrafficGB/t.TotalSec)
}

// IdlePower is the board's power at mode m with nothing running. Pass the clocks the
// idle board really sits at (for an unpinned GPU, devfreq's min_freq).
func IdlePower(h *Hardware, m powermode.Mode) PowerBreakdown {
	return h.power(m, 0, 0, 0, 0)
}

// power assembles the components: busy CPU core-equivalents, GPU busy fraction and
// switching activity, DRAM traffic in GB/s.
func (h *Hardware) power(m powermode.Mode, cpuBusy, gpuLoad, gpuActivity, trafficGBps float64) PowerBreakdown {
	cores := float64(m.Cores)
	cpuGHz := float64(m.CPUKHz) / 1e6
	vc := h.CPUVolt.V(float64(m.CPUKHz) * 1e3)
	gpuGHz := float64(m.GPUHz) / 1e9
	vg := h.GPUVolt.V(float64(m.GPUHz))
	emcGHz := float64(m.EMCHz) / 1e9

	busy := math.Min(cpuBusy+cores*h.CPUIdleUtil, cores)
	var p PowerBreakdown
	p.SysMW = h.BaseMW * sysShareOfBase
	p.SoCMW = h.BaseMW*(1-sysShareOfBase) + h.SoCMWPerGHz*emcGHz
	p.CPUMW = cores*h.CPULeakMW*vc*vc + busy*h.CPUDynMW*cpuGHz*vc*vc
	p.GPUMW = h.GPULeakMW*vg*vg + gpuLoad*float64(h.GPUCores)*h.GPUDynMW*gpuGHz*vg*vg*gpuActivity
	p.DRAMMW = h.DRAMIdleMW + h.DRAMMWPerGBps*trafficGBps
	p.GPULoad = gpuLoad
	p.CPUBusy = busy
	return p
}
