//go:build cgo

package cuda

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/cuda/cudatest"
)

func TestLoadMissingLibrary(t *testing.T) {
	p := filepath.Join(t.TempDir(), "libcuda.so.1")
	_, err := Load(Options{LibraryPath: p})
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "no NVIDIA driver") {
		t.Fatalf("missing library: %v", err)
	}
}

func TestLoadNotCUDA(t *testing.T) {
	// libc loads fine and has none of the driver's symbols.
	_, err := Load(Options{LibraryPath: "libc.so.6"})
	if err == nil || !strings.Contains(err.Error(), "has no symbol cuInit") {
		t.Fatalf("libc as libcuda: %v", err)
	}
	// A library with the first symbols only: the error names the first one missing.
	partial := cudatest.Build(t, "int cuInit(unsigned f) { return 0; }\nint cuDriverGetVersion(int *v) { *v = 1; return 0; }\n")
	_, err = Load(Options{LibraryPath: partial})
	if err == nil || !strings.Contains(err.Error(), "has no symbol cuDeviceGetCount") {
		t.Fatalf("partial library: %v", err)
	}
}

func TestCallsBeforeInit(t *testing.T) {
	d, err := Load(Options{LibraryPath: cudatest.Build(t, cudatest.Source)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, err1 := d.Version()
	_, err2 := d.DeviceCount()
	_, err3 := d.Device(0)
	_, err4 := d.NewContext(0)
	for i, err := range []error{err1, err2, err3, err4} {
		if !errors.Is(err, ErrNotInitialized) {
			t.Errorf("call %d before Init: %v", i+1, err)
		}
	}
}

func TestInitNoDevice(t *testing.T) {
	d, err := Load(Options{LibraryPath: cudatest.Build(t, cudatest.Source, "-DNO_DEVICE")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	err = d.Init()
	var ce *Error
	if !errors.As(err, &ce) || ce.Name != "CUDA_ERROR_NO_DEVICE" || !strings.Contains(err.Error(), "nvidia-smi") {
		t.Fatalf("init without a device: %v", err)
	}
	if _, err := d.DeviceCount(); !errors.Is(err, ErrNotInitialized) {
		t.Fatalf("after a failed Init: %v", err)
	}
}

func TestDeviceProps(t *testing.T) {
	d, err := Load(Options{LibraryPath: cudatest.Build(t, cudatest.Source)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Init(); err != nil {
		t.Fatal(err)
	}
	if v, err := d.Version(); err != nil || v != 12060 {
		t.Fatalf("version %d %v", v, err)
	}
	p, err := d.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	want := DeviceProps{Index: 0, Name: "Orin (nvgpu)", SMCount: 16, ComputeMajor: 8, ComputeMinor: 7, TotalMemB: 64 << 30, Integrated: true, ClockKHz: 1300500}
	if p != want || p.SM() != "sm_87" {
		t.Fatalf("props %+v, want %+v", p, want)
	}
	if _, err := d.Device(1); err == nil || !strings.Contains(err.Error(), "1 visible") {
		t.Fatalf("device 1: %v", err)
	}
}

func TestBurnerOnFakeDriver(t *testing.T) {
	d, err := Load(Options{LibraryPath: cudatest.Build(t, cudatest.Source)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Init(); err != nil {
		t.Fatal(err)
	}
	c, err := d.NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range []Kernel{Compute, Memory} {
		b, err := c.NewBurner(ctx, k, BurnerOptions{})
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if b.UnitMS() <= 0 || b.Kernel() != k {
			t.Fatalf("%s: unit %v ms", k, b.UnitMS())
		}
		if n := b.Units(time.Duration(10 * b.UnitMS() * float64(time.Millisecond))); n != 10 {
			t.Fatalf("%s: %d units for ten unit times", k, n)
		}
		if n := b.Units(0); n != 1 {
			t.Fatalf("%s: %d units for 0", k, n)
		}
		took, err := b.Run(ctx, 3*time.Millisecond)
		if err != nil || took <= 0 {
			t.Fatalf("%s: run %v %v", k, took, err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := b.Run(cctx, time.Second); !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: cancelled run: %v", k, err)
		}
		if err := b.Close(); err != nil {
			t.Fatalf("%s: close: %v", k, err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Synchronize(); err == nil {
		t.Fatal("Synchronize on a closed context succeeded")
	}
	if _, err := c.NewBurner(ctx, Compute, BurnerOptions{}); err == nil {
		t.Fatal("NewBurner on a closed context succeeded")
	}
}
