package powermode

import (
	"context"
	"encoding/json"
	"time"
)

// BoardInfo identifies the board a backend drives.
type BoardInfo struct {
	Name   string `json:"name"`   // catalog name, e.g. "agx-orin-64gb"
	Model  string `json:"model"`  // /proc/device-tree/model, e.g. "NVIDIA Jetson AGX Orin Developer Kit"
	Module string `json:"module"` // module part number, e.g. "p3701-0005"
	SoC    string `json:"soc"`    // e.g. "tegra234"
	L4T    string `json:"l4t"`    // L4T release, e.g. "R36.4.3"; empty when unknown
}

// RailPower is one power rail's reading. The INA3221 reports millivolts and milliamps;
// PowerMW is what the sensor (or their product) gives.
type RailPower struct {
	Name      string  `json:"name"`
	PowerMW   float64 `json:"mw"`
	VoltageMV float64 `json:"mv"`
	CurrentMA float64 `json:"ma"`
}

// PowerReading is one sample of board power. TotalMW follows the board's rule for
// totalling rails (sum of rails, or one rail that already is the total).
type PowerReading struct {
	At      time.Time   `json:"at"`
	TotalMW float64     `json:"total_mw"`
	Rails   []RailPower `json:"rails"`
}

// ThermalZone is one thermal zone's temperature. Err is set (and Celsius zero) for a
// zone that could not be read, e.g. the cv* zones that return EAGAIN while idle.
type ThermalZone struct {
	Zone    string  `json:"zone"`
	Celsius float64 `json:"celsius"`
	// TripC is the zone's lowest passive trip point (where the kernel or the firmware
	// starts to cap clocks), 0 when the zone has none.
	TripC float64 `json:"trip_c,omitempty"`
	Err   string  `json:"error,omitempty"`
}

// Snapshot is a board's state as found, enough to put it back: which backend took it,
// for which board, when, and the backend-specific state.
type Snapshot struct {
	Backend string          `json:"backend"`
	Board   string          `json:"board"`
	TakenAt time.Time       `json:"taken_at"`
	State   json.RawMessage `json:"state"`
}

// Backend reads and drives one board. Implementations: the tegra sysfs backend (real
// Jetsons, and the simulator's tree), and NVML for discrete GPUs.
type Backend interface {
	// Info identifies the board.
	Info() BoardInfo
	// Space is the set of modes this board allows.
	Space() *Space
	// Current reads the mode the board is set to now (what was written, not what a
	// governor may be running at).
	Current(ctx context.Context) (Mode, error)
	// Apply sets the board to m. On error the board is back in the mode it had before.
	Apply(ctx context.Context, m Mode) error
	// Power reads board power now.
	Power(ctx context.Context) (PowerReading, error)
	// Thermal reads every thermal zone.
	Thermal(ctx context.Context) ([]ThermalZone, error)
	// Snapshot captures everything Apply may change.
	Snapshot(ctx context.Context) (*Snapshot, error)
	// Restore puts back a snapshot taken by the same kind of backend.
	Restore(ctx context.Context, s *Snapshot) error
}
