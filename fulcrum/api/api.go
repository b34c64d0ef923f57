// Package api is the wire of fulcrumd's control API (HTTP/JSON on the unix socket
// <runtime_dir>/control.sock): the JSON type of every endpoint, the error answer and its
// codes, the socket's name. It is a leaf — the standard library and a power mode as a
// plain value (powermode/knobs) — so a program that talks to fulcrumd links none of
// fulcrumd's internals; deps_test.go holds it there. The Go client is fulcrum/api/client,
// the HTTP server (access control by SO_PEERCRED, the Controller interface fulcrumd
// implements) fulcrum/api/server. docs/api.md documents every endpoint.
package api

import (
	"encoding/json"
	"time"

	"github.com/fulcrum-edge/fulcrum/internal/paths"
	"github.com/fulcrum-edge/fulcrum/powermode/knobs"
)

// Mode is a power mode (the same type as Mode).
type Mode = knobs.Mode

// Version is the path prefix of this API ("/v1/...").
const Version = "v1"

// SocketName is the control socket's file name in the runtime directory.
const SocketName = paths.ControlSocketName

// DefaultSocket is where fulcrumctl looks when neither --socket nor FULCRUM_SOCKET is set.
const DefaultSocket = paths.ControlSocket

// GroupName is the group whose members may change things (PUT/POST); root always may.
const GroupName = "fulcrum"

// Health is GET /v1/healthz: 200 when Ready, 503 otherwise, with this body either way.
type Health struct {
	// Ready: every required check passes.
	Ready bool `json:"ready"`
	// Degraded: an optional check fails (fulcrumd runs, without it).
	Degraded bool          `json:"degraded"`
	Checks   []HealthCheck `json:"checks"`
}

// HealthCheck is one part of fulcrumd: "board", "store", "control_loop" (required) and
// "metrics" (optional, present when metrics are configured).
type HealthCheck struct {
	Name     string `json:"name"`
	OK       bool   `json:"ok"`
	Optional bool   `json:"optional,omitempty"`
	// Detail says what was checked, or what failed and what to do.
	Detail string `json:"detail"`
}

// Caller is who made a request, from the socket's peer credentials (SO_PEERCRED).
type Caller struct {
	UID    int    `json:"uid"`
	GID    int    `json:"gid"`
	PID    int    `json:"pid"`
	Comm   string `json:"comm,omitempty"`   // /proc/<pid>/comm
	Groups []int  `json:"groups,omitempty"` // supplementary groups from /proc/<pid>/status
}

// Budgets are the operator's targets as the daemon holds them (docs/design.md §2). Unlike
// the planner's budgets they can say "measure the rate" and "no power budget".
type Budgets struct {
	// LatencyMS is L, on the Quantile of per-request latency.
	LatencyMS float64 `json:"latency_ms"`
	// PowerMW is P on the 1 s moving average of board power; 0 means no power budget.
	PowerMW float64 `json:"power_mw"`
	// RateAuto: λ is the measured arrival rate; RateRPS is then the rate in use (0
	// until measured). Otherwise RateRPS is the operator's λ.
	RateAuto bool    `json:"rate_auto"`
	RateRPS  float64 `json:"rate_rps"`
	Quantile float64 `json:"quantile"`
	RhoMax   float64 `json:"rho_max"`
	// Streams are the inference streams with budgets of their own (by workload name);
	// every other stream uses the latency and rate above.
	Streams []StreamBudgets `json:"streams,omitempty"`
	// Warnings (PUT /v1/budgets replies only) say what in the update looks like a
	// mistake but was applied: a workload no worker has registered (a typo, or one
	// not started yet), a field that does not fit the workload's role.
	Warnings []string `json:"warnings,omitempty"`
}

// StreamBudgets are one inference stream's own budgets (docs/design.md §2, "Model v1
// for several workloads"). A zero field uses the shared budget: the shared latency, and
// the shared fixed rate or, where the rate is auto, the stream's own measured rate.
//
// TrainWeight is a training workload's share weight instead: with several training jobs,
// each gets the share w_j/Σw of the GPU time training gets (default 1).
type StreamBudgets struct {
	Workload    string  `json:"workload"`
	LatencyMS   float64 `json:"latency_ms,omitempty"`
	RateRPS     float64 `json:"rate_rps,omitempty"`
	TrainWeight float64 `json:"train_weight,omitempty"`
}

// BudgetsUpdate is the body of PUT /v1/budgets: nil fields keep their value.
// Setting rate_rps turns rate_auto off; rate_auto true drops the set rate.
//
// With Workload set the update is that workload's own budgets: latency_ms, rate_rps and
// rate_auto (back to the shared rate) for an inference stream, train_weight for a
// training job; shared drops the workload's own budgets altogether.
type BudgetsUpdate struct {
	LatencyMS *float64 `json:"latency_ms,omitempty"`
	PowerMW   *float64 `json:"power_mw,omitempty"`
	RateRPS   *float64 `json:"rate_rps,omitempty"`
	RateAuto  *bool    `json:"rate_auto,omitempty"`
	Quantile  *float64 `json:"quantile,omitempty"`
	RhoMax    *float64 `json:"rho_max,omitempty"`
	Workload  string   `json:"workload,omitempty"`
	Shared    bool     `json:"shared,omitempty"`
	// TrainWeight (with Workload, a training workload) is its time-share weight.
	TrainWeight *float64 `json:"train_weight,omitempty"`

	// workloadGiven: the JSON body had a "workload" key (UnmarshalJSON), so an empty
	// or null workload is a mistake, not the shared budgets (WorkloadKey).
	workloadGiven bool
}

// Rail is one power rail's reading.
type Rail struct {
	Name    string  `json:"name"`
	PowerMW float64 `json:"power_mw"`
}

// Power is the board's power now.
type Power struct {
	// TotalMW is the latest board total; Avg1sMW its 1 s moving average, the value the
	// power budget is checked on, over Avg1sSamples readings. Avg1sSamples 0 means no
	// reading in the last second (just started, or power unreadable): Avg1sMW is then 0
	// and is not a measurement.
	TotalMW      float64   `json:"total_mw"`
	Avg1sMW      float64   `json:"avg_1s_mw"`
	Avg1sSamples int       `json:"avg_1s_samples"`
	Rails        []Rail    `json:"rails"`
	At           time.Time `json:"at"`
}

// Plan is the controller's chosen configuration and what model v1 predicts for it.
type Plan struct {
	Mode       Mode `json:"mode"`
	InferBatch int  `json:"infer_batch"`
	// TrainMicroBatch is the training micro-batch the plan runs each minibatch in (issue
	// 32: k = minibatch/size turns); absent: whole minibatches.
	TrainMicroBatch int `json:"train_micro_batch,omitempty"`
	// TrainJobs is, when several inference streams or training jobs are planned for,
	// every training job with the micro-batch the plan runs it in (absent: whole
	// minibatches); TrainMicroBatch is then the first job's.
	TrainJobs []PlanTrainJob `json:"train_jobs,omitempty"`
	// Feasible is false when no known configuration meets every budget; Binding then
	// names the constraint (latency, power, gpu_share) and training is paused.
	Feasible                  bool      `json:"feasible"`
	Binding                   string    `json:"binding,omitempty"`
	PredLatencyMS             float64   `json:"predicted_latency_ms"`
	PredPowerMW               float64   `json:"predicted_power_mw"`
	PredThroughputSamplesPerS float64   `json:"predicted_throughput_samples_per_s"`
	Rho                       float64   `json:"rho"`
	Source                    string    `json:"source"` // e.g. "stored-profiles", "gmd", "als", "operator"
	Reason                    string    `json:"reason,omitempty"`
	At                        time.Time `json:"at"`
	// ApplyError is set when this plan is NOT in force: the board refused the mode
	// change (the error); Status.Mode is what the board runs, Degraded is true and
	// fulcrumd retries with a back-off.
	ApplyError string `json:"apply_error,omitempty"`
}

// PlanTrainJob is one training job in a plan for several streams or jobs.
type PlanTrainJob struct {
	Workload string `json:"workload"`
	Batch    int    `json:"batch"` // the minibatch
	// MicroBatch is the samples of each of the minibatch's Batch/MicroBatch turns;
	// absent: whole minibatches.
	MicroBatch int `json:"micro_batch,omitempty"`
}

// Status is GET /v1/status.
type Status struct {
	Version string `json:"version"` // fulcrumd build version
	Board   string `json:"board"`   // catalog name, "sim:NAME" or "none"
	Mode    Mode   `json:"mode"`
	// ModeError says why the board's mode could not be read and what to check (Mode is
	// then zero); empty when it was read or there is no board.
	ModeError string  `json:"mode_error,omitempty"`
	ModeHeld  bool    `json:"mode_held"` // an operator-applied mode is held
	Budgets   Budgets `json:"budgets"`
	Plan      *Plan   `json:"plan,omitempty"`  // nil until the first plan
	Power     *Power  `json:"power,omitempty"` // nil without power sensors
	Heat      *Heat   `json:"heat,omitempty"`  // nil without thermal sensors (heat.go)
	// Refine is live refinement at the configuration in force: its evidence, the
	// confirmed configuration, a trial, failed neighbours (nil while off, for several
	// streams or jobs, and before the first live window; docs/controller.md "Live
	// refinement").
	Refine    *Refine         `json:"refine,omitempty"`
	Workers   []Worker        `json:"workers"`
	Workloads []WorkloadStats `json:"workloads"`
	// Streams is every inference stream planned for, with its budget, its planned batch,
	// and its predicted and measured p99 (empty until a training and an inference
	// worker are registered).
	Streams []StreamStatus `json:"streams,omitempty"`
	// TrainingPaused: training gets no turns (infeasible plan, violation, optimize).
	TrainingPaused bool `json:"training_paused"`
	// Degraded: the daemon is running but not as planned; DegradedReason says why and
	// what to do.
	Degraded       bool      `json:"degraded"`
	DegradedReason string    `json:"degraded_reason,omitempty"`
	Optimizing     string    `json:"optimizing,omitempty"` // method of a running optimize
	Turns          uint64    `json:"turns"`
	Overruns       uint64    `json:"overruns"`
	Profiles       int       `json:"profiles"` // stored profiles
	StartedAt      time.Time `json:"started_at"`
	UptimeS        float64   `json:"uptime_s"`
	// Nvpmodel is the nvpmodel mode the board runs (its status file, read now), where
	// the board has one.
	Nvpmodel *NvpmodelMode `json:"nvpmodel,omitempty"`
	// StoodDown: another tool (jetson_clocks, nvpmodel) changed the board's mode and
	// fulcrumd writes none until POST /v1/mode/resume or a budget change
	// (DegradedReason names the other tool's mode).
	StoodDown bool `json:"stood_down,omitempty"`
	// Profiling names the workloads left out of live profiling because their workers
	// declined profile batches (their clients set no on_profile handler).
	Profiling string `json:"profiling,omitempty"`
	// Notices are what the operator must act on that fulcrumd worked around at start
	// (a damaged profile store moved aside: where it went, what to do), kept until
	// fulcrumd restarts.
	Notices []string `json:"notices,omitempty"`
}

// Refine is live refinement in the status (control.RefineStatus on the wire).
type Refine struct {
	Mode  Mode `json:"mode"`
	Batch int  `json:"batch"` // the first stream's
	// Streams is every stream's batch (several streams; the pair's one too).
	Streams []RefineStream `json:"streams,omitempty"`
	// Pooled is what the live windows made of the mode's stored profile.
	Pooled RefinePooled `json:"pooled"`
	// PFeasible is the decision's P(every budget met) there with the evidence.
	PFeasible  float64         `json:"p_feasible"`
	Confirmed  *RefineConfig   `json:"confirmed,omitempty"`
	Trial      *RefineConfig   `json:"trial,omitempty"`
	TrialUntil time.Time       `json:"trial_until,omitzero"`
	Failed     []RefineFailure `json:"failed,omitempty"`
}

// RefinePooled: the live windows pooled, the live/stored ratios applied and the
// repeats the profile counts for.
// TrainRatio and InferRatio are the first job's and stream's; TrainRatios and
// InferRatios every job's and stream's, in the order planned for.
type RefinePooled struct {
	Windows     int       `json:"windows"`
	TrainRatio  float64   `json:"train_ratio"`
	InferRatio  float64   `json:"infer_ratio"`
	PowerRatio  float64   `json:"power_ratio"`
	Repeats     int       `json:"repeats"`
	TrainRatios []float64 `json:"train_ratios,omitempty"`
	InferRatios []float64 `json:"infer_ratios,omitempty"`
}

// RefineStream is one stream's batch in a configuration live refinement names.
type RefineStream struct {
	Workload string `json:"workload"`
	Batch    int    `json:"batch"`
}

// RefineConfig is a configuration confirmed or on trial (Batch the first stream's,
// Streams every stream's).
type RefineConfig struct {
	Mode    Mode           `json:"mode"`
	Batch   int            `json:"batch"`
	Streams []RefineStream `json:"streams,omitempty"`
}

// RefineFailure is a neighbour whose trial failed, left alone until RetryAt.
type RefineFailure struct {
	Mode    Mode           `json:"mode"`
	Batch   int            `json:"batch"`
	Streams []RefineStream `json:"streams,omitempty"`
	Count   int            `json:"count"`
	RetryAt time.Time      `json:"retry_at"`
	Why     string         `json:"why"`
}

// NvpmodelMode is an nvpmodel mode: its id (nvpmodel -m ID) and name (MODE_30W).
type NvpmodelMode struct {
	ID   int    `json:"id"`
	Name string `json:"name,omitempty"`
}

// StreamStatus is one inference stream as fulcrumd plans and measures it.
type StreamStatus struct {
	Workload        string  `json:"workload"`
	Batch           int     `json:"batch"` // planned (0 before a plan)
	LatencyBudgetMS float64 `json:"latency_budget_ms"`
	OwnBudget       bool    `json:"own_budget"` // its own budgets (else the shared ones)
	RateRPS         float64 `json:"rate_rps"`   // measured (EWMA), or the fixed rate
	RateFixed       bool    `json:"rate_fixed"`
	PlanRateRPS     float64 `json:"plan_rate_rps,omitempty"`        // the rate the plan was made for
	PredLatencyMS   float64 `json:"predicted_latency_ms,omitempty"` // model v1's p99 for the plan
	MeasuredP99MS   float64 `json:"measured_p99_ms"`                // over the scheduler's recent window
	ServedRecent    int     `json:"served_recent"`                  // requests that p99 is over
	Rho             float64 `json:"rho,omitempty"`                  // planned share of GPU time
}

// ModeInfo is GET/PUT /v1/mode.
type ModeInfo struct {
	Board   string `json:"board"`
	Current Mode   `json:"current"`
	Planned *Mode  `json:"planned,omitempty"`
	Held    bool   `json:"held"` // Current was applied by an operator and is held
	// Nvpmodel is the nvpmodel mode the board is in (Fulcrum works within its TPC
	// configuration), when known.
	Nvpmodel string `json:"nvpmodel,omitempty"`
	Levels   Levels `json:"levels"`
}

// Levels are the board's allowed values of each knob.
type Levels struct {
	Cores  []int   `json:"cores"`
	CPUKHz []int64 `json:"cpu_khz"`
	GPUHz  []int64 `json:"gpu_hz"`
	EMCHz  []int64 `json:"emc_hz"`
}

// ModeRequest is the body of PUT /v1/mode: a mode, or a live nvpmodel preset by name
// or id (Preset; the mode is then left zero).
type ModeRequest struct {
	Mode   Mode   `json:"mode"`
	Preset string `json:"preset,omitempty"`
}

// Searchers Optimize accepts.
const (
	OptimizeGMD = "gmd"
	OptimizeALS = "als"
)

// OptimizeRequest is the body of POST /v1/optimize.
type OptimizeRequest struct {
	Method string `json:"method"` // gmd or als
	// MaxProfiles caps the modes profiled (0: the method's default, 15 GMD / 50 ALS).
	MaxProfiles int `json:"max_profiles,omitempty"`
}

// OptimizeResult is what an optimize found.
type OptimizeResult struct {
	Method     string  `json:"method"`
	Plan       Plan    `json:"plan"`
	Profiled   int     `json:"profiled_modes"` // modes newly profiled
	Reused     int     `json:"reused_modes"`   // modes answered from the store
	StopReason string  `json:"stop_reason"`
	DurationMS float64 `json:"duration_ms"`
}

// Event kinds fulcrumd's controller records.
const (
	EventBudgets  = "budget"    // budgets changed (with the caller)
	EventPlan     = "plan"      // first choice, or one after an optimize, of mode and batch
	EventReplan   = "replan"    // new choice from stored profiles (rate drift, budget change)
	EventStepDown = "step_down" // immediate move to a safer known mode (power or latency broken)
	EventStepUp   = "step_up"   // back up after the values stayed below budget for a while
	EventApply    = "apply"     // a mode and batch applied (by the controller or an operator), or failed
	EventProfile  = "profile"   // profiling: optimize started/finished, a mode profiled, profiles imported
	EventDegraded = "degraded"  // power unreadable: fell back to the lowest-power mode, or recovered
	EventSettings = "settings"  // at start: where the budgets and a held mode came from (configuration or saved run-time settings)
	EventHealth   = "health"    // an optional part (metrics) failed; fulcrumd runs without it
	// EventExternal: another tool (jetson_clocks, nvpmodel) changed the board's mode and
	// what fulcrumd did (controller.external_change), or fulcrumd took the board back.
	EventExternal = "external_change"
	// Live refinement (docs/controller.md "Live refinement"): a better-ranked neighbour
	// tried for a bounded time; a configuration confirmed by its live evidence (the one
	// in force, or a trial kept); a trial abandoned (a budget broke, or it was not
	// confirmed in time), back to the confirmed configuration.
	EventTrial   = "trial"
	EventConfirm = "confirm"
	EventAbandon = "abandon"
)

// Event is one entry of the controller's event log.
type Event struct {
	Seq     uint64          `json:"seq"` // increasing from 1; a gap means events were lost
	Time    time.Time       `json:"time"`
	Kind    string          `json:"kind"`
	Message string          `json:"message"`          // one readable line
	Caller  *Caller         `json:"caller,omitempty"` // who caused it, for operator actions
	Data    json.RawMessage `json:"data,omitempty"`   // kind-specific detail
}
