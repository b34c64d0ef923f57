//go:build !cgo

package nvml

import (
	"errors"
	"testing"
)

func TestNoCgo(t *testing.T) {
	if _, err := Open(Options{}); !errors.Is(err, ErrNoCgo) {
		t.Fatalf("Open without cgo: %v", err)
	}
	if got := hostCPUKHz(t.TempDir()); got != UncontrolledCPUKHz {
		t.Fatalf("hostCPUKHz without cpufreq: %d", got)
	}
}
