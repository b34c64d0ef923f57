package lifetime

import (
	"fmt"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/internal/vclock"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
)

// Probe looks at the running daemon at an instant of virtual time, as the real-time
// end-to-end tests look at fulcrumd through its control API: the tests on virtual time
// (fulcrum/control/e2e, fulcrum/daemon/simworker) read the controller's status, the
// scheduler's windows and the board's power where they assert, and change budgets from
// what they read.
type Probe struct {
	// At is when Do first runs (virtual time since start); Every, when positive,
	// repeats it until the run ends.
	At, Every time.Duration
	// Do runs in a participant of the clock (it may take the controller's locks); the
	// run waits for it. It must not keep the Instant.
	Do func(*Instant)
}

// Instant is the daemon at a probe's instant.
type Instant struct{ h *harness }

// Elapsed is the virtual time since start (the clock starts at vclock.Epoch and stands
// still until the run starts).
func (in *Instant) Elapsed() time.Duration { return in.h.clock.Now().Sub(vclock.Epoch) }

// Now is the virtual instant (the clock the events' times are on).
func (in *Instant) Now() time.Time { return in.h.clock.Now() }

// Status is the controller's status (the zero Status under the preset searcher: no
// controller runs).
func (in *Instant) Status() control.Status {
	if in.h.sc.Searcher == "preset" {
		return control.Status{}
	}
	return in.h.ctl.Status()
}

// Snapshot is the scheduler's snapshot: workers, latency windows, turns.
func (in *Instant) Snapshot() sched.Snapshot { return in.h.sched.Snapshot() }

// PowerMW is the board's 1 s average power (the physics' own readings, as PowerBrokenS
// counts them); 0 before the first second.
func (in *Instant) PowerMW() float64 {
	n := max(int(time.Second/in.h.board.Interval()), 1)
	if len(in.h.window) < n {
		return 0
	}
	sum := 0.0
	for _, v := range in.h.window {
		sum += v
	}
	return sum / float64(len(in.h.window))
}

// Profiles are the profiles in fulcrumd's store now (what its live profiler measured,
// and the scenario's Stored).
func (in *Instant) Profiles() ([]store.Profile, error) { return in.h.store.List(store.Filter{}) }

// Mode is the mode the board runs at (its tree's clocks, as the workers read them).
func (in *Instant) Mode() (powermode.Mode, error) { return in.h.gpu.clocks() }

// PowerBudgetMW is the power budget in force (0: none).
func (in *Instant) PowerBudgetMW() float64 { return in.h.powerMW }

// Events are the controller's events so far, the run's directory read RunDir.
func (in *Instant) Events() []control.Event {
	in.h.pollEvents()
	return append([]control.Event(nil), in.h.events...)
}

// SetTargets sets the shared targets as fulcrumctl budget set would (the controller's
// SetTargets), and the power budget PowerBrokenS and PowerMW compare with.
func (in *Instant) SetTargets(t plan.Targets) error {
	if in.h.sc.Searcher == "preset" {
		return fmt.Errorf("lifetime: no controller runs under the preset searcher")
	}
	if err := in.h.ctl.SetTargets(t); err != nil {
		return err
	}
	in.h.powerMW = in.h.ctl.Targets().PowerMW
	return nil
}

// Targets are the controller's targets (shared and per workload).
func (in *Instant) Targets() plan.Targets {
	if in.h.sc.Searcher == "preset" {
		return plan.Targets{}
	}
	return in.h.ctl.Targets()
}

// startProbes sets the probes' timers.
func (h *harness) startProbes() {
	for _, p := range h.sc.Probes {
		if p.Do == nil {
			continue
		}
		var fire func()
		fire = func() {
			if h.stopped {
				return
			}
			h.clock.Go(func() { p.Do(&Instant{h: h}) })
			if p.Every > 0 {
				h.clock.AfterFunc(p.Every, fire)
			}
		}
		h.clock.AfterFunc(p.At, fire)
	}
}

// putStored stores the scenario's profiles before the controller opens the store: a
// store a search (or fulcrumctl profile) filled earlier.
func putStored(st *store.Store, ps []store.Profile) error {
	for _, p := range ps {
		if err := st.Put(p); err != nil {
			return fmt.Errorf("store the scenario's profile of %s at %s: %w", p.Workload, p.Mode, err)
		}
	}
	return nil
}
