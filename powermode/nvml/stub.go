//go:build !cgo

package nvml

import (
	"context"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Backend is unavailable without cgo: Open always fails with ErrNoCgo. It has the cgo
// build's method set, so code using it compiles either way.
type Backend struct{}

var _ powermode.Backend = (*Backend)(nil)

// Open fails: go-nvml needs cgo.
func Open(Options) (*Backend, error) { return nil, ErrNoCgo }

// Info is empty.
func (*Backend) Info() powermode.BoardInfo { return powermode.BoardInfo{} }

// Space is nil.
func (*Backend) Space() *powermode.Space { return nil }

// Supported is nil.
func (*Backend) Supported() *powermode.Space { return nil }

// ClockControl is false.
func (*Backend) ClockControl() bool { return false }

// Current fails with ErrNoCgo.
func (*Backend) Current(context.Context) (powermode.Mode, error) { return powermode.Mode{}, ErrNoCgo }

// Apply fails with ErrNoCgo.
func (*Backend) Apply(context.Context, powermode.Mode) error { return ErrNoCgo }

// SetPowerLimit fails with ErrNoCgo.
func (*Backend) SetPowerLimit(context.Context, uint32) error { return ErrNoCgo }

// Power fails with ErrNoCgo.
func (*Backend) Power(context.Context) (powermode.PowerReading, error) {
	return powermode.PowerReading{}, ErrNoCgo
}

// EnergyMJ fails with ErrNoCgo.
func (*Backend) EnergyMJ(context.Context) (uint64, error) { return 0, ErrNoCgo }

// Thermal fails with ErrNoCgo.
func (*Backend) Thermal(context.Context) ([]powermode.ThermalZone, error) { return nil, ErrNoCgo }

// Snapshot fails with ErrNoCgo.
func (*Backend) Snapshot(context.Context) (*powermode.Snapshot, error) { return nil, ErrNoCgo }

// Restore fails with ErrNoCgo.
func (*Backend) Restore(context.Context, *powermode.Snapshot) error { return ErrNoCgo }

// Close does nothing.
func (*Backend) Close() error { return nil }
