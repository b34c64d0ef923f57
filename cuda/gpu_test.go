//go:build gpu && cgo

package cuda

// GPU-only tests: go test -tags gpu ./cuda/... on a machine with an NVIDIA GPU and
// driver. They were not run in the session that wrote them (no GPU there).

import (
	"context"
	"testing"
	"time"
)

func TestRealGPU(t *testing.T) {
	d, err := Load(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Init(); err != nil {
		t.Fatal(err)
	}
	n, err := d.DeviceCount()
	if err != nil || n < 1 {
		t.Fatalf("device count %d %v", n, err)
	}
	p, err := d.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name == "" || p.SMCount < 1 || p.ComputeMajor < 5 || p.TotalMemB == 0 {
		t.Fatalf("implausible props %+v", p)
	}
	t.Logf("device 0: %+v (%s)", p, p.SM())
	c, err := d.NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for _, k := range []Kernel{Compute, Memory} {
		b, err := c.NewBurner(ctx, k, BurnerOptions{})
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		for _, target := range []time.Duration{5 * time.Millisecond, 50 * time.Millisecond} {
			took, err := b.Run(ctx, target)
			if err != nil {
				t.Fatalf("%s %v: %v", k, target, err)
			}
			if took < target/4 {
				t.Errorf("%s: a %v minibatch ended after %v: the kernels are not doing the work", k, target, took)
			}
			t.Logf("%s: unit %.3f ms, target %v, took %v", k, b.UnitMS(), target, took)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
