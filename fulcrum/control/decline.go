package control

// Profiles must be real (issue 27): workloads whose workers decline profile batches are
// left out of live profiling, and a profile batch far faster than the workload's real
// batches is discarded.

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// ErrNoProfiles is returned by Optimize when a workload it would profile has only
// workers that declined profile batches.
var ErrNoProfiles = errors.New("workers declined profile batches")

// Discarding a profile batch: one that took under a fifth of the median of the same
// workload's latest real batches of that size at the mode being measured (released since
// it was applied), once realMinForDiscard of them ran there; without them, under a
// fiftieth of its latest real batches at any mode. A client that answers a profile grant
// at once (no on_profile handler) reports microseconds for a batch that really takes
// tens of milliseconds (issue 27). Real batches at another mode are no reference at a
// fifth: during a search, inference batches served at a mode with one core at 115 MHz
// (82.5 ms at batch 1 with the fitted tails) had every honest profile batch at a fast
// mode (5.5 ms) discarded and the search failed (the lifetime two-stream run, seed 2).
const (
	discardFraction        = 0.2
	discardFractionAnyMode = 0.02
	realMinForDiscard      = 3
)

// declinedOf returns the workloads of snap ("name (role)") whose live workers all
// declined profile batches, sorted.
func declinedOf(snap sched.Snapshot) []string {
	seen, accepts := map[string]bool{}, map[string]bool{}
	for _, w := range snap.Workers {
		k := wlKey(w.Role, w.Workload)
		seen[k] = true
		if !w.NoProfiles {
			accepts[k] = true
		}
	}
	var out []string
	for k := range seen {
		if !accepts[k] {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func wlKey(role, name string) string { return name + " (" + role + ")" }

// needed are the workloads a live search of the present pair or group profiles.
// Called with c.mu held.
func (c *Controller) needed() []string {
	var out []string
	switch {
	case c.grp != nil:
		for _, j := range c.grp.Train {
			out = append(out, wlKey(proto.RoleTrain, j.Workload))
		}
		for _, s := range c.grp.Streams {
			out = append(out, wlKey(proto.RoleInfer, s.Workload))
		}
	case c.pair != nil:
		out = append(out, wlKey(proto.RoleTrain, c.pair.Train), wlKey(proto.RoleInfer, c.pair.Infer))
	}
	return out
}

// blocked returns the workloads a live search would need that decline profile batches.
// Called with c.mu held.
func (c *Controller) blocked() []string {
	var out []string
	for _, k := range c.needed() {
		if slices.Contains(c.declined, k) {
			out = append(out, k)
		}
	}
	return out
}

// profilingLine is the status line about workloads left out of live profiling ("" when
// none is). Called with c.mu held.
func (c *Controller) profilingLine() string {
	if len(c.declined) == 0 {
		return ""
	}
	return fmt.Sprintf("live profiling leaves out %s: its workers set no on_profile handler and declined profile batches; "+
		"set on_profile in the client to profile it live, or profile it offline (fulcrumctl profile)", strings.Join(c.declined, ", "))
}

// noteDeclined records which workloads decline profile batches (from the step's
// snapshot), with an event when that changes; a change that frees a search re-plans.
// Called with c.mu held.
func (c *Controller) noteDeclined(declined []string) {
	if slices.Equal(declined, c.declined) {
		return
	}
	before := c.blocked()
	c.declined = declined
	if len(declined) > 0 {
		c.events.Add(Event{Kind: KindProfile, Reason: c.profilingLine()})
	} else {
		c.events.Add(Event{Kind: KindProfile, Reason: "every workload's workers run profile batches again: live profiling includes them all"})
	}
	if len(before) > 0 && len(c.blocked()) == 0 && c.needPlan == "" && (c.pair != nil || c.grp != nil) {
		c.needPlan = "a worker that runs profile batches registered"
	}
}

// searchRefused says (with an event) that a search is not started because workloads it
// needs decline profile batches. Called with c.mu held.
func (c *Controller) searchRefused(reason string, blocked []string) {
	c.events.Add(Event{Kind: KindProfile, Reason: fmt.Sprintf("%s: no live search: %s decline profile batches (no on_profile handler); planning from what is stored",
		reason, strings.Join(blocked, ", "))})
}

// discardRef is the reference a point's profile batches are checked against and the
// fraction of it under which one is discarded: the median of the workload's real batches
// of that size since the mode was applied (at a fifth), else of its latest at any mode
// (at a fiftieth); 0: none yet, or too few.
func (p *LiveProfiler) discardRef(k store.Key, applied time.Time) (refMS, fraction float64) {
	role := proto.RoleTrain
	if k.Role == truth.Infer {
		role = proto.RoleInfer
	}
	// A micro-batch's real turns by its size.
	if ms, n := p.Sched.RealBatchMS(role, k.Workload, k.Turn(), applied); n >= realMinForDiscard {
		return ms, discardFraction
	}
	if ms, n := p.Sched.RealBatchMS(role, k.Workload, k.Turn(), time.Time{}); n >= realMinForDiscard {
		return ms, discardFractionAnyMode
	}
	return 0, 0
}
