package control

import (
	"slices"
	"strings"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/search"
)

// Status is the controller's state at one instant.
type Status struct {
	// Targets are the operator's targets in force (shared and per workload).
	Targets plan.Targets `json:"targets"`
	Board   string       `json:"board,omitempty"` // empty: no board
	// Pair is the workload pair planned for (nil until a training and an inference
	// worker are registered).
	Pair *Pair `json:"pair,omitempty"`
	// Current is the configuration applied (nil before the first plan).
	Current *Choice `json:"current,omitempty"`
	// Wanted is the configuration decided but not in force because the board refused
	// the mode change (nil when it did not); ApplyError is the board's error.
	Wanted     *Choice `json:"wanted,omitempty"`
	ApplyError string  `json:"apply_error,omitempty"`
	// Stepped says the controller stepped down from its plan and waits to step back up.
	Stepped bool `json:"stepped"`
	// Degraded is why the controller runs degraded ("" when it does not).
	Degraded string `json:"degraded,omitempty"`
	// Searching says a searcher is profiling live.
	Searching bool `json:"searching"`
	// Measured: arrival rate (EWMA), recent p99 latency, 1 s average power.
	Measured Measured `json:"measured"`
	// RateSource is "fixed" (budgets) or "measured".
	RateSource string `json:"rate_source"`
	// PlanRateRPS is the arrival rate the present plan was made for.
	PlanRateRPS float64 `json:"plan_rate_rps"`
	// StoredProfiles counts complete stored profiles of the pair.
	StoredProfiles int `json:"stored_profiles"`
	// Live counts what live profiling did since start.
	Live LiveCounts `json:"live"`
	// LastSearch is the last searcher's result.
	LastSearch *search.Result `json:"last_search,omitempty"`
	// Streams is every inference stream planned for: its budget, batch, planned rate,
	// predicted and measured p99 (one for a pair).
	Streams []StreamStatus `json:"streams,omitempty"`
	// Train is every training job planned for when there are several or several streams.
	Train []TrainJob `json:"train,omitempty"`
	// Heat is the last heat reading and the thermal cap (nil before one; heat.go).
	Heat *Heat `json:"heat,omitempty"`
	// Profiling names the workloads left out of live profiling because their workers
	// declined profile batches (no on_profile handler); "" when none is.
	Profiling string `json:"profiling,omitempty"`
	// Refine is live refinement: the evidence at the configuration in force, the
	// confirmed configuration, a trial and the failed ones (nil while off; refine.go).
	Refine *RefineStatus `json:"refine,omitempty"`
	// LastEvent is the sequence number of the newest event.
	LastEvent uint64 `json:"last_event"`
	// Notices are what the operator must act on, kept until fulcrumd restarts (e.g. a
	// damaged profile store moved aside at start).
	Notices []string `json:"notices,omitempty"`
}

// Status returns the controller's state.
func (c *Controller) Status() Status {
	snap := c.sched.Snapshot()
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Status{Targets: c.targets.Clone(), Stepped: c.stepped, Degraded: c.degraded, Searching: c.job,
		Measured: c.measured, PlanRateRPS: c.planRate(), Live: c.live, LastSearch: c.lastSearch, RateSource: "measured",
		Notices: c.notes()}
	if c.targets.RateRPS > 0 {
		s.RateSource = "fixed"
	}
	s.Profiling = c.profilingLine()
	if c.board != nil {
		s.Board = c.board.Info().Name
	}
	if c.pair != nil {
		p := *c.pair
		s.Pair = &p
	}
	if ps, err := c.plannedProfiles(); err == nil {
		s.StoredProfiles = len(ps)
	}
	s.Streams = c.streamStatus(snap)
	if c.grp != nil {
		s.Train = slices.Clone(c.grp.Train)
	}
	if c.cur != nil {
		ch := *c.cur
		s.Current = &ch
	}
	if c.want != nil {
		ch := *c.want
		s.Wanted = &ch
		s.ApplyError = c.applyErr.Error()
		s.Degraded = strings.TrimPrefix(s.Degraded+"; "+c.boardRefusal(c.clock.Now()), "; ")
	}
	if r := c.externalReason(); r != "" {
		s.Degraded = strings.TrimPrefix(s.Degraded+"; "+r, "; ")
	}
	s.Heat = c.heatStatus()
	s.Refine = c.refineStatus()
	if ev := c.events.List(0); len(ev) > 0 {
		s.LastEvent = ev[len(ev)-1].Seq
	}
	return s
}
