package apitest

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// Serve runs an API server for ctl on a socket in a new temporary directory until the
// test ends, and returns the socket's path. cfg.SocketPath is set here.
func Serve(t testing.TB, cfg server.Config, ctl server.Controller) string {
	t.Helper()
	cfg.SocketPath = filepath.Join(t.TempDir(), api.SocketName)
	srv := server.New(cfg, ctl)
	if err := srv.Listen(); err != nil {
		t.Fatalf("listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("serve: %v", err)
		}
	})
	return cfg.SocketPath
}

// OrinLevels are the AGX Orin 64GB knob levels (docs/design.md §4), a subset of the CPU ones.
func OrinLevels() api.Levels {
	return api.Levels{
		Cores:  []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
		CPUKHz: []int64{115200, 729600, 1113600, 1497600, 1728000, 2201600},
		GPUHz:  []int64{306000000, 408000000, 612000000, 816000000, 1020000000, 1300500000},
		EMCHz:  []int64{204000000, 665600000, 2133000000, 3199000000},
	}
}

// Mode30W is the AGX Orin MODE_30W preset's knobs (EMC at its top rate).
var Mode30W = powermode.Mode{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000}

// NewOrin returns a fake AGX Orin at MODE_30W with budgets 100 ms p99, 30 W, rate auto,
// and a real profile store in a temporary directory holding n profiles of a training
// workload "resnet18" at different modes.
func NewOrin(t testing.TB, n int) *Fake {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "profiles.db"), store.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	start := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	lv := OrinLevels()
	for i := 0; i < n; i++ {
		m := Mode30W
		m.GPUHz = lv.GPUHz[i%len(lv.GPUHz)]
		m.Cores = 1 + i/len(lv.GPUHz)
		p := store.Profile{
			Board: "agx-orin-64gb", Workload: "resnet18", Role: truth.Train, Mode: m, Batch: 32,
			TimeMS:  store.TimeStats{Mean: 100 + float64(i), P50: 100 + float64(i), P95: 110 + float64(i), Stddev: 2},
			PowerMW: store.PowerStats{Mean: 30000 - 100*float64(i), Stddev: 300},
			Samples: 20, PowerSamples: 40, Warmup: 2, StartedAt: start, FinishedAt: start.Add(3 * time.Second),
			RSE: 0.01, Source: store.SourceSim,
		}
		if err := st.Put(p); err != nil {
			t.Fatal(err)
		}
	}
	clock := start
	now := func() time.Time { return clock } // a fixed clock keeps event times comparable
	return New("agx-orin-64gb", lv, Mode30W,
		api.Budgets{LatencyMS: 100, PowerMW: 30000, RateAuto: true, Quantile: 0.99, RhoMax: 0.95}, st, now)
}
