// Package cuda loads the CUDA driver library (libcuda.so.1) at run time, with dlopen,
// and runs synthetic GPU work: a compute-bound FMA loop and a memory-bound triad,
// written in PTX and JIT-compiled by the driver. No CUDA toolkit is needed to build,
// and a machine without the driver gets a clear error instead of a link failure.
//
// It is what the GPU synthetic worker (fulcrumctl gpu worker) runs as minibatches, and
// it reads device properties (name, SM count, compute capability, memory, integrated
// flag) where NVML is missing, e.g. on Jetsons.
//
// The loader needs cgo (dlopen/dlsym and C trampolines to call the function pointers).
// Built with CGO_ENABLED=0, Load returns ErrNoCgo.
package cuda

import (
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// DefaultLibrary is the CUDA driver library Load opens by default.
const DefaultLibrary = "libcuda.so.1"

// ErrNoCgo is what Load returns in a build without cgo.
var ErrNoCgo = errors.New("cuda: built without cgo: CUDA unavailable (rebuild with CGO_ENABLED=1 and a C compiler)")

// ErrNotInitialized is returned by every call made before Init succeeded.
var ErrNotInitialized = errors.New("cuda: driver not initialised: call Init first")

// Options configure Load.
type Options struct {
	// LibraryPath is the driver library to dlopen; default DefaultLibrary.
	LibraryPath string
}

// DeviceProps are a CUDA device's properties.
type DeviceProps struct {
	Index        int    `json:"index"`
	Name         string `json:"name"`
	SMCount      int    `json:"sm_count"` // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	ComputeMajor int    `json:"compute_major"`
	ComputeMinor int    `json:"compute_minor"`
	TotalMemB    uint64 `json:"total_mem_bytes"`
	Integrated   bool   `json:"integrated"` // a Jetson's iGPU shares memory with the CPU
	ClockKHz     int    `json:"clock_khz"`  // CU_DEVICE_ATTRIBUTE_CLOCK_RATE (peak)
}

// SM is the compute capability as "sm_87".
func (p DeviceProps) SM() string { return fmt.Sprintf("sm_%d%d", p.ComputeMajor, p.ComputeMinor) }

// BurnerOptions tune NewBurner; the zero value is fine.
type BurnerOptions struct {
	// UnitMS is the calibration target for one launch (default 1 ms): short enough to
	// end a minibatch close to its target, long enough that launch overhead is small.
	UnitMS float64
	// Now is the monotonic clock used to time launches; default time.Now.
	Now func() time.Time
}

// Kernel names a synthetic kernel.
type Kernel string

// The synthetic kernels.
const (
	// Compute is fma_burn: a register-resident FMA loop, bound by the SM clock.
	Compute Kernel = "compute"
	// Memory is triad: a[i] = b[i] + s*c[i], bound by memory bandwidth (EMC clock).
	Memory Kernel = "memory"
)

// ParseKernel accepts "compute" or "memory".
func ParseKernel(s string) (Kernel, error) {
	switch Kernel(s) {
	case Compute, Memory:
		return Kernel(s), nil
	}
	return "", fmt.Errorf("cuda: unknown kernel %q: want compute or memory", s)
}

// entry is the PTX entry point of a kernel.
func (k Kernel) entry() string {
	if k == Memory {
		return "triad"
	}
	return "fma_burn"
}

// PTX is the module text of the synthetic kernels.
//
//go:embed kernels.ptx
var PTX string

var entryRE = regexp.MustCompile(`(?m)^\s*\.visible\s+\.entry\s+([A-Za-z_][A-Za-z0-9_$]*)\s*\(`)

// PTXEntries lists the .entry names of a PTX module text, in order.
func PTXEntries(ptx string) []string {
	var out []string
	for _, m := range entryRE.FindAllStringSubmatch(ptx, -1) {
		out = append(out, m[1])
	}
	return out
}

// CheckPTX does the structural checks possible without a driver: a .version, a
// .target, an .address_size 64, balanced braces, and every kernel's entry present.
func CheckPTX(ptx string) error {
	for _, d := range []string{".version ", ".target ", ".address_size 64"} {
		if !strings.Contains(ptx, d) {
			return fmt.Errorf("cuda: PTX lacks a %q directive", strings.TrimSpace(d))
		}
	}
	depth := 0
	for i, line := range strings.Split(ptx, "\n") {
		if j := strings.Index(line, "//"); j >= 0 {
			line = line[:j]
		}
		depth += strings.Count(line, "{") - strings.Count(line, "}")
		if depth < 0 {
			return fmt.Errorf("cuda: PTX line %d: unbalanced }", i+1)
		}
	}
	if depth != 0 {
		return errors.New("cuda: PTX has unbalanced braces")
	}
	if err := checkRegisters(ptx); err != nil {
		return err
	}
	entries := PTXEntries(ptx)
	for _, k := range []Kernel{Compute, Memory} {
		found := false
		for _, e := range entries {
			found = found || e == k.entry()
		}
		if !found {
			return fmt.Errorf("cuda: PTX has no entry %s for the %s kernel", k.entry(), k)
		}
	}
	return nil
}

var (
	regDeclRE = regexp.MustCompile(`\.reg\s+\.\w+\s+%(\w+?)<(\d+)>`)
	regUseRE  = regexp.MustCompile(`%([a-z]+)(\d+)\b`)
)

// checkRegisters checks, entry by entry, that every numbered register used (%f3) was
// declared by a .reg %f<N> with N > 3: the commonest slip in hand-written PTX, which
// only the driver's JIT would otherwise report.
func checkRegisters(ptx string) error {
	for _, body := range strings.Split(ptx, ".entry")[1:] {
		decl := map[string]int{}
		for _, m := range regDeclRE.FindAllStringSubmatch(body, -1) {
			decl[m[1]], _ = strconv.Atoi(m[2])
		}
		for _, line := range strings.Split(body, "\n") {
			if j := strings.Index(line, "//"); j >= 0 {
				line = line[:j]
			}
			if strings.Contains(line, ".reg") {
				continue
			}
			for _, m := range regUseRE.FindAllStringSubmatch(line, -1) {
				n, _ := strconv.Atoi(m[2])
				limit, ok := decl[m[1]]
				if !ok || n >= limit {
					return fmt.Errorf("cuda: PTX uses %%%s%s without a .reg declaring it: %s", m[1], m[2], strings.TrimSpace(line))
				}
			}
		}
	}
	return nil
}

// Error is a failed driver call.
type Error struct {
	Call string
	Code int
	Name string // e.g. CUDA_ERROR_NO_DEVICE
	Desc string
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("cuda: %s: %s", e.Call, e.Name)
	if e.Desc != "" {
		msg += " (" + e.Desc + ")"
	}
	switch e.Code {
	case 100: // CUDA_ERROR_NO_DEVICE
		msg += ": no CUDA-capable GPU is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)"
	case 35: // CUDA_ERROR_INSUFFICIENT_DRIVER
		msg += ": the driver is older than this GPU needs; update it"
	}
	return msg
}
