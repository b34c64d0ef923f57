package sim_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/powermode/tegra"
)

// The real backend drives the simulator: what it applies is the mode the physics loop
// runs at, and the power it reads from the rails is what the model says.
func TestTegraBackendDrivesTheSimulator(t *testing.T) {
	ctx := context.Background()
	b, sp := simBoard(t)
	be, err := tegra.Open(ctx, b.Root(), sp, powermode.BoardInfo{Name: sp.Name})
	if err != nil {
		t.Fatal(err)
	}
	m := powermode.Mode{Cores: 6, CPUKHz: 1497600, GPUHz: 714000000, EMCHz: 2133000000}
	if err := be.Apply(ctx, m); err != nil {
		t.Fatal(err)
	}
	if cur, err := be.Current(ctx); err != nil || cur != m {
		t.Fatalf("backend Current = %s, %v; want %s", cur, err, m)
	}
	idle, err := b.Step(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if idle.Mode != m {
		t.Errorf("idle at pinned clocks: loop runs %s, want %s", idle.Mode, m)
	}
	w := testboard.Workloads(t)["yolov8n-train"] // ~0.7 s at this mode
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := sim.RunMinibatch(runCtx, b.Root(), sp, w, w.Batch, newRand(2))
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	var busy sim.StepResult
	for len(busy.Active) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("minibatch never seen")
		}
		if busy, err = b.Step(time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	r, err := be.Power(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := w.PowerMW(sp, m, w.Batch)
	// Rails hold whole mV and mA: allow rounding.
	if math.Abs(r.TotalMW-want) > 0.005*want {
		t.Errorf("backend reads %.0f mW while training at %s, model %.0f", r.TotalMW, m, want)
	}
	cancel()
	<-done
	zones, err := be.Thermal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, z := range zones {
		if z.Err != "" || z.Celsius < 20 || z.Celsius > 100 {
			t.Errorf("zone %s: %.1f °C %s", z.Zone, z.Celsius, z.Err)
		}
	}
}
