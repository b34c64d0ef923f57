// Package proto defines fulcrumd's worker protocol: newline-delimited JSON messages on a
// unix socket, one JSON object per line. docs/protocol.md describes every message; this
// package holds the message type, its validation and a line codec that survives any
// input (malformed, oversized, unknown) without panicking or losing its place.
package proto

import (
	"fmt"
	"math"
)

// Version is the protocol version a worker states in register and fulcrumd states in
// registered. A change that old workers would misread bumps it.
const Version = 1

// MaxLineBytes is the default cap on one message line, newline included. Arrivals and
// releases for a batch of a few hundred requests fit comfortably.
const MaxLineBytes = 64 << 10

// Message types. Worker → fulcrumd: register, arrivals, acquire, release, heartbeat.
// fulcrumd → worker: registered, grant, heartbeat, error.
const (
	TypeRegister   = "register"
	TypeRegistered = "registered"
	TypeArrivals   = "arrivals"
	TypeAcquire    = "acquire"
	TypeGrant      = "grant"
	TypeRelease    = "release"
	TypeHeartbeat  = "heartbeat"
	TypeError      = "error"
)

// Roles a worker registers with.
const (
	RoleTrain = "train"
	RoleInfer = "infer"
)

// Grant kinds. A profile grant asks the worker to run a synthetic batch of the given size
// (any role) so that a profiler can time the live workload at the current power mode.
const (
	KindTrain   = "train"
	KindInfer   = "infer"
	KindProfile = "profile"
)

// Error codes carried by an error message. Each message also says what to do.
const (
	CodeBadJSON       = "bad_json"       // the line is not a JSON object of the message shape
	CodeTooLong       = "too_long"       // the line exceeds the size cap; it was discarded
	CodeUnknownType   = "unknown_type"   // "type" names no message
	CodeBadVersion    = "bad_version"    // "v" is not a version this daemon speaks
	CodeInvalid       = "invalid"        // a field is missing or out of range
	CodeOutOfOrder    = "out_of_order"   // e.g. acquire before register, release without a grant
	CodeForbidden     = "forbidden"      // acting for a registration made on another connection
	CodeNotRegistered = "not_registered" // the message needs a registration first
	CodeShutdown      = "shutting_down"  // fulcrumd is stopping; reconnect later
	CodeTurnExpired   = "turn_expired"   // the turn was held past the hold limit; the connection is closed
	CodeIdleTimeout   = "idle_timeout"   // no register within the time allowed; the connection is closed
	CodeBusy          = "busy"           // too many worker connections; the connection is closed
	CodeRateLimited   = "rate_limited"   // arrivals beyond the stream's share were refused (request_ids)
	CodeInternal      = "internal"       // a fulcrumd bug; the message says what failed
)

// Request is one inference request reported in arrivals. AgeMS is how long ago (in the
// worker's own measurement) the request arrived before this report; fulcrumd stamps the
// arrival with its own monotonic clock minus AgeMS, so no clocks are compared across
// processes.
type Request struct {
	ID    string  `json:"id"`
	AgeMS float64 `json:"age_ms,omitempty"`
}

// Result is the outcome of one inference request in a release.
type Result struct {
	ID    string `json:"id"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// Msg is every protocol message: a type tag and the fields that type uses (the others
// are left empty and omitted on the wire). One flat shape keeps the codec and the
// Python client trivial; Validate checks each type's fields.
type Msg struct {
	Type string `json:"type"`
	V    int    `json:"v,omitempty"`
	// Seq is an optional worker-chosen number echoed in replies (registered, grant for an
	// acquire, error), so a worker can match a reply to what it sent.
	Seq uint64 `json:"seq,omitempty"`

	// register
	Role       string `json:"role,omitempty"`        // train | infer
	Workload   string `json:"workload,omitempty"`    // workload name, e.g. resnet18
	Batch      int    `json:"batch,omitempty"`       // train: minibatch size B_T; infer: batch size to serve; grant: batch to run
	BatchSizes []int  `json:"batch_sizes,omitempty"` // infer: batch sizes the worker can serve
	PID        int    `json:"pid,omitempty"`         // the worker's own pid (SO_PEERCRED is authoritative)
	// Profiles says whether the worker runs profile batches: false declines them (a
	// client with no on_profile handler, which could only answer at once and store a
	// bogus profile); omitted (nil) accepts them, as every client before it did.
	Profiles *bool `json:"profiles,omitempty"`
	// MicroBatches (train) are the micro-batch sizes the worker accepts: divisors of its
	// minibatch (the minibatch itself may be listed and is always accepted). A worker that
	// declares them runs a minibatch as k = batch/micro_batch turns with gradient
	// accumulation when a grant says so; omitted: whole minibatches only (k = 1).
	MicroBatches []int `json:"micro_batches,omitempty"`

	// registered (and optionally on later messages, checked against the connection)
	WorkerID string `json:"worker_id,omitempty"`
	Token    string `json:"token,omitempty"`
	// registered: the latency budget requests are held to, for the worker's information.
	LatencyBudgetMS float64 `json:"latency_budget_ms,omitempty"`

	// arrivals
	Requests []Request `json:"requests,omitempty"`

	// grant
	Grant      uint64   `json:"grant,omitempty"`       // grant number, echoed in release
	Kind       string   `json:"kind,omitempty"`        // train | infer | profile
	RequestIDs []string `json:"request_ids,omitempty"` // infer: the requests to serve, oldest first; rate_limited error: the requests refused
	// MicroBatch (train grant) is the micro-batch size to run in this turn: one of the
	// registered micro_batches; absent (0): the whole minibatch. A minibatch is k
	// consecutive grants of micro_batch samples; the worker steps its optimizer after the
	// k-th (the turn that completes batch samples since its last step).
	MicroBatch int `json:"micro_batch,omitempty"`
	// DeadlineMS is how long, from the grant's sending, the worker has before the turn is
	// considered overrun; for inference also the tightest request deadline.
	DeadlineMS float64 `json:"deadline_ms,omitempty"`

	// release
	DurationMS float64  `json:"duration_ms,omitempty"` // the worker's measured minibatch time
	Samples    int      `json:"samples,omitempty"`     // train: samples processed (default: the grant's micro_batch, else the registered batch)
	Results    []Result `json:"results,omitempty"`     // infer: per-request outcome (default: all ok)

	// error
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	Ref     string `json:"ref,omitempty"` // the type of the message the error answers, when known
}

// Limits on list sizes and names, so one message cannot make fulcrumd allocate without
// bound beyond the line cap.
const (
	MaxBatch       = 4096
	MaxNameLen     = 128
	MaxRequestsMsg = 4096
	// MaxMicroBatches caps the micro_batches a training worker may declare.
	MaxMicroBatches = 16
)

// Error is a protocol error: a code from the list above and a message saying what to
// do. Decode returns it for input the connection can survive.
type Error struct {
	Code    string
	Message string
	Ref     string
	// IDs are the requests an error refused (rate_limited), sent as request_ids.
	IDs []string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf builds a protocol error.
func Errorf(code, ref, format string, a ...any) *Error {
	return &Error{Code: code, Ref: ref, Message: fmt.Sprintf(format, a...)}
}

// ErrorMsg is the wire form of e.
func ErrorMsg(e *Error, seq uint64) Msg {
	return Msg{Type: TypeError, Code: e.Code, Message: e.Message, Ref: e.Ref, Seq: seq, RequestIDs: e.IDs}
}

// Validate checks a message received by fulcrumd from a worker: known type, version,
// and the fields that type needs. It does not check ordering (that needs connection
// state); see daemon.
func (m *Msg) Validate() *Error {
	switch m.Type {
	case TypeRegister, TypeArrivals, TypeAcquire, TypeRelease, TypeHeartbeat:
	case "":
		return Errorf(CodeBadJSON, "", `missing "type"; every line must be a JSON object with a "type" field (see docs/protocol.md)`)
	case TypeRegistered, TypeGrant, TypeError:
		return Errorf(CodeUnknownType, m.Type, "%q is sent by fulcrumd, not by workers", m.Type)
	default:
		return Errorf(CodeUnknownType, clip(m.Type), "unknown message type %q; workers send register, arrivals, acquire, release or heartbeat", clip(m.Type))
	}
	if m.V != 0 && m.V != Version {
		return Errorf(CodeBadVersion, m.Type, "protocol version %d is not supported; this fulcrumd speaks v%d, upgrade the client or the daemon", m.V, Version)
	}
	if len(m.WorkerID) > MaxNameLen || len(m.Token) > MaxNameLen {
		return Errorf(CodeInvalid, m.Type, "worker_id/token longer than %d bytes", MaxNameLen)
	}
	switch m.Type {
	case TypeRegister:
		if m.V != Version {
			return Errorf(CodeBadVersion, m.Type, `register must state "v":%d (got %d); upgrade the client`, Version, m.V)
		}
		if m.Role != RoleTrain && m.Role != RoleInfer {
			return Errorf(CodeInvalid, m.Type, `role must be "train" or "infer", got %q`, clip(m.Role))
		}
		if m.Workload == "" || len(m.Workload) > MaxNameLen {
			return Errorf(CodeInvalid, m.Type, "workload must be a name of 1..%d bytes", MaxNameLen)
		}
		if m.Batch < 0 || m.Batch > MaxBatch {
			return Errorf(CodeInvalid, m.Type, "batch %d out of range 1..%d", m.Batch, MaxBatch)
		}
		if len(m.BatchSizes) > 64 {
			return Errorf(CodeInvalid, m.Type, "at most 64 batch_sizes")
		}
		for _, b := range m.BatchSizes {
			if b < 1 || b > MaxBatch {
				return Errorf(CodeInvalid, m.Type, "batch size %d out of range 1..%d", b, MaxBatch)
			}
		}
		if m.PID < 0 {
			return Errorf(CodeInvalid, m.Type, "pid must not be negative")
		}
		if err := checkMicroBatches(m); err != nil {
			return err
		}
	case TypeArrivals:
		if len(m.Requests) == 0 {
			return Errorf(CodeInvalid, m.Type, "arrivals needs at least one request {id, age_ms}")
		}
		if len(m.Requests) > MaxRequestsMsg {
			return Errorf(CodeInvalid, m.Type, "at most %d requests per arrivals message; send several", MaxRequestsMsg)
		}
		for _, r := range m.Requests {
			if r.ID == "" || len(r.ID) > MaxNameLen {
				return Errorf(CodeInvalid, m.Type, "request id must be 1..%d bytes", MaxNameLen)
			}
			if !finite(r.AgeMS) || r.AgeMS < 0 || r.AgeMS > 3.6e6 {
				return Errorf(CodeInvalid, m.Type, "request %q: age_ms must be 0..3600000", clip(r.ID))
			}
		}
	case TypeRelease:
		if m.Grant == 0 {
			return Errorf(CodeInvalid, m.Type, "release needs the grant number it ends")
		}
		if !finite(m.DurationMS) || m.DurationMS < 0 || m.DurationMS > 3.6e6 {
			return Errorf(CodeInvalid, m.Type, "duration_ms must be 0..3600000 (the measured minibatch time)")
		}
		if m.Samples < 0 || m.Samples > 1<<30 {
			return Errorf(CodeInvalid, m.Type, "samples must not be negative")
		}
		if len(m.Results) > MaxRequestsMsg {
			return Errorf(CodeInvalid, m.Type, "at most %d results", MaxRequestsMsg)
		}
		for _, r := range m.Results {
			if r.ID == "" || len(r.ID) > MaxNameLen {
				return Errorf(CodeInvalid, m.Type, "result id must be 1..%d bytes", MaxNameLen)
			}
		}
	}
	return nil
}

// checkMicroBatches validates a register's micro_batches: training only, each a divisor
// of the minibatch, no repeats, at most MaxMicroBatches.
func checkMicroBatches(m *Msg) *Error {
	if len(m.MicroBatches) == 0 {
		return nil
	}
	if m.Role != RoleTrain {
		return Errorf(CodeInvalid, m.Type, "micro_batches is for training workers (role train); drop it from an inference registration")
	}
	if m.Batch < 1 {
		return Errorf(CodeInvalid, m.Type, "micro_batches needs the minibatch size: state batch (e.g. 32) with micro_batches (e.g. [8, 16])")
	}
	if len(m.MicroBatches) > MaxMicroBatches {
		return Errorf(CodeInvalid, m.Type, "at most %d micro_batches, got %d; list the few sizes worth running", MaxMicroBatches, len(m.MicroBatches))
	}
	for i, mb := range m.MicroBatches {
		if mb < 1 || mb > m.Batch || m.Batch%mb != 0 {
			return Errorf(CodeInvalid, m.Type, "micro_batches: %d does not divide the minibatch %d; list divisors of batch, from 1 to %d", mb, m.Batch, m.Batch)
		}
		for _, prev := range m.MicroBatches[:i] {
			if prev == mb {
				return Errorf(CodeInvalid, m.Type, "micro_batches lists %d twice; list each size once", mb)
			}
		}
	}
	return nil
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// clip shortens an echoed string so an error reply never repeats a huge input.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
