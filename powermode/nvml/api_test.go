package nvml

import (
	"context"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// The cgo and !cgo builds must export the same methods: this file compiles in both.
var _ interface {
	powermode.Backend
	ClockControl() bool
	SetPowerLimit(context.Context, uint32) error
	EnergyMJ(context.Context) (uint64, error)
	Close() error
} = (*Backend)(nil)

var _ func(Options) (*Backend, error) = Open
