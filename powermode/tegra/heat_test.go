package tegra

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/powermode"

	"github.com/fulcrum-edge/fulcrum/powermode/tegra/tegratest"
)

func writeHost(t *testing.T, root, abs, v string) {
	t.Helper()
	if err := os.WriteFile(hostPath(root, abs), []byte(v), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestHeatTripLoadAndThrottle: the trip point read is the passive one (not the fan's
// active trip), the GPU load is the device's per-mille node, and a clock running under
// the floor Apply set reads as throttled, naming which.
func TestHeatTripLoadAndThrottle(t *testing.T) {
	b := tegratest.AGXOrin64GBJP6()
	root := writeTree(t, b)
	be := openTree(t, root, b, OSFS{Root: root})
	ctx := context.Background()
	d := be.Space().Dims()
	m := be.Space().Mode(powermode.Index{d[0] - 1, d[1] - 1, d[2] - 1, d[3] - 1})
	if err := be.Apply(ctx, m); err != nil {
		t.Fatal(err)
	}
	writeHost(t, root, be.gpuLoadPath(), "731\n")
	h, err := be.Heat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Throttled || h.Why != "" {
		t.Errorf("cold board at its set clocks reads throttled: %+v", h)
	}
	if h.GPULoad != 0.731 {
		t.Errorf("GPU load = %v, want 0.731 from the load node", h.GPULoad)
	}
	for i, z := range h.Zones {
		if want := 97 + 0.5*float64(i); z.TripC != want {
			t.Errorf("zone %s trip = %v °C, want the passive %v (not the active 50)", z.Zone, z.TripC, want)
		}
	}
	if len(h.OverTrip()) != 0 {
		t.Errorf("zones over trip at 40 °C: %+v", h.OverTrip())
	}
	// The firmware caps the GPU under its floor and heats the tj zone past its trip.
	slow := b.GPUFreqsHz[1]
	writeHost(t, root, be.gpu.file("cur_freq"), itoa64(slow)+"\n")
	tj := len(b.ThermalZones) - 1
	writeHost(t, root, "/sys/class/thermal/thermal_zone"+itoa64(int64(tj))+"/temp", "101250\n")
	h, err = be.Heat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Throttled || !strings.Contains(h.Why, "GPU runs") {
		t.Errorf("GPU under its floor: %+v, want throttled naming the GPU", h)
	}
	if h.GPUHz != slow || h.GPUFloorHz != m.GPUHz {
		t.Errorf("GPU clocks = %d running / %d floor, want %d / %d", h.GPUHz, h.GPUFloorHz, slow, m.GPUHz)
	}
	over := h.OverTrip()
	if len(over) != 1 || over[0].Zone != "tj-thermal" {
		t.Errorf("over trip = %+v, want tj-thermal only", over)
	}
	if z, ok := h.Hottest(); !ok || z.Zone != "tj-thermal" || z.Celsius != 101.25 {
		t.Errorf("hottest = %+v, want tj-thermal at 101.25", z)
	}
	// A CPU cluster under its floor is throttled too.
	writeHost(t, root, be.gpu.file("cur_freq"), itoa64(m.GPUHz)+"\n")
	writeHost(t, root, be.policies[0].file("cpuinfo_cur_freq"), itoa64(b.CPUFreqsKHz[0])+"\n")
	h, err = be.Heat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Throttled || !strings.Contains(h.Why, "CPU policy0") || h.CPUKHz != b.CPUFreqsKHz[0] {
		t.Errorf("CPU under its floor: %+v, want throttled naming policy0", h)
	}
}

func itoa64(v int64) string { return strconv.FormatInt(v, 10) }

// BenchmarkHeat is one heat reading of an AGX Orin tree (9 zones with trip points, the
// GPU, 3 CPU clusters): what the controller reads every control period.
func BenchmarkHeat(b *testing.B) {
	tb := tegratest.AGXOrin64GBJP6()
	root := b.TempDir()
	if err := tegratest.Write(root, tb); err != nil {
		b.Fatal(err)
	}
	be, err := OpenWith(context.Background(), root, tb.Spec(), powermode.BoardInfo{}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := be.Heat(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
