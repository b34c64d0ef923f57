package api

// The API's own wire types for what the scheduler and the store report. The server
// copies the internal types into them field by field (server.WorkersFrom,
// WorkloadsFrom, ImportResponseFrom, ProfileFrom) so that renaming a field or changing
// a JSON tag inside fulcrumd never changes the HTTP API; testdata/status.golden.json
// pins the shape.

// Worker is one live worker.
type Worker struct {
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
	// MicroBatches (train) are the micro-batch sizes the worker declared (its minibatch
	// included); MicroBatch the size its minibatches run at now (issue 32).
	MicroBatches      []int  `json:"micro_batches,omitempty"`
	MicroBatch        int    `json:"micro_batch,omitempty"`
	MicroBatchChanges uint64 `json:"micro_batch_changes,omitempty"`
	// MicroBatchFits: the smallest declared micro-batch fits the streams' admission room.
	MicroBatchFits bool `json:"micro_batch_fits,omitempty"`
}

// Quantiles summarise a window of milliseconds.
type Quantiles struct {
	Count int     `json:"count"`
	P50MS float64 `json:"p50_ms"`
	P95MS float64 `json:"p95_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
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
	// LatencyRecent is Latency over the scheduler's recent window only.
	LatencyRecent Quantiles `json:"latency_recent"`
	ArrivalRateHz float64   `json:"arrival_rate_hz"`
	// LatencyBudgetMS is the latency budget the workload's requests get: its own
	// (fulcrumctl budget set --workload) or the shared one.
	LatencyBudgetMS float64 `json:"latency_budget_ms,omitempty"`
	// ExpectedBatchMS is the expected inference batch time by batch size (measured sizes).
	ExpectedBatchMS map[int]float64 `json:"expected_batch_ms,omitempty"`

	// Training.
	Minibatches     uint64  `json:"minibatches"`
	Samples         uint64  `json:"samples"`
	ThroughputPerS  float64 `json:"throughput_samples_per_s"`
	ExpectedTrainMS float64 `json:"expected_minibatch_ms,omitempty"`
	// ExpectedMicroMS is the expected training turn (ms) by micro-batch size below the
	// minibatch (issue 32; measured sizes).
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
	// (the held time counted); Refused counts inference requests refused with
	// rate_limited (the stream asked for more than its share of the GPU).
	DurationsUnderReported uint64 `json:"durations_under_reported,omitempty"`
	Refused                uint64 `json:"refused,omitempty"`
	// AdmissionRoomMS is the room (ms) the scheduler keeps before the stream's
	// deadlines: scheduler.margin_ms plus AdmissionRoomLearnedMS, learned from its
	// latency window (docs/runtime.md); AdmissionRoomChanges counts the learned changes.
	AdmissionRoomMS        float64 `json:"admission_room_ms,omitempty"`
	AdmissionRoomLearnedMS float64 `json:"admission_room_learned_ms,omitempty"`
	AdmissionRoomChanges   uint64  `json:"admission_room_changes,omitempty"`
	// AdmissionRoomWhy is the rule behind the learned room's last change.
	AdmissionRoomWhy string `json:"admission_room_why,omitempty"`
}

// ImportResponse is POST /v1/profiles/import's answer.
type ImportResponse struct {
	Added     int `json:"added"`
	Unchanged int `json:"unchanged"` // identical profile already stored
	Replaced  int `json:"replaced"`  // only with Overwrite
}
