package api

import "time"

// Heat is the board's heat as GET /v1/status reports it: every thermal zone against its
// trip point, the GPU's load, and the clocks the board runs against the floor it was
// set to. Throttled says the firmware holds a clock under that floor.
type Heat struct {
	At    time.Time     `json:"at"`
	Zones []ThermalZone `json:"zones"`
	// GPULoad is the GPU's busy fraction 0..1 (tegrastats' GR3D_FREQ); nil when the
	// board has no load node.
	GPULoad     *float64 `json:"gpu_load,omitempty"`
	GPUHz       int64    `json:"gpu_hz"`        // running (cur_freq)
	GPUFloorHz  int64    `json:"gpu_floor_hz"`  // set (min_freq)
	CPUKHz      int64    `json:"cpu_khz"`       // the slowest online cluster, running
	CPUFloorKHz int64    `json:"cpu_floor_khz"` // that cluster's scaling_min_freq
	Throttled   bool     `json:"throttled"`
	// ThrottleReason says which clock runs under its floor; ThrottledSince when this
	// spell of throttling began (nil when not throttled).
	ThrottleReason string     `json:"throttle_reason,omitempty"`
	ThrottledSince *time.Time `json:"throttled_since,omitempty"`
	// CapGPUHz and CapCPUKHz are the thermal cap the plan keeps under: the clocks the
	// board ran while it throttled (0: no cap; docs/design.md §9).
	CapGPUHz  int64 `json:"cap_gpu_hz,omitempty"`
	CapCPUKHz int64 `json:"cap_cpu_khz,omitempty"`
}

// ThermalZone is one thermal zone: its temperature and its passive trip point (0: none);
// Error is set for a zone that could not be read (cv* zones while their engines are off).
type ThermalZone struct {
	Zone    string  `json:"zone"`
	Celsius float64 `json:"celsius"`
	TripC   float64 `json:"trip_c,omitempty"`
	Error   string  `json:"error,omitempty"`
}
