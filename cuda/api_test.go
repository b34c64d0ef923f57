package cuda

import (
	"context"
	"time"
)

// The cgo and !cgo builds must export the same methods: this file compiles in both.
var (
	_ interface {
		Init() error
		Version() (int, error)
		DeviceCount() (int, error)
		Device(int) (DeviceProps, error)
		NewContext(int) (*Context, error)
		Path() string
		Close() error
	} = (*Driver)(nil)
	_ interface {
		Props() DeviceProps
		Synchronize() error
		NewBurner(context.Context, Kernel, BurnerOptions) (*Burner, error)
		Close() error
	} = (*Context)(nil)
	_ interface {
		Kernel() Kernel
		UnitMS() float64
		Units(time.Duration) int
		Run(context.Context, time.Duration) (time.Duration, error)
		Close() error
	} = (*Burner)(nil)
	_ error = (*Error)(nil)
)
