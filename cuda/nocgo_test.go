//go:build !cgo

package cuda

import (
	"errors"
	"testing"
)

func TestNoCgo(t *testing.T) {
	if _, err := Load(Options{}); !errors.Is(err, ErrNoCgo) {
		t.Fatalf("Load without cgo: %v", err)
	}
}
