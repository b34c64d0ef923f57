//go:build !cgo

package cuda

import (
	"context"
	"time"
)

// Driver is unavailable without cgo: Load always fails with ErrNoCgo.
type Driver struct{}

// Context is unavailable without cgo.
type Context struct{}

// Burner is unavailable without cgo.
type Burner struct{}

// Load fails: the loader needs cgo.
func Load(Options) (*Driver, error) { return nil, ErrNoCgo }

// Init fails: the loader needs cgo.
func (*Driver) Init() error { return ErrNoCgo }

// Version fails: the loader needs cgo.
func (*Driver) Version() (int, error) { return 0, ErrNoCgo }

// DeviceCount fails: the loader needs cgo.
func (*Driver) DeviceCount() (int, error) { return 0, ErrNoCgo }

// Device fails: the loader needs cgo.
func (*Driver) Device(int) (DeviceProps, error) { return DeviceProps{}, ErrNoCgo }

// NewContext fails: the loader needs cgo.
func (*Driver) NewContext(int) (*Context, error) { return nil, ErrNoCgo }

// Path is empty: nothing was loaded.
func (*Driver) Path() string { return "" }

// Close does nothing.
func (*Driver) Close() error { return nil }

// Props are empty.
func (*Context) Props() DeviceProps { return DeviceProps{} }

// Synchronize fails: the loader needs cgo.
func (*Context) Synchronize() error { return ErrNoCgo }

// Close does nothing.
func (*Context) Close() error { return nil }

// NewBurner fails: the loader needs cgo.
func (*Context) NewBurner(context.Context, Kernel, BurnerOptions) (*Burner, error) {
	return nil, ErrNoCgo
}

// Kernel is empty.
func (*Burner) Kernel() Kernel { return "" }

// UnitMS is zero.
func (*Burner) UnitMS() float64 { return 0 }

// Units is zero.
func (*Burner) Units(time.Duration) int { return 0 }

// Run fails: the loader needs cgo.
func (*Burner) Run(context.Context, time.Duration) (time.Duration, error) { return 0, ErrNoCgo }

// Close does nothing.
func (*Burner) Close() error { return nil }
