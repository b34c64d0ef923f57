// Package metrics exposes fulcrumd's state as Prometheus metrics: board power per rail,
// the power mode's knobs, the budgets, per-workload inference latency, arrival rate and
// training throughput, stored profiles, budget violations and controller decisions.
// Everything except the latency histogram is read from a Source when scraped; the
// histogram is fed per served request (ObserveLatency). Metrics live in their own
// registry (never Prometheus's global one) and are served on an optional TCP listener
// (config metrics.listen, off by default). Names follow Prometheus conventions: base
// units (seconds, watts, hertz) in the name, counters ending in _total.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
)

// Snapshot is what one scrape reads.
type Snapshot struct {
	Status api.Status
	// Violations counts budget violations since start, by budget ("latency", "power").
	Violations map[string]uint64
	// Decisions counts controller decisions since start, by kind (e.g. "replan",
	// "step_down", "mode_apply", "pause_training").
	Decisions map[string]uint64
}

// Source gives the daemon's state at scrape time.
type Source interface {
	MetricsSnapshot(ctx context.Context) (Snapshot, error)
}

// SourceFunc adapts a function to Source.
type SourceFunc func(ctx context.Context) (Snapshot, error)

// MetricsSnapshot calls f.
func (f SourceFunc) MetricsSnapshot(ctx context.Context) (Snapshot, error) { return f(ctx) }

// FromController is a Source reading ctl's Status and the counters from counters (nil:
// none).
func FromController(ctl server.Controller, counters func() (violations, decisions map[string]uint64)) Source {
	return SourceFunc(func(ctx context.Context) (Snapshot, error) {
		st, err := ctl.Status(ctx)
		if err != nil {
			return Snapshot{}, err
		}
		s := Snapshot{Status: st}
		if counters != nil {
			s.Violations, s.Decisions = counters()
		}
		return s, nil
	})
}

// DefaultLatencyBuckets are the latency histogram's upper bounds, in seconds: 1 ms to
// 10 s, dense around typical inference budgets (tens to hundreds of ms).
func DefaultLatencyBuckets() []float64 {
	return []float64{0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2.5, 5, 10}
}

// Metrics owns the registry.
type Metrics struct {
	reg     *prometheus.Registry
	latency *prometheus.HistogramVec
}

// Options tune New.
type Options struct {
	// ScrapeTimeout bounds one Source read (2 s when 0).
	ScrapeTimeout time.Duration
	// LatencyBuckets replace DefaultLatencyBuckets (seconds).
	LatencyBuckets []float64
	// NoRuntime leaves out the Go runtime and process collectors.
	NoRuntime bool
}

// New registers fulcrumd's collectors reading src in a new registry.
func New(src Source, o Options) *Metrics {
	if o.ScrapeTimeout <= 0 {
		o.ScrapeTimeout = 2 * time.Second
	}
	if len(o.LatencyBuckets) == 0 {
		o.LatencyBuckets = DefaultLatencyBuckets()
	}
	reg := prometheus.NewRegistry()
	m := &Metrics{
		reg: reg,
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fulcrum_inference_latency_seconds",
			Help:    "Latency of served inference requests, arrival to batch release.",
			Buckets: o.LatencyBuckets,
		}, []string{"workload"}),
	}
	reg.MustRegister(m.latency, newCollector(src, o.ScrapeTimeout))
	if !o.NoRuntime {
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// ObserveLatency records one served inference request of workload.
func (m *Metrics) ObserveLatency(workload string, latency time.Duration) {
	m.latency.WithLabelValues(workload).Observe(latency.Seconds())
}

// ForgetWorkload drops workload's latency series. fulcrumd calls it when the scheduler
// forgets an idle workload, so the series stay as bounded as the workloads remembered
// (a process registering fresh names cannot grow the scrape without bound).
func (m *Metrics) ForgetWorkload(workload string) {
	m.latency.DeleteLabelValues(workload)
}

// Registry is the registry (to add collectors or gather in tests).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus text or OpenMetrics format. A failed
// Source read still serves the other metrics and logs nothing per scrape:
// fulcrum_scrape_ok says it failed.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
		Timeout:           10 * time.Second,
	})
}

// Listen opens addr (e.g. "127.0.0.1:9464") for Serve. Binding beyond loopback exposes
// board and workload names to the network: do it only behind a firewall.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener on %s: %w (change metrics.listen, or leave it empty to turn metrics off)", addr, err)
	}
	return ln, nil
}

// Serve answers GET /metrics on ln until ctx ends.
func (m *Metrics) Serve(ctx context.Context, ln net.Listener, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "fulcrumd metrics: GET /metrics")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	log.Info("metrics listening", "addr", ln.Addr().String())
	select {
	case err := <-done:
		return fmt.Errorf("metrics on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
