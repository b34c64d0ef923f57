package sched

import (
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// stats are one worker's measurements over a sliding window (Config.Window, at most
// Config.WindowSamples samples each) plus lifetime counters.
type stats struct {
	latency  *window // ms per served request
	arrivals *window // 1 per request, at its arrival
	samples  *window // samples per training minibatch, at its release
	wait     *window // ms from acquire to grant
	alpha    float64

	requests, served, failed, misses uint64
	minibatches, samplesTotal        uint64
	overruns                         uint64
	lastArrival                      time.Time
	gapEWMA                          ewma // seconds between arrivals
}

func newStats(cfg Config) *stats {
	return &stats{
		latency:  newWindow(cfg.Window, cfg.WindowSamples),
		arrivals: newWindow(cfg.Window, cfg.WindowSamples),
		samples:  newWindow(cfg.Window, cfg.WindowSamples),
		wait:     newWindow(cfg.Window, cfg.WindowSamples),
		alpha:    cfg.EWMAAlpha,
	}
}

func (st *stats) arrive(at time.Time) {
	st.requests++
	st.arrivals.add(at, 1)
	if !st.lastArrival.IsZero() && at.After(st.lastArrival) {
		st.gapEWMA.add(at.Sub(st.lastArrival).Seconds(), st.alpha)
	}
	if at.After(st.lastArrival) {
		st.lastArrival = at
	}
}

func (st *stats) done(now time.Time, lat time.Duration, ok, missed bool) {
	if !ok {
		st.failed++
		return
	}
	st.served++
	st.latency.add(now, ms(lat))
	if missed {
		st.misses++
	}
}

func (st *stats) trained(now time.Time, n int) {
	st.minibatches++
	st.samplesTotal += uint64(n)
	st.samples.add(now, float64(n))
}

func (st *stats) waited(now time.Time, d time.Duration) {
	st.wait.add(now, ms(d))
}

// rate is the arrival rate (requests/s): the windowed count when the window holds
// enough arrivals, else the inverse EWMA of inter-arrival gaps.
func (st *stats) rate(now, since time.Time) float64 {
	n, span := st.arrivals.sum(now, since)
	if n >= 20 && span > 0 {
		return n / span.Seconds()
	}
	if st.gapEWMA.n > 0 && st.gapEWMA.val > 0 {
		return 1 / st.gapEWMA.val
	}
	return 0
}

// WorkerStats is one worker's measurements.
type WorkerStats struct {
	ID       string `json:"id"`
	Role     string `json:"role"`
	Workload string `json:"workload"`
	Batch    int    `json:"batch"`
	PID      int    `json:"pid"`
	Waiting  bool   `json:"waiting"` // has an acquire pending
	Queued   int    `json:"queued"`  // inference requests waiting

	// Inference.
	Requests       uint64    `json:"requests"`
	Served         uint64    `json:"served"`
	Failed         uint64    `json:"failed"`
	DeadlineMisses uint64    `json:"deadline_misses"`
	Latency        Quantiles `json:"latency"` // served requests, arrival → release
	ArrivalRateHz  float64   `json:"arrival_rate_hz"`
	ExpectedInfMS  float64   `json:"expected_batch_ms,omitempty"` // at the configured batch

	// Training.
	Minibatches     uint64    `json:"minibatches"`
	Samples         uint64    `json:"samples"`
	ThroughputPerS  float64   `json:"throughput_samples_per_s"`
	ExpectedTrainMS float64   `json:"expected_minibatch_ms,omitempty"`
	TurnWait        Quantiles `json:"turn_wait"` // acquire → grant
	Overruns        uint64    `json:"overruns"`
}

// Snapshot is the scheduler's state and measurements at one instant.
type Snapshot struct {
	LatencyBudgetMS float64       `json:"latency_budget_ms"`
	Turn            string        `json:"turn"` // worker id holding the turn, "action", or ""
	TurnKind        string        `json:"turn_kind,omitempty"`
	Turns           uint64        `json:"turns"`
	Overruns        uint64        `json:"overruns"`
	Workers         []WorkerStats `json:"workers"`
}

// Snapshot returns the current measurements, workers in registration order.
func (s *Scheduler) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	snap := Snapshot{LatencyBudgetMS: ms(s.cfg.LatencyBudget), Turns: s.turns, Overruns: s.overruns}
	if t := s.turn; t != nil {
		snap.TurnKind = t.grant.Kind
		snap.Turn = "action"
		if t.w != nil {
			snap.Turn = t.w.id
		}
	}
	for _, w := range s.order {
		st := w.st
		ws := WorkerStats{
			ID: w.id, Role: w.spec.Role, Workload: w.spec.Workload, Batch: w.spec.Batch, PID: w.spec.PID,
			Waiting: w.wantTurn, Queued: len(w.queue),
			Requests: st.requests, Served: st.served, Failed: st.failed, DeadlineMisses: st.misses,
			Latency:       quantiles(st.latency.values(now)),
			ArrivalRateHz: st.rate(now, w.since),
			Minibatches:   st.minibatches, Samples: st.samplesTotal,
			TurnWait: quantiles(st.wait.values(now)),
			Overruns: st.overruns,
		}
		if w.spec.Role == proto.RoleTrain {
			n, span := st.samples.sum(now, w.since)
			if span > 0 {
				ws.ThroughputPerS = n / span.Seconds()
			}
			ws.ExpectedTrainMS = ms(s.expTrain(w))
		} else {
			ws.ExpectedInfMS = ms(s.expInfer(w, w.spec.Batch))
		}
		snap.Workers = append(snap.Workers, ws)
	}
	return snap
}
