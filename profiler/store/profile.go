package store

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// Sources of a profile: where its numbers came from.
const (
	SourceSim    = "sim"    // measured on the simulated board
	SourceTegra  = "tegra"  // measured on a real Jetson
	SourceImport = "import" // imported from a table that did not say (e.g. a plain ground-truth CSV)
	SourceLive   = "live"   // measured by fulcrumd through its workers' profile grants, while serving
)

// TimeStats summarises the measured minibatch times, in milliseconds.
type TimeStats struct {
	Mean   float64 `json:"mean"`
	P50    float64 `json:"p50"`
	P95    float64 `json:"p95"`
	Stddev float64 `json:"stddev"` // sample standard deviation of one minibatch time
}

// PowerStats summarises the board power samples taken while minibatches ran, in milliwatts.
type PowerStats struct {
	Mean   float64 `json:"mean"`
	Stddev float64 `json:"stddev"`
}

// Profile is one measurement: a workload in one role, at one mode and batch size, on one
// board. It is stored as JSON exactly as tagged here; the field names carry the units.
type Profile struct {
	Board    string         `json:"board"`
	Workload string         `json:"workload"`
	Role     truth.Role     `json:"role"`
	Mode     powermode.Mode `json:"mode"`
	Batch    int            `json:"batch"`
	// MicroBatch is, for a training profile, the samples of one micro-batch turn of the
	// minibatch Batch (issue 32: Batch/MicroBatch turns with gradient accumulation); 0
	// (absent, as in every store written before it existed) is the whole minibatch.
	MicroBatch   int        `json:"micro_batch,omitempty"`
	TimeMS       TimeStats  `json:"time_ms"`
	PowerMW      PowerStats `json:"power_mw"`
	Samples      int        `json:"samples"`       // measured minibatches (time samples)
	PowerSamples int        `json:"power_samples"` // board power readings taken while they ran
	Warmup       int        `json:"warmup"`        // minibatches run and discarded first
	StartedAt    time.Time  `json:"started_at"`    // UTC
	FinishedAt   time.Time  `json:"finished_at"`   // UTC
	RSE          float64    `json:"rse"`           // achieved relative standard error of TimeMS.Mean
	Source       string     `json:"source"`        // SourceSim, SourceTegra or SourceImport
	// Repeats is how many separate measurements (runs) the values pool; 0 means one. A
	// searcher measures a mode again to confirm it, and the decision trusts the pooled
	// values more (plan.Decider).
	Repeats int `json:"repeats,omitempty"`
	// Throttled is set when the board throttled while the profile was measured: the
	// numbers are those of the slower clocks it really ran, not the mode's cold ones
	// (docs/profiler.md "Profiles taken while the board throttles"). Absent in stores
	// written before it existed, which read as not throttled.
	Throttled *Throttled `json:"throttled,omitempty"`
	// Bound marks a whole training minibatch that was not run: at its mode it was over
	// the latency budget's admission room when the live profiler visited, so its
	// batches would only have made requests late (docs/controller.md "The live
	// profiler"). TimeMS is the largest micro-batch turn measured there scaled to the
	// minibatch (an upper bound: a bigger batch uses the GPU at least as well), PowerMW
	// that turn's power raised by the stored modes' ratio (at least as much). fulcrumd
	// measures it for real on a visit where it fits the room. Absent (false) in every
	// profile that was measured, and in stores written before it existed.
	Bound bool `json:"bound,omitempty"`
}

// Throttled says how a profile's measurement was throttled.
type Throttled struct {
	Readings  int   `json:"readings"`              // heat readings that showed a clock under its floor
	GPUHzMin  int64 `json:"gpu_hz_min"`            // the slowest GPU clock seen running
	CPUKHzMin int64 `json:"cpu_khz_min,omitempty"` // the slowest CPU clock seen running
}

// NoteHeat adds a heat reading to t (nil: none yet) and returns the result, which
// stays nil while no reading has shown throttling.
func NoteHeat(t *Throttled, h powermode.HeatReading) *Throttled {
	if !h.Throttled {
		return t
	}
	if t == nil {
		t = &Throttled{GPUHzMin: h.GPUHz, CPUKHzMin: h.CPUKHz}
	}
	t.Readings++
	if h.GPUHz > 0 && h.GPUHz < t.GPUHzMin {
		t.GPUHzMin = h.GPUHz
	}
	if h.CPUKHz > 0 && (t.CPUKHzMin == 0 || h.CPUKHz < t.CPUKHzMin) {
		t.CPUKHzMin = h.CPUKHz
	}
	return t
}

// Key identifies what a profile measures; a store holds at most one profile per key.
type Key struct {
	Board    string
	Workload string
	Role     truth.Role
	Mode     powermode.Mode
	Batch    int
	// MicroBatch is the micro-batch turn's samples of a training minibatch of Batch
	// (Profile.MicroBatch); 0 the whole minibatch.
	MicroBatch int
}

// Key returns the profile's identity.
func (p Profile) Key() Key { return Key{p.Board, p.Workload, p.Role, p.Mode, p.Batch, p.MicroBatch} }

// Turn is the samples one measured batch of k runs: the micro-batch's when k is one,
// else the batch's.
func (k Key) Turn() int {
	if k.MicroBatch > 0 {
		return k.MicroBatch
	}
	return k.Batch
}

func (k Key) String() string {
	if k.MicroBatch > 0 {
		return fmt.Sprintf("%s/%s/%s/%s/batch %d micro-batch %d", k.Board, k.Workload, k.Role, k.Mode, k.Batch, k.MicroBatch)
	}
	return fmt.Sprintf("%s/%s/%s/%s/batch %d", k.Board, k.Workload, k.Role, k.Mode, k.Batch)
}

// Row converts a profile to a ground-truth row (docs/design.md §8).
func (p Profile) Row() truth.Row {
	return truth.Row{Workload: p.Workload, Role: p.Role, Mode: p.Mode, Batch: p.Batch, MicroBatch: p.MicroBatch, TimeMS: p.TimeMS.Mean, PowerMW: p.PowerMW.Mean}
}

// Validate checks a key for what the store cannot hold.
func (k Key) Validate() error {
	switch {
	case k.Board == "":
		return errors.New("board is empty")
	case k.Workload == "":
		return errors.New("workload is empty")
	case k.Batch < 1:
		return fmt.Errorf("batch %d: must be at least 1", k.Batch)
	case k.MicroBatch < 0:
		return fmt.Errorf("micro-batch %d: must be 0 (the whole minibatch) or a divisor of the batch", k.MicroBatch)
	case k.MicroBatch > 0 && k.Role != truth.Train:
		return fmt.Errorf("micro-batch %d on a %s profile: only training runs micro-batches; drop micro_batch", k.MicroBatch, k.Role)
	case k.MicroBatch > 0 && (k.MicroBatch >= k.Batch || k.Batch%k.MicroBatch != 0):
		return fmt.Errorf("micro-batch %d is not a divisor of the minibatch %d below it: a micro-batch is batch/k samples for k ≥ 2", k.MicroBatch, k.Batch)
	}
	if _, err := truth.ParseRole(string(k.Role)); err != nil {
		return err
	}
	return k.Mode.Validate()
}

// Validate checks a profile before it is stored or after it is read back.
func (p Profile) Validate() error {
	if err := p.Key().Validate(); err != nil {
		return fmt.Errorf("profile %s: %w", p.Key(), err)
	}
	bad := func(f string, a ...any) error {
		return fmt.Errorf("profile %s: %s", p.Key(), fmt.Sprintf(f, a...))
	}
	for _, v := range []struct {
		name     string
		v        float64
		positive bool
	}{
		{"time_ms.mean", p.TimeMS.Mean, true}, {"time_ms.p50", p.TimeMS.P50, true},
		{"time_ms.p95", p.TimeMS.P95, true}, {"time_ms.stddev", p.TimeMS.Stddev, false},
		{"power_mw.mean", p.PowerMW.Mean, true}, {"power_mw.stddev", p.PowerMW.Stddev, false},
		{"rse", p.RSE, false},
	} {
		if math.IsNaN(v.v) || math.IsInf(v.v, 0) || v.v < 0 || (v.positive && v.v == 0) {
			return bad("%s = %v: want a finite number, %s", v.name, v.v, map[bool]string{true: "above zero", false: "zero or more"}[v.positive])
		}
	}
	switch {
	case p.Samples < 1:
		return bad("samples = %d: want at least 1", p.Samples)
	case p.PowerSamples < 0:
		return bad("power_samples = %d: want zero or more", p.PowerSamples)
	case p.Warmup < 0:
		return bad("warmup = %d: want zero or more", p.Warmup)
	case p.FinishedAt.Before(p.StartedAt):
		return bad("finished_at %s is before started_at %s", p.FinishedAt.Format(time.RFC3339Nano), p.StartedAt.Format(time.RFC3339Nano))
	}
	if t := p.Throttled; t != nil && (t.Readings < 1 || t.GPUHzMin < 0 || t.CPUKHzMin < 0) {
		return bad("throttled = %+v: want at least 1 reading and clocks of zero or more", *t)
	}
	switch p.Source {
	case SourceSim, SourceTegra, SourceImport, SourceLive:
	default:
		return bad("source %q: want %s, %s, %s or %s", p.Source, SourceSim, SourceTegra, SourceImport, SourceLive)
	}
	return nil
}

// normalize puts times in UTC without a monotonic reading, so a stored profile reads back
// equal to what was written and exports byte-identically.
func (p Profile) normalize() Profile {
	p.StartedAt = p.StartedAt.UTC()
	p.FinishedAt = p.FinishedAt.UTC()
	return p
}
