package api

import "time"

// Profile is one stored measurement as GET /v1/profiles reports it: a workload in one
// role (train or infer), at one mode and batch size, on one board. Its JSON is the
// profile store's own (server.ProfileFrom copies it field by field).
type Profile struct {
	Board    string `json:"board"`
	Workload string `json:"workload"`
	Role     string `json:"role"`
	Mode     Mode   `json:"mode"`
	Batch    int    `json:"batch"`
	// MicroBatch is, for a training profile, one micro-batch turn's samples of the
	// minibatch Batch (issue 32); absent: the whole minibatch.
	MicroBatch   int        `json:"micro_batch,omitempty"`
	TimeMS       TimeStats  `json:"time_ms"`
	PowerMW      PowerStats `json:"power_mw"`
	Samples      int        `json:"samples"`       // measured minibatches (time samples)
	PowerSamples int        `json:"power_samples"` // board power readings taken while they ran
	Warmup       int        `json:"warmup"`        // minibatches run and discarded first
	StartedAt    time.Time  `json:"started_at"`    // UTC
	FinishedAt   time.Time  `json:"finished_at"`   // UTC
	RSE          float64    `json:"rse"`           // achieved relative standard error of TimeMS.Mean
	Source       string     `json:"source"`        // sim, tegra or import
	// Repeats is how many separate measurements the values pool; 0 means one.
	Repeats int `json:"repeats,omitempty"`
	// Throttled is set when the board throttled while the profile was measured.
	Throttled *Throttled `json:"throttled,omitempty"`
	// Bound marks a whole training minibatch not run (over the latency budget's room at
	// its mode): its time an upper bound from a micro-batch turn (docs/profiler.md).
	Bound bool `json:"bound,omitempty"`
}

// TimeStats summarise one minibatch's time, in milliseconds.
type TimeStats struct {
	Mean   float64 `json:"mean"`
	P50    float64 `json:"p50"`
	P95    float64 `json:"p95"`
	Stddev float64 `json:"stddev"` // sample standard deviation of one minibatch time
}

// PowerStats summarise the board power while minibatches ran, in milliwatts.
type PowerStats struct {
	Mean   float64 `json:"mean"`
	Stddev float64 `json:"stddev"`
}

// Throttled says how a profile's measurement was throttled.
type Throttled struct {
	Readings  int   `json:"readings"`              // heat readings that showed a clock under its floor
	GPUHzMin  int64 `json:"gpu_hz_min"`            // the slowest GPU clock seen running
	CPUKHzMin int64 `json:"cpu_khz_min,omitempty"` // the slowest CPU clock seen running
}

// ProfileFilter selects profiles (GET /v1/profiles and /v1/profiles/export's query):
// empty fields match everything; Role is "train", "infer" or empty.
type ProfileFilter struct {
	Board    string
	Workload string
	Role     string
}

// The profile file formats of export and import.
const (
	FormatCSV  = "csv"  // the ground-truth table plus the columns that make it lossless
	FormatJSON = "json" // {"schema_version": N, "profiles": [Profile, ...]}
)

// ImportOptions are POST /v1/profiles/import's query.
type ImportOptions struct {
	// Format is FormatCSV or FormatJSON; empty: fulcrumd guesses from the content.
	Format string
	// Board is used for CSV rows without a board column (a plain ground-truth table).
	Board string
	// Overwrite replaces stored profiles that differ; without it such a conflict fails
	// the whole import and changes nothing.
	Overwrite bool
}

// ProfilesResponse is GET /v1/profiles.
type ProfilesResponse struct {
	Count    int       `json:"count"`
	Profiles []Profile `json:"profiles"`
}

// WorkersResponse is GET /v1/workers.
type WorkersResponse struct {
	Workers []Worker `json:"workers"`
}

// EventsResponse is GET /v1/events without follow.
type EventsResponse struct {
	Events []Event `json:"events"`
	// Last is the Seq of the last event returned (or since): pass it as since next time.
	Last uint64 `json:"last"`
}
