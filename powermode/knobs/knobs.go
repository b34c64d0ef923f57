// Package knobs is a power mode as a plain value — online cores and the pinned CPU, GPU
// and memory clocks — with its stable text form. It imports only the standard library so
// that the control API's wire types (fulcrum/api) can carry a mode without linking the
// board catalog; powermode.Mode is this type.
package knobs

import (
	"fmt"
	"strconv"
	"strings"
)

// Mode is one power mode: how many CPU cores are online and the pinned CPU, GPU and
// memory (EMC) frequencies. Frequencies carry their unit in the name because the kernel
// uses kHz for cpufreq and Hz for devfreq and the BPMP clocks.
type Mode struct {
	Cores  int   `json:"cores" yaml:"cores"`
	CPUKHz int64 `json:"cpu_khz" yaml:"cpu_khz"`
	GPUHz  int64 `json:"gpu_hz" yaml:"gpu_hz"`
	EMCHz  int64 `json:"emc_hz" yaml:"emc_hz"`
}

// String is the stable text form of a mode: "cores/cpu_khz/gpu_hz/emc_hz", decimal
// integers separated by slashes. It is used as a database key and in CSV/JSON, so it
// must never change; ParseMode reverses it.
func (m Mode) String() string {
	return fmt.Sprintf("%d/%d/%d/%d", m.Cores, m.CPUKHz, m.GPUHz, m.EMCHz)
}

// Human is a short readable form for logs and tables, e.g. "8c 1728MHz gpu 612MHz emc 3199MHz".
func (m Mode) Human() string {
	cpu := mhz(m.CPUKHz * 1000)
	if m.CPUKHz == 1 {
		// 1 kHz is the NVML backend's "not controlled" level (a host with no cpufreq,
		// e.g. a VM): "0.001MHz" read as a clock on an H200's status line.
		cpu = "host"
	}
	return fmt.Sprintf("%dc cpu %s gpu %s emc %s", m.Cores, cpu, mhz(m.GPUHz), mhz(m.EMCHz))
}

func mhz(hz int64) string {
	v := float64(hz) / 1e6
	if v == float64(int64(v)) {
		return fmt.Sprintf("%dMHz", int64(v))
	}
	return strconv.FormatFloat(v, 'f', -1, 64) + "MHz"
}

// Validate reports a mode that cannot exist on any board.
func (m Mode) Validate() error {
	switch {
	case m.Cores < 1:
		return fmt.Errorf("mode %s: cores must be at least 1", m)
	case m.CPUKHz <= 0:
		return fmt.Errorf("mode %s: cpu_khz must be positive", m)
	case m.GPUHz <= 0:
		return fmt.Errorf("mode %s: gpu_hz must be positive", m)
	case m.EMCHz <= 0:
		return fmt.Errorf("mode %s: emc_hz must be positive", m)
	}
	return nil
}

// ParseMode parses the form written by Mode.String.
func ParseMode(s string) (Mode, error) {
	parts := strings.Split(strings.TrimSpace(s), "/")
	if len(parts) != 4 {
		return Mode{}, fmt.Errorf("parse mode %q: want cores/cpu_khz/gpu_hz/emc_hz (e.g. 8/1728000/612000000/3199000000)", s)
	}
	var v [4]int64
	for i, p := range parts {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil {
			return Mode{}, fmt.Errorf("parse mode %q: field %d: %w", s, i+1, err)
		}
		v[i] = n
	}
	m := Mode{Cores: int(v[0]), CPUKHz: v[1], GPUHz: v[2], EMCHz: v[3]}
	if err := m.Validate(); err != nil {
		return Mode{}, err
	}
	return m, nil
}
