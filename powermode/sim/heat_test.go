package sim_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/powermode/tegra"
)

// heatUp runs sustained training at the board's top mode for steps physics steps of
// 250 ms of simulated time and returns the backend reading the tree.
func heatUp(t *testing.T, opts sim.Options, steps int) (*sim.Board, *tegra.Backend, powermode.Mode) {
	t.Helper()
	ctx := context.Background()
	sp := testboard.Spec(t, "agx-orin-64gb")
	b, err := sim.New(filepath.Join(t.TempDir(), "board"), sp, opts)
	if err != nil {
		t.Fatal(err)
	}
	be, err := tegra.Open(ctx, b.Root(), sp, powermode.BoardInfo{Name: sp.Name})
	if err != nil {
		t.Fatal(err)
	}
	d := be.Space().Dims()
	top := be.Space().Mode(powermode.Index{d[0] - 1, d[1] - 1, d[2] - 1, d[3] - 1})
	if err := be.Apply(ctx, top); err != nil {
		t.Fatal(err)
	}
	act := filepath.Join(b.Root(), sim.ActivityDir, "1-train.json")
	raw := `{"workload":"resnet18-train","role":"train","batch":32,"pid":` + itoa(os.Getpid()) + `}`
	if err := os.WriteFile(act, []byte(raw), 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i := range steps {
		if _, err := b.Step(now.Add(time.Duration(i) * 250 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	return b, be, top
}

// With heat on, sustained training past a (lowered) trip point makes the simulated
// firmware cap the clocks under what was set: cur_freq drops under min_freq, the
// board layer reads the board as throttled, and minibatches run at the capped clocks.
func TestHeatThrottlesPastTripPoint(t *testing.T) {
	b, be, top := heatUp(t, sim.Options{ThermalTau: time.Second, Heat: &sim.HeatOptions{TripC: 55, Poll: 500 * time.Millisecond}}, 40)
	if b.Throttle() == 0 {
		t.Fatal("no cooling step after 10 s of training at the top mode past a 55 °C trip point")
	}
	h, err := be.Heat(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !h.Throttled || h.GPUHz >= top.GPUHz || h.GPUFloorHz != top.GPUHz {
		t.Errorf("heat = %+v, want throttled with the GPU under the %d Hz set", h, top.GPUHz)
	}
	for _, z := range h.Zones {
		if z.TripC != 55 {
			t.Errorf("zone %s trip = %v, want the 55 °C the options wrote", z.Zone, z.TripC)
		}
	}
	r, err := sim.NewRunner(b.Root(), b.Tree().Spec())
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.Clocks()
	if err != nil {
		t.Fatal(err)
	}
	if m.GPUHz != h.GPUHz || m.GPUHz >= top.GPUHz {
		t.Errorf("minibatches run at GPU %d Hz, want the capped %d the sensors show", m.GPUHz, h.GPUHz)
	}
	if cur, err := be.Current(context.Background()); err != nil || cur != top {
		t.Errorf("Current = %s, %v: want the set mode %s (throttling does not rewrite it)", cur, err, top)
	}
}

// Without heat (the default: cold steady state) the same run is never capped.
func TestNoHeatNeverThrottles(t *testing.T) {
	b, be, top := heatUp(t, sim.Options{ThermalTau: time.Second}, 40)
	h, err := be.Heat(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if b.Throttle() != 0 || h.Throttled || h.GPUHz != top.GPUHz {
		t.Errorf("cold model throttled: state %d, heat %+v", b.Throttle(), h)
	}
}

func itoa(v int) string { return strconv.Itoa(v) }
