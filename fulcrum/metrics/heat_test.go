package metrics_test

import (
	"context"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/metrics"
)

// The board's heat is scraped in base units: °C per zone (unreadable zones absent),
// the trip points, throttled 0/1, the GPU's load as a ratio, running clocks in Hz and
// the plan's thermal cap.
func TestScrapeHeat(t *testing.T) {
	load := 0.875
	st := api.Status{Heat: &api.Heat{
		Zones:   []api.ThermalZone{{Zone: "gpu-thermal", Celsius: 97.5, TripC: 99}, {Zone: "cv0-thermal", Error: "EAGAIN", TripC: 99}},
		GPULoad: &load, GPUHz: 510000000, GPUFloorHz: 612000000, CPUKHz: 1497600, CPUFloorKHz: 1728000,
		Throttled: true, ThrottleReason: "GPU runs 510 MHz under its 612 MHz floor", CapGPUHz: 510000000,
	}}
	m := metrics.New(metrics.SourceFunc(func(context.Context) (metrics.Snapshot, error) { return metrics.Snapshot{Status: st}, nil }), metrics.Options{})
	fams := scrape(t, m)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"fulcrum_board_temperature_celsius", []string{"zone", "gpu-thermal"}, 97.5},
		{"fulcrum_board_trip_point_celsius", []string{"zone", "cv0-thermal"}, 99},
		{"fulcrum_board_throttled", nil, 1},
		{"fulcrum_gpu_load_ratio", nil, 0.875},
		{"fulcrum_board_gpu_running_frequency_hertz", nil, 510000000},
		{"fulcrum_board_cpu_running_frequency_hertz", nil, 1497600000},
		{"fulcrum_thermal_cap_gpu_frequency_hertz", nil, 510000000},
	} {
		if got := value(t, fams, tc.name, tc.labels...); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	for _, m := range fams["fulcrum_board_temperature_celsius"].Metric {
		for _, l := range m.Label {
			if l.GetValue() == "cv0-thermal" {
				t.Error("an unreadable zone is exported as a temperature")
			}
		}
	}
	// Without heat sensors (NVML, no board) the heat metrics are absent, not zero.
	st.Heat = nil
	fams = scrape(t, m)
	for _, n := range []string{"fulcrum_board_throttled", "fulcrum_board_temperature_celsius", "fulcrum_gpu_load_ratio"} {
		if _, ok := fams[n]; ok {
			t.Errorf("%s exported without heat sensors", n)
		}
	}
}
