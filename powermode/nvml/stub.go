//go:build !cgo

package nvml

import "github.com/fulcrum-edge/fulcrum/powermode"

// Backend is unavailable without cgo; Open always fails with ErrNoCgo.
type Backend struct{ powermode.Backend }

// Open fails: go-nvml needs cgo.
func Open(Options) (*Backend, error) { return nil, ErrNoCgo }
