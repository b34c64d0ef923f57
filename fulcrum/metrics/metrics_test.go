package metrics_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/apitest"
	"github.com/fulcrum-edge/fulcrum/fulcrum/metrics"
)

// scrape serves m on 127.0.0.1:0 and GETs /metrics once.
func scrape(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	ln, err := metrics.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, ln, nil) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP %d: %s", resp.StatusCode, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, body)
	}
	return fams
}

// value returns the value of name with the given labels (k=v pairs), or fails.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("no metric %s", name)
	}
next:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return 0
}

func TestScrape(t *testing.T) {
	fake := apitest.NewOrin(t, 4)
	fake.SetMeasurements(
		[]api.Worker{{ID: "w1", Role: "train", Workload: "resnet18"}, {ID: "w2", Role: "infer", Workload: "mobilenet"}, {ID: "w3", Role: "infer", Workload: "mobilenet"}},
		[]api.WorkloadStats{
			{Workload: "resnet18", Role: "train", Minibatches: 900, Samples: 28800, ThroughputPerS: 301.5, Overruns: 2, DurationsClamped: 4, HoldExpired: 1},
			{Workload: "mobilenet", Role: "infer", Requests: 1200, Served: 1190, Failed: 1, DeadlineMisses: 3, ArrivalRateHz: 40.25,
				AdmissionRoomMS: 45, AdmissionRoomLearnedMS: 25, AdmissionRoomChanges: 4,
				Latency: api.Quantiles{Count: 1190, P50MS: 21.5, P95MS: 60, P99MS: 77.25, MaxMS: 90}},
		},
		&api.Power{TotalMW: 28900, Avg1sMW: 28700, Rails: []api.Rail{{Name: "VDD_GPU_SOC", PowerMW: 9100}, {Name: "VDD_CPU_CV", PowerMW: 5200}}},
	)
	fake.SetPlan(&api.Plan{Mode: apitest.Mode30W, InferBatch: 4, Feasible: true})
	violations := map[string]uint64{"power": 2, "latency": 5}
	decisions := map[string]uint64{"replan": 7, "step_down": 2}
	m := metrics.New(metrics.FromController(fake, func() (map[string]uint64, map[string]uint64) { return violations, decisions }), metrics.Options{})
	m.ObserveLatency("mobilenet", 20*time.Millisecond)
	m.ObserveLatency("mobilenet", 120*time.Millisecond)
	fams := scrape(t, m)

	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"fulcrum_scrape_ok", nil, 1},
		{"fulcrum_board_rail_power_watts", []string{"rail", "VDD_GPU_SOC"}, 9.1},
		{"fulcrum_board_rail_power_watts", []string{"rail", "VDD_CPU_CV"}, 5.2},
		{"fulcrum_board_power_watts", nil, 28.9},
		{"fulcrum_board_power_avg_1s_watts", nil, 28.7},
		{"fulcrum_mode_cores", nil, 8},
		{"fulcrum_mode_cpu_frequency_hertz", nil, 1728000000},
		{"fulcrum_mode_gpu_frequency_hertz", nil, 612000000},
		{"fulcrum_mode_emc_frequency_hertz", nil, 3199000000},
		{"fulcrum_budget_latency_seconds", nil, 0.1},
		{"fulcrum_budget_power_watts", nil, 30},
		{"fulcrum_budget_rate_auto", nil, 1},
		{"fulcrum_budget_latency_quantile", nil, 0.99},
		{"fulcrum_inference_latency_window_seconds", []string{"workload", "mobilenet", "quantile", "0.99"}, 0.07725},
		{"fulcrum_inference_arrival_rate_per_second", []string{"workload", "mobilenet"}, 40.25},
		{"fulcrum_inference_requests_total", []string{"workload", "mobilenet"}, 1200},
		{"fulcrum_inference_served_total", []string{"workload", "mobilenet"}, 1190},
		{"fulcrum_inference_deadline_misses_total", []string{"workload", "mobilenet"}, 3},
		{"fulcrum_admission_room_seconds", []string{"workload", "mobilenet"}, 0.045},
		{"fulcrum_admission_room_learned_seconds", []string{"workload", "mobilenet"}, 0.025},
		{"fulcrum_admission_room_changes_total", []string{"workload", "mobilenet"}, 4},
		{"fulcrum_durations_clamped_total", []string{"workload", "resnet18", "role", "train"}, 4},
		{"fulcrum_turns_expired_total", []string{"workload", "resnet18", "role", "train"}, 1},
		{"fulcrum_training_throughput_samples_per_second", []string{"workload", "resnet18"}, 301.5},
		{"fulcrum_training_samples_total", []string{"workload", "resnet18"}, 28800},
		{"fulcrum_overruns_total", []string{"workload", "resnet18", "role", "train"}, 2},
		{"fulcrum_workers", []string{"workload", "mobilenet", "role", "infer"}, 2},
		{"fulcrum_profiles_stored", nil, 4},
		{"fulcrum_budget_violations_total", []string{"budget", "latency"}, 5},
		{"fulcrum_budget_violations_total", []string{"budget", "power"}, 2},
		{"fulcrum_controller_decisions_total", []string{"kind", "replan"}, 7},
		{"fulcrum_plan_feasible", nil, 1},
		{"fulcrum_plan_infer_batch", nil, 4},
		{"fulcrum_degraded", nil, 0},
		{"fulcrum_inference_latency_seconds", []string{"workload", "mobilenet"}, 2},
	} {
		got := value(t, fams, tc.name, tc.labels...)
		if d := got - tc.want; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if fams["fulcrum_budget_violations_total"].GetType() != dto.MetricType_COUNTER || fams["fulcrum_board_power_watts"].GetType() != dto.MetricType_GAUGE {
		t.Error("wrong metric types")
	}
	// The histogram's buckets: 20 ms falls in le=0.02, 120 ms only from le=0.15.
	h := fams["fulcrum_inference_latency_seconds"].Metric[0].Histogram
	for _, b := range h.Bucket {
		want := uint64(0)
		if b.GetUpperBound() >= 0.02 {
			want++
		}
		if b.GetUpperBound() >= 0.15 {
			want++
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("runtime collectors missing")
	}
	// Nothing leaks into Prometheus's global registry.
	global, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range global {
		if strings.HasPrefix(f.GetName(), "fulcrum_") {
			t.Errorf("%s registered globally", f.GetName())
		}
	}

	// Values follow the source on the next scrape (pull, not a copy).
	if _, err := fake.SetBudgets(context.Background(), api.BudgetsUpdate{PowerMW: ptr(0.0)}, api.Caller{}); err != nil {
		t.Fatal(err)
	}
	violations["power"] = 3
	fams = scrape(t, m)
	if v := value(t, fams, "fulcrum_budget_power_watts"); v != 0 {
		t.Errorf("power budget after removing it: %v", v)
	}
	if v := value(t, fams, "fulcrum_budget_violations_total", "budget", "power"); v != 3 {
		t.Errorf("violations after one more: %v", v)
	}
}

func ptr[T any](v T) *T { return &v }

func TestScrapeSourceFails(t *testing.T) {
	m := metrics.New(metrics.SourceFunc(func(context.Context) (metrics.Snapshot, error) {
		return metrics.Snapshot{}, errors.New("controller stopped")
	}), metrics.Options{NoRuntime: true})
	m.ObserveLatency("x", time.Millisecond)
	fams := scrape(t, m)
	if v := value(t, fams, "fulcrum_scrape_ok"); v != 0 {
		t.Fatalf("fulcrum_scrape_ok = %v after a failed read", v)
	}
	if _, ok := fams["fulcrum_board_power_watts"]; ok {
		t.Error("state metrics served from a failed read")
	}
	if v := value(t, fams, "fulcrum_inference_latency_seconds", "workload", "x"); v != 1 {
		t.Errorf("histogram lost: %v", v)
	}
	if len(fams) != 2 {
		names := []string{}
		for n := range fams {
			names = append(names, n)
		}
		t.Errorf("families %v", names)
	}
}

func TestListenBusy(t *testing.T) {
	ln, err := metrics.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := metrics.Listen(ln.Addr().String()); err == nil || !strings.Contains(err.Error(), "metrics.listen") {
		t.Fatalf("second listener: %v", err)
	}
}

// Issue 17 item 1: the latency histogram's series of a workload the scheduler forgot are
// dropped, so fresh workload names cannot grow the scrape without bound.
func TestForgetWorkloadDropsItsSeries(t *testing.T) {
	fake := apitest.NewOrin(t, 4)
	m := metrics.New(metrics.FromController(fake, nil), metrics.Options{NoRuntime: true})
	m.ObserveLatency("gone", 20*time.Millisecond)
	m.ObserveLatency("kept", 20*time.Millisecond)
	m.ForgetWorkload("gone")
	fams := scrape(t, m)
	var names []string
	for _, mt := range fams["fulcrum_inference_latency_seconds"].GetMetric() {
		for _, l := range mt.GetLabel() {
			names = append(names, l.GetValue())
		}
	}
	if strings.Join(names, ",") != "kept" {
		t.Fatalf("latency series for %v; want only kept", names)
	}
}
