package powermode

import (
	"context"
	"errors"
	"time"
)

// HeatReading is what the board's heat does to it at one instant: every thermal zone
// (with its trip point), the GPU's load, and the clocks the board really runs next to
// the floor it was set to. Throttled says the firmware holds a clock under that floor
// (docs/board-layer.md "Heat"): the board runs slower than the mode Apply set.
type HeatReading struct {
	At    time.Time     `json:"at"`
	Zones []ThermalZone `json:"zones"`
	// GPULoad is the GPU's busy fraction, 0..1 (the GPU device's load node, per mille;
	// tegrastats' GR3D_FREQ); negative when the node is missing.
	GPULoad float64 `json:"gpu_load"`
	// GPUHz is the GPU clock running now (devfreq cur_freq); GPUFloorHz the lowest the
	// board was set to (min_freq: Apply pins min = max).
	GPUHz      int64 `json:"gpu_hz"`
	GPUFloorHz int64 `json:"gpu_floor_hz"`
	// CPUKHz is the slowest online cluster's running clock (cpuinfo_cur_freq, else
	// scaling_cur_freq); CPUFloorKHz that cluster's scaling_min_freq.
	CPUKHz      int64 `json:"cpu_khz"`
	CPUFloorKHz int64 `json:"cpu_floor_khz"`
	// Throttled: a clock runs under its floor; Why says which, in words.
	Throttled bool   `json:"throttled"`
	Why       string `json:"why,omitempty"`
}

// OverTrip lists the zones at or above their trip point.
func (h HeatReading) OverTrip() []ThermalZone {
	var out []ThermalZone
	for _, z := range h.Zones {
		if z.Err == "" && z.TripC > 0 && z.Celsius >= z.TripC {
			out = append(out, z)
		}
	}
	return out
}

// Hottest is the hottest readable zone (false when none is).
func (h HeatReading) Hottest() (ThermalZone, bool) {
	var best ThermalZone
	ok := false
	for _, z := range h.Zones {
		if z.Err == "" && (!ok || z.Celsius > best.Celsius) {
			best, ok = z, true
		}
	}
	return best, ok
}

// HeatSensor is a backend that can read the board's heat (the tegra backend; NVML has
// no thermal zones or clock floors in this sense).
type HeatSensor interface {
	Heat(ctx context.Context) (HeatReading, error)
}

// ErrNoHeat is what a board without heat sensors answers (NVML, no board).
var ErrNoHeat = errors.New("this board has no thermal zones and clock floors to read")
