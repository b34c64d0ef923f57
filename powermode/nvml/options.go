// Package nvml is the board backend for discrete NVIDIA GPUs, through NVML (go-nvml).
//
// A discrete GPU's power mode has two knobs NVML can drive: the graphics clock and the
// memory clock, both pinned with locked clocks (nvmlDeviceSetGpuLockedClocks /
// nvmlDeviceSetMemoryLockedClocks), plus the board power limit. The host's CPUs are not
// this backend's business: a Mode's cores and cpu_khz each have one level (the host's
// online CPU count and its maximum frequency) and are never changed.
//
// The backend is read-only unless Options.ClockControl is set: Apply then refuses with
// an error that says how to enable it. Whatever it changed is put back by Restore (or
// Close): locked clocks reset, the power limit set to what it was.
//
// go-nvml needs cgo. Built with CGO_ENABLED=0, Open returns ErrNoCgo, so cross builds
// without cgo still compile.
package nvml

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// BackendName is the Snapshot.Backend value of snapshots this package takes.
const BackendName = "nvml"

// DefaultLibrary is the NVML library go-nvml loads at Init.
const DefaultLibrary = "libnvidia-ml.so.1"

// UncontrolledCPUKHz is the cpu_khz level used when the host's maximum CPU frequency
// cannot be read (no cpufreq, e.g. many VMs). The backend never sets it either way;
// Mode.Human shows it as "cpu host".
const UncontrolledCPUKHz = 1

// ErrNoCgo is what Open returns in a build without cgo.
var ErrNoCgo = errors.New("nvml: built without cgo: NVML unavailable (rebuild with CGO_ENABLED=1 and a C compiler)")

// EnableHint says how an operator turns on clock control; Apply's refusal carries it.
const EnableHint = "clock control is off (read-only backend): set nvml.clock_control: true in fulcrum.yaml " +
	"(Options.ClockControl) and run as root to let Fulcrum lock GPU and memory clocks"

// Options configure Open. The zero value opens GPU 0 read-only. The mapstructure tags
// are fulcrumd's configuration keys (its nvml section).
type Options struct {
	// LibraryPath is the NVML library to load; default DefaultLibrary.
	LibraryPath string `mapstructure:"library"`
	// Device is the NVML index of the GPU to drive (nvidia-smi's index).
	Device int `mapstructure:"device"`
	// ClockControl lets Apply lock clocks and SetPowerLimit change the power limit.
	// Off by default: the backend then only reads.
	ClockControl bool `mapstructure:"clock_control"`
	// Root is the filesystem root for the host's cpufreq files (default "/").
	Root string
	// Now timestamps readings and snapshots; default time.Now.
	Now func() time.Time
	// Logger receives discovery notes; default slog.Default().
	Logger *slog.Logger
}

// hostCPUKHz reads the host's highest cpuinfo_max_freq under root, or returns
// UncontrolledCPUKHz when no CPU has one. It only labels modes: nothing writes it.
func hostCPUKHz(root string) int64 {
	files, _ := filepath.Glob(filepath.Join(root, "sys/devices/system/cpu/cpu[0-9]*/cpufreq/cpuinfo_max_freq"))
	var best int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && v > best {
			best = v
		}
	}
	if best <= 0 {
		return UncontrolledCPUKHz
	}
	return best
}
