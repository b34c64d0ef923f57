package sched

import (
	"slices"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// stats are one worker's measurements over a sliding window (Config.Window, at most
// Config.WindowSamples samples each) plus lifetime counters.
type stats struct {
	latency  *window // ms per served request
	recent   *window // the same over Config.RecentWindow
	arrivals *window // 1 per request, at its arrival
	samples  *window // samples per training minibatch, at its release
	wait     *window // ms from acquire to grant
	alpha    float64

	requests, served, failed, misses uint64
	minibatches, samplesTotal        uint64
	overruns                         uint64
	starved                          uint64 // training minibatches admitted by the starvation rule
	clamped                          uint64 // releases whose duration was cut to the held time
	underReported                    uint64 // releases reporting less than the held time (the held time counted)
	refused                          uint64 // inference requests refused by the stream's admission (rate_limited)
	expired                          uint64 // turns taken back by the hold limit
	lastArrival                      time.Time
	gapEWMA                          ewma // seconds between arrivals
}

func newStats(cfg Config) *stats {
	return &stats{
		latency:  newWindow(cfg.Window, cfg.WindowSamples),
		recent:   newWindow(cfg.RecentWindow, cfg.WindowSamples),
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
	st.recent.add(now, ms(lat))
	if missed {
		st.misses++
	}
}

// trained counts n samples run at now; whole: they ended a minibatch (a micro-batch
// turn that did not end one adds its samples only).
func (st *stats) trained(now time.Time, n int, whole bool) {
	if whole {
		st.minibatches++
	}
	st.samplesTotal += uint64(n)
	st.samples.add(now, float64(n))
}

func (st *stats) waited(now time.Time, d time.Duration) {
	st.wait.add(now, ms(d))
}

// compact gives back the memory of an idle workload's windows beyond what they still
// cover.
func (st *stats) compact(now time.Time) {
	for _, w := range []*window{st.latency, st.recent, st.arrivals, st.samples, st.wait} {
		w.compact(now)
	}
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

// WorkerInfo is one live worker.
type WorkerInfo struct {
	ID       string `json:"id"`
	Role     string `json:"role"`
	Workload string `json:"workload"`
	Batch    int    `json:"batch"`
	// BatchSizes are the inference batch sizes the worker can serve (as registered).
	BatchSizes []int `json:"batch_sizes,omitempty"`
	PID        int   `json:"pid"` // from SO_PEERCRED
	UID        int   `json:"uid"`
	Waiting    bool  `json:"waiting"` // has an acquire pending
	Queued     int   `json:"queued"`  // inference requests waiting
	// NoProfiles: the worker declined profile batches at registration (no on_profile).
	NoProfiles bool `json:"no_profiles,omitempty"`
	// MicroBatches (train) are the micro-batch sizes the worker declared; MicroBatch the
	// size its minibatches run at now (the whole minibatch when it equals Batch), and
	// MicroBatchChanges how often that changed (micro.go).
	MicroBatches      []int  `json:"micro_batches,omitempty"`
	MicroBatch        int    `json:"micro_batch,omitempty"`
	MicroBatchChanges uint64 `json:"micro_batch_changes,omitempty"`
	// MicroBatchFits: the smallest declared micro-batch's expected turn fits every
	// inference stream's room now (micro.go roomFits): micro-batches can keep training
	// within the latency budgets.
	MicroBatchFits bool `json:"micro_batch_fits,omitempty"`
}

// WorkloadStats are one workload's measurements, over every worker that registered it
// (live or gone).
type WorkloadStats struct {
	Workload    string `json:"workload"`
	Role        string `json:"role"`
	LiveWorkers int    `json:"live_workers"`

	// Inference.
	Requests       uint64    `json:"requests"`
	Served         uint64    `json:"served"`
	Failed         uint64    `json:"failed"`
	DeadlineMisses uint64    `json:"deadline_misses"`
	Latency        Quantiles `json:"latency"` // served requests, arrival → release
	// LatencyRecent is Latency over the last Config.RecentWindow only.
	LatencyRecent Quantiles `json:"latency_recent"`
	ArrivalRateHz float64   `json:"arrival_rate_hz"`
	// LatencyBudgetMS is the latency budget the workload's requests get (its own, or
	// the shared one).
	LatencyBudgetMS float64 `json:"latency_budget_ms,omitempty"`
	// ExpectedBatchMS is the expected inference batch time by batch size (measured sizes).
	ExpectedBatchMS map[int]float64 `json:"expected_batch_ms,omitempty"`

	// Training.
	Minibatches     uint64  `json:"minibatches"`
	Samples         uint64  `json:"samples"`
	ThroughputPerS  float64 `json:"throughput_samples_per_s"`
	ExpectedTrainMS float64 `json:"expected_minibatch_ms,omitempty"`
	// ExpectedMicroMS is the expected training turn (ms) by micro-batch size below the
	// minibatch (measured sizes).
	ExpectedMicroMS map[int]float64 `json:"expected_micro_batch_ms,omitempty"`

	TurnWait Quantiles `json:"turn_wait"` // acquire → grant
	Overruns uint64    `json:"overruns"`
	// StarvedAdmits counts training minibatches admitted by the starvation rule.
	StarvedAdmits uint64 `json:"starved_admits,omitempty"`
	// DurationsClamped counts releases that reported more time than the turn was held
	// (the held time was used instead); HoldExpired counts turns taken back by the hold
	// limit.
	DurationsClamped uint64 `json:"durations_clamped,omitempty"`
	HoldExpired      uint64 `json:"hold_expired,omitempty"`
	// DurationsUnderReported counts releases that reported less than the turn was held
	// (beyond ReportSlack); the held time counted.
	DurationsUnderReported uint64 `json:"durations_under_reported,omitempty"`
	// Refused counts inference requests refused by the stream's admission
	// (proto.CodeRateLimited): the stream asked for more than its GPU-time share.
	Refused uint64 `json:"refused,omitempty"`
	// AdmissionRoomMS is the room (ms) the admission test keeps before the stream's
	// deadlines: Margin plus RoomLearnedMS, the part learned from its latency window
	// (room.go); RoomChanges counts the learned room's changes.
	AdmissionRoomMS float64 `json:"admission_room_ms,omitempty"`
	RoomLearnedMS   float64 `json:"admission_room_learned_ms,omitempty"`
	RoomChanges     uint64  `json:"admission_room_changes,omitempty"`
	// RoomWhy is the rule behind the learned room's last change ("" before one).
	RoomWhy string `json:"admission_room_why,omitempty"`
}

// Snapshot is the scheduler's state and measurements at one instant.
type Snapshot struct {
	LatencyBudgetMS float64 `json:"latency_budget_ms"`
	Turn            string  `json:"turn"` // worker id holding the turn, "action", or ""
	TurnKind        string  `json:"turn_kind,omitempty"`
	Turns           uint64  `json:"turns"`
	Overruns        uint64  `json:"overruns"`
	// DurationsClamped and HoldExpired are the workloads' counts summed, including
	// workloads since forgotten.
	DurationsClamped uint64          `json:"durations_clamped"`
	HoldExpired      uint64          `json:"hold_expired"`
	TrainingPaused   bool            `json:"training_paused"`
	Workers          []WorkerInfo    `json:"workers"`   // live, in registration order
	Workloads        []WorkloadStats `json:"workloads"` // in order of first registration
}

// Workload returns the stats of the named workload (role train or infer).
func (s Snapshot) Workload(role, name string) (WorkloadStats, bool) {
	for _, w := range s.Workloads {
		if w.Role == role && w.Workload == name {
			return w, true
		}
	}
	return WorkloadStats{}, false
}

// Snapshot returns the current measurements.
func (s *Scheduler) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	snap := Snapshot{LatencyBudgetMS: ms(s.latency), Turns: s.turns, Overruns: s.overruns, TrainingPaused: s.trainPaused,
		DurationsClamped: s.clamped, HoldExpired: s.expired}
	if t := s.turn; t != nil {
		snap.TurnKind = t.grant.Kind
		snap.Turn = "action"
		if t.w != nil {
			snap.Turn = t.w.id
		}
	}
	for _, w := range s.order {
		snap.Workers = append(snap.Workers, WorkerInfo{ID: w.id, Role: w.spec.Role, Workload: w.spec.Workload,
			Batch: w.spec.Batch, BatchSizes: slices.Clone(w.spec.BatchSizes), PID: w.spec.PID, UID: w.spec.UID, Waiting: w.wantTurn, Queued: len(w.queue),
			NoProfiles: w.spec.NoProfiles})
		if w.spec.Role == proto.RoleTrain && len(w.spec.MicroBatches) > 0 {
			wi := &snap.Workers[len(snap.Workers)-1]
			wi.MicroBatches, wi.MicroBatch, wi.MicroBatchChanges = slices.Clone(w.spec.MicroBatches), w.microSize(), w.microChanges
			wi.MicroBatchFits = s.roomFits(now, s.expTrainAt(w, w.spec.MicroBatches[0]))
		}
	}
	for _, wl := range s.wlOrder {
		st := wl.st
		ws := WorkloadStats{
			Workload: wl.name, Role: wl.role, LiveWorkers: wl.live,
			Requests: st.requests, Served: st.served, Failed: st.failed, DeadlineMisses: st.misses,
			Latency:       quantiles(st.latency.values(now)),
			LatencyRecent: quantiles(st.recent.values(now)),
			ArrivalRateHz: st.rate(now, wl.since),
			Minibatches:   st.minibatches, Samples: st.samplesTotal,
			TurnWait:         quantiles(st.wait.values(now)),
			Overruns:         st.overruns,
			StarvedAdmits:    st.starved,
			DurationsClamped: st.clamped,
			HoldExpired:      st.expired,

			DurationsUnderReported: st.underReported,
			Refused:                st.refused,
		}
		if wl.role == proto.RoleTrain {
			n, span := st.samples.sum(now, wl.since)
			if span > 0 {
				ws.ThroughputPerS = n / span.Seconds()
			}
			if wl.train.n > 0 {
				ws.ExpectedTrainMS = wl.train.guarded(s.cfg.DevK)
			}
			for b, e := range wl.trainMicro {
				if e.n > 0 {
					if ws.ExpectedMicroMS == nil {
						ws.ExpectedMicroMS = map[int]float64{}
					}
					ws.ExpectedMicroMS[b] = e.guarded(s.cfg.DevK)
				}
			}
		} else {
			ws.LatencyBudgetMS = ms(s.latency)
			if l, ok := s.streamBudget[wl.name]; ok {
				ws.LatencyBudgetMS = ms(l)
			}
			ws.AdmissionRoomMS = ms(s.cfg.Margin + wl.room.extra)
			ws.RoomLearnedMS = ms(wl.room.extra)
			ws.RoomChanges = wl.room.changes
			ws.RoomWhy = wl.room.why
		}
		if wl.role != proto.RoleTrain && len(wl.infer) > 0 {
			ws.ExpectedBatchMS = map[int]float64{}
			for b, e := range wl.infer {
				if e.n > 0 {
					ws.ExpectedBatchMS[b] = e.guarded(s.cfg.DevK)
				}
			}
		}
		snap.Workloads = append(snap.Workloads, ws)
	}
	return snap
}

// rateLimit lets one log line through per interval and counts the ones held back, so a
// misbehaving local process cannot flood fulcrumd's log (or its disk through journald).
type rateLimit struct {
	last    time.Time
	dropped int
}

// allow reports whether to log now, and how many were held back since the last one.
func (r *rateLimit) allow(now time.Time, every time.Duration) (bool, int) {
	if !r.last.IsZero() && now.Sub(r.last) < every {
		r.dropped++
		return false, 0
	}
	n := r.dropped
	r.last, r.dropped = now, 0
	return true, n
}
