package control

import (
	"sync"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Kind is what an event records.
type Kind string

// Event kinds. Every decision the controller takes is one of these.
const (
	KindPlan     Kind = "plan"      // first choice (or an explicit optimize) of mode and batch
	KindReplan   Kind = "replan"    // new choice from stored profiles (rate drift, budget change)
	KindStepDown Kind = "step_down" // immediate move to a safer known mode (power or latency broken)
	KindStepUp   Kind = "step_up"   // back up after the values stayed below budget for the hold time
	KindProfile  Kind = "profile"   // a mode profiled live (or abandoned as over budget)
	KindApply    Kind = "apply"     // a mode and batch applied (or failed to apply)
	KindDegraded Kind = "degraded"  // power unreadable: fell back to the lowest-power mode (or recovered)
	KindBudget   Kind = "budget"    // budgets changed
	KindSettings Kind = "settings"  // where the budgets came from at start (configuration or saved run-time settings)
	KindHealth   Kind = "health"    // a part of fulcrumd outside the controller failed (metrics listener)
	// KindExternal: another tool changed the board's mode (stand down, reapply or
	// adopt), or fulcrumd took the board back.
	KindExternal Kind = "external_change"
	KindStore    Kind = "store" // the profile store was found damaged and moved aside (Notice)
	// Live refinement (refine.go): a neighbour the model ranks higher tried for a bounded
	// time, a configuration confirmed by its live evidence (the one in force, or a trial
	// kept), a trial abandoned (a budget broke or no confirmation in time: back to the
	// confirmed configuration).
	KindTrial   Kind = "trial"
	KindConfirm Kind = "confirm"
	KindAbandon Kind = "abandon"
)

// Event is one controller decision or action.
type Event struct {
	Seq    uint64    `json:"seq"`
	Time   time.Time `json:"time"`
	Kind   Kind      `json:"kind"`
	Reason string    `json:"reason"` // in words
	// Mode and Batch are the configuration concerned (zero when none); Batch is the
	// first stream's, Streams every stream's (a decision's and live refinement's events).
	Mode    *powermode.Mode `json:"mode,omitempty"`
	Batch   int             `json:"batch,omitempty"`
	Streams []StreamBatch   `json:"streams,omitempty"`
	// Predicted are model v1's numbers for Mode and Batch at the planning rate.
	Predicted *Prediction `json:"predicted,omitempty"`
	// Measured are what the controller saw when it decided (zero when not relevant).
	Measured *Measured `json:"measured,omitempty"`
	Err      string    `json:"error,omitempty"`
	// Caller is the operator whose request caused the event (API requests).
	Caller *Caller `json:"caller,omitempty"`
}

// Caller is who made an operator's request: the control socket's peer credentials
// (SO_PEERCRED), as the API server took them at accept (it converts its api.Caller).
type Caller struct {
	UID    int    `json:"uid"`
	GID    int    `json:"gid"`
	PID    int    `json:"pid"`
	Comm   string `json:"comm,omitempty"`   // /proc/<pid>/comm
	Groups []int  `json:"groups,omitempty"` // supplementary groups
}

// Prediction is model v1's estimate of a configuration.
type Prediction struct {
	ThroughputSPS float64 `json:"throughput_sps"`
	LatencyMS     float64 `json:"latency_ms"`
	PowerMW       float64 `json:"power_mw"`
	Rho           float64 `json:"rho"`
	RateRPS       float64 `json:"rate_rps"`
	Feasible      bool    `json:"feasible"`
	// Binding names the budget the configuration violates most when it is not
	// feasible (latency, power, gpu_share): the plan's, as its event explains it.
	Binding string `json:"binding,omitempty"`
}

// Measured are the controller's observations at one instant.
type Measured struct {
	RateRPS      float64 `json:"rate_rps"`
	LatencyP99MS float64 `json:"latency_p99_ms"`
	PowerMW      float64 `json:"power_mw"` // 1 s moving average
}

// EventLog is a bounded ring of events with subscribers. Subscribers get every event
// published after they subscribed on a buffered channel; one that does not keep up
// loses events (counted in Dropped) rather than slowing the controller.
type EventLog struct {
	mu      sync.Mutex
	ring    []Event
	head, n int
	seq     uint64
	subs    map[*sub]struct{}
	clock   func() time.Time
	counts  map[Kind]uint64 // every event ever added, by kind
}

type sub struct {
	ch      chan Event
	dropped uint64
}

// NewEventLog keeps the last size events (1000 when size ≤ 0).
func NewEventLog(size int, now func() time.Time) *EventLog {
	if size <= 0 {
		size = 1000
	}
	return &EventLog{ring: make([]Event, size), subs: map[*sub]struct{}{}, clock: now, counts: map[Kind]uint64{}}
}

// Add stamps e with the next sequence number (and the time, when zero), keeps it and
// hands it to every subscriber that has room.
func (l *EventLog) Add(e Event) Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	e.Seq = l.seq
	l.counts[e.Kind]++
	if e.Time.IsZero() {
		e.Time = l.clock()
	}
	i := (l.head + l.n) % len(l.ring)
	if l.n == len(l.ring) {
		l.head = (l.head + 1) % len(l.ring)
	} else {
		l.n++
	}
	l.ring[i] = e
	for s := range l.subs {
		select {
		case s.ch <- e:
		default:
			s.dropped++
		}
	}
	return e
}

// List returns the kept events with Seq > since, oldest first (since 0: all).
func (l *EventLog) List(since uint64) []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Event, 0, l.n)
	for k := 0; k < l.n; k++ {
		e := l.ring[(l.head+k)%len(l.ring)]
		if e.Seq > since {
			out = append(out, e)
		}
	}
	return out
}

// Subscribe returns a channel of new events (buffered by buf, 64 when ≤ 0) and a
// cancel function that closes it. Cancel must be called when done.
func (l *EventLog) Subscribe(buf int) (<-chan Event, func()) {
	if buf <= 0 {
		buf = 64
	}
	s := &sub{ch: make(chan Event, buf)}
	l.mu.Lock()
	l.subs[s] = struct{}{}
	l.mu.Unlock()
	var once sync.Once
	return s.ch, func() {
		once.Do(func() {
			l.mu.Lock()
			delete(l.subs, s)
			l.mu.Unlock()
			close(s.ch)
		})
	}
}

// Counts are how many events of each kind were ever added (the ring forgets, these do
// not).
func (l *EventLog) Counts() map[string]uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]uint64, len(l.counts))
	for k, v := range l.counts {
		out[string(k)] = v
	}
	return out
}

// Dropped is how many events slow subscribers have lost in total (current subscribers).
func (l *EventLog) Dropped() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n uint64
	for s := range l.subs {
		n += s.dropped
	}
	return n
}
