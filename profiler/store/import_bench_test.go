package store

import (
	"bytes"
	"fmt"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// importBody writes n distinct valid profiles in format (about 530 bytes each in JSON,
// 250 in CSV).
func importBody(tb testing.TB, format Format, n int) []byte {
	tb.Helper()
	at := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	ps := make([]Profile, n)
	for i := range ps {
		// Eight batch sizes per mode and 1,000 profiles per workload, as a fleet's
		// inference profiles come.
		m := i / 8
		ps[i] = Profile{Board: "agx-orin-64gb", Workload: fmt.Sprintf("w%04d-infer", i/1000), Role: truth.Infer,
			Mode:  powermode.Mode{Cores: 1 + m%12, CPUKHz: 1113600, GPUHz: 408000000 + int64(m/12%84)*1000, EMCHz: 2133000000},
			Batch: 1 + i%8, TimeMS: TimeStats{Mean: 10, P50: 10, P95: 11, Stddev: 0.5}, PowerMW: PowerStats{Mean: 20000, Stddev: 100},
			Samples: 50, PowerSamples: 40, Warmup: 3, StartedAt: at, FinishedAt: at.Add(time.Minute), RSE: 0.01, Source: SourceImport}
	}
	var b bytes.Buffer
	if err := WriteProfiles(&b, format, ps); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// peakHeap samples the live heap every millisecond until stop is called and returns the
// largest value seen above the heap at the start.
func peakHeap() (stop func() uint64) {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	base := s[0].Value.Uint64()
	var peak uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			peak = max(peak, s[0].Value.Uint64())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		wg.Wait()
		if peak < base {
			return 0
		}
		return peak - base
	}
}

// BenchmarkImport65MB imports ~65 MB bodies (JSON and CSV) into an empty store and
// reports the peak live heap above the start as a multiple of the body:
//
//	go test -run '^$' -bench Import65MB -benchtime 1x ./profiler/store/
func BenchmarkImport65MB(b *testing.B) {
	for _, tc := range []struct {
		format Format
		n      int
	}{{JSON, 100000}, {CSV, 420000}} {
		body := importBody(b, tc.format, tc.n)
		b.Run(string(tc.format), func(b *testing.B) {
			for range b.N {
				st, err := Open(filepath.Join(b.TempDir(), "p.db"), Options{})
				if err != nil {
					b.Fatal(err)
				}
				stop := peakHeap()
				res, err := st.Import(bytes.NewReader(body), ImportOptions{Format: tc.format})
				peak := stop()
				st.Close()
				if err != nil || res.Added != tc.n {
					b.Fatalf("import: %+v, %v", res, err)
				}
				b.ReportMetric(float64(len(body))/1e6, "body-MB")
				b.ReportMetric(float64(peak)/1e6, "peak-heap-MB")
				b.ReportMetric(float64(peak)/float64(len(body)), "peak/body")
			}
		})
	}
}
