package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// How the controller answers a mode change made outside fulcrumd (Config.ExternalChange,
// controller.external_change): jetson_clocks, nvpmodel -m, a hand-written sysfs value.
const (
	// ExternalStandDown (the default): no more mode writes, status DEGRADED, until
	// fulcrumctl mode resume, a budget change or an operator's mode apply.
	ExternalStandDown = "stand_down"
	// ExternalReapply writes fulcrumd's configuration again at once.
	ExternalReapply = "reapply"
	// ExternalAdopt takes the board's new mode as fulcrumd's, held like an operator's,
	// and re-chooses the batch sizes for it.
	ExternalAdopt = "adopt"
)

// ExternalPolicies are the values controller.external_change accepts.
var ExternalPolicies = []string{ExternalStandDown, ExternalReapply, ExternalAdopt}

// ErrNotStoodDown is Resume's answer when fulcrumd is driving the board.
var ErrNotStoodDown = errors.New("fulcrumd is not standing down: it drives the board (fulcrumctl status says so when another tool changes the board's clocks)")

// leaver is a board that puts back, at exit, the state it saved before fulcrumd's first
// mode change (daemon.Board). LeaveAsIs forgets that state: another tool has set the
// board since, and exit must leave that tool's settings, not fulcrumd's snapshot.
type leaver interface{ LeaveAsIs(reason string) }

// external is the other tool's change the controller stands down for.
type external struct {
	was  powermode.Mode // fulcrumd's configuration when the change was seen
	mode powermode.Mode // the board's mode now (updated while standing down)
	at   time.Time
	what string // the change, in words
}

// watchExternal compares the board's live mode with the one fulcrumd last applied, once
// a control period, and acts by the policy when another tool changed it. It reports
// whether the step ends here (standing down, or the change was just handled). Called
// with c.mu held, never during a search (the live profiler moves the board then).
func (c *Controller) watchExternal(ctx context.Context, now time.Time) bool {
	if c.ext != nil {
		if live, err := c.board.Current(ctx); err == nil && live != c.ext.mode {
			what := modeChange(c.ext.mode, live)
			c.ext.mode = live
			c.events.Add(Event{Kind: KindExternal, Reason: fmt.Sprintf("the board's mode changed again outside fulcrumd (%s)%s; fulcrumd still stands down", what, c.modeName(live)), Mode: &live})
		}
		return true
	}
	// Nothing applied yet, the board not at cur on purpose (after a search), or a write
	// refused and being retried: there is no mode of fulcrumd's to compare with.
	if c.cur == nil || c.forceApply || c.want != nil {
		return false
	}
	live, err := c.board.Current(ctx)
	if err != nil || live == c.cur.Mode {
		return false // an unreadable board is the apply path's and the power monitor's business
	}
	was := c.cur.Mode
	what := modeChange(was, live)
	head := fmt.Sprintf("the board's mode was changed outside fulcrumd: %s (now %s%s)", what, live.Human(), c.modeName(live))
	switch c.cfg.ExternalChange {
	case ExternalReapply:
		c.events.Add(Event{Kind: KindExternal, Reason: head + "; controller.external_change is reapply: writing fulcrumd's mode " + was.Human() + " again", Mode: &live})
		c.log.Warn("board changed outside fulcrumd; re-applying", "change", what)
		c.forceApply = true
		c.apply(ctx, *c.cur)
	case ExternalAdopt:
		c.events.Add(Event{Kind: KindExternal, Reason: head + "; controller.external_change is adopt: fulcrumd holds that mode and re-chooses batch sizes for it", Mode: &live})
		c.log.Warn("board changed outside fulcrumd; adopting its mode", "change", what)
		c.leaveBoard("adopted a mode set outside fulcrumd")
		ch := c.bestAt(live)
		c.cur.Mode = live // the board runs it already: apply sets batches, writes nothing
		c.apply(ctx, ch)
		c.expectAt(live)
		c.held, c.stepped = true, false
	default:
		c.ext = &external{was: was, mode: live, at: now, what: what}
		c.leaveBoard("another tool set the board")
		c.events.Add(Event{Kind: KindExternal, Reason: head + "; " + c.standDownWords(), Mode: &live})
		c.log.Warn("board changed outside fulcrumd; standing down", "change", what, "mode", live.Human())
	}
	return true
}

// leaveBoard has the board forget the state fulcrumd saved at its first change, so a
// clean exit leaves the other tool's settings (docs/controller.md).
func (c *Controller) leaveBoard(why string) {
	if l, ok := c.board.(leaver); ok {
		l.LeaveAsIs(why)
	}
}

// standDownWords says what standing down means and how to end it.
func (c *Controller) standDownWords() string {
	pw := "no power budget is set"
	if c.targets.PowerMW > 0 {
		pw = fmt.Sprintf("the %.1f W power budget is not enforced", c.targets.PowerMW/1000)
	}
	return "fulcrumd stands down (controller.external_change: stand_down): it writes no mode and " + pw +
		"; fulcrumctl mode resume, a budget change or fulcrumctl mode apply takes the board back; at exit the board is left as the other tool set it"
}

// externalReason is the status's DEGRADED reason while standing down ("" otherwise).
// Called with c.mu held.
func (c *Controller) externalReason() string {
	if c.ext == nil {
		return ""
	}
	return fmt.Sprintf("another tool set the board to %s%s at %s (%s, from fulcrumd's %s); %s",
		c.ext.mode.Human(), c.modeName(c.ext.mode), c.ext.at.Format(time.RFC3339), c.ext.what, c.ext.was.Human(), c.standDownWords())
}

// modeName names a mode that is a known setting: the board's maximum (what jetson_clocks
// sets) or a live nvpmodel preset's caps.
func (c *Controller) modeName(m powermode.Mode) string {
	var names []string
	if sp := c.board.Space(); sp != nil {
		l := sp.Levels()
		if len(l.Cores) > 0 && len(l.CPUKHz) > 0 && len(l.GPUHz) > 0 && len(l.EMCHz) > 0 &&
			m == (powermode.Mode{Cores: l.Cores[len(l.Cores)-1], CPUKHz: l.CPUKHz[len(l.CPUKHz)-1], GPUHz: l.GPUHz[len(l.GPUHz)-1], EMCHz: l.EMCHz[len(l.EMCHz)-1]}) {
			names = append(names, "every clock at its maximum, as jetson_clocks sets")
		}
	}
	for i, p := range c.presets {
		if p == m && i < len(c.pnames) {
			names = append(names, "nvpmodel preset "+c.pnames[i]+"'s caps")
		}
	}
	if len(names) == 0 {
		return ""
	}
	return ": " + strings.Join(names, ", ")
}

// modeChange says which knobs differ between two modes and by how much.
func modeChange(from, to powermode.Mode) string {
	var parts []string
	if from.Cores != to.Cores {
		parts = append(parts, fmt.Sprintf("CPU cores online %d → %d", from.Cores, to.Cores))
	}
	if from.CPUKHz != to.CPUKHz {
		parts = append(parts, fmt.Sprintf("CPU %d → %d MHz (%+d)", from.CPUKHz/1000, to.CPUKHz/1000, (to.CPUKHz-from.CPUKHz)/1000))
	}
	if from.GPUHz != to.GPUHz {
		parts = append(parts, fmt.Sprintf("GPU %.1f → %.1f MHz (%+.1f)", float64(from.GPUHz)/1e6, float64(to.GPUHz)/1e6, float64(to.GPUHz-from.GPUHz)/1e6))
	}
	if from.EMCHz != to.EMCHz {
		parts = append(parts, fmt.Sprintf("EMC %d → %d MHz (%+d)", from.EMCHz/1000000, to.EMCHz/1000000, (to.EMCHz-from.EMCHz)/1000000))
	}
	return strings.Join(parts, ", ")
}

// Resume ends a stand-down: fulcrumd writes its configuration again at once (an
// operator's held mode, or its plan, which the next step re-plans from measurements).
func (c *Controller) Resume(ctx context.Context, by *Caller) (Choice, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ext == nil {
		return Choice{}, ErrNotStoodDown
	}
	c.takeBack(ctx, "fulcrumctl mode resume", by)
	if c.want != nil {
		return Choice{}, fmt.Errorf("resumed, but the board refused fulcrumd's mode %s (it retries; see fulcrumctl status): %w", c.want.Mode.Human(), c.applyErr)
	}
	if c.cur == nil {
		return Choice{}, nil
	}
	return *c.cur, nil
}

// StoodDown reports whether the controller stands down for another tool's change.
func (c *Controller) StoodDown() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ext != nil
}

// takeBack ends a stand-down (no-op when there is none): fulcrumd's configuration is
// written again now, and, unless it is an operator's held mode, re-planned at the next
// step. Called with c.mu held.
func (c *Controller) takeBack(ctx context.Context, why string, by *Caller) {
	if c.ext == nil {
		return
	}
	ext := c.ext
	c.ext = nil
	msg := fmt.Sprintf("%s: fulcrumd takes the board back from %s (set outside fulcrumd at %s)", why, ext.mode.Human(), ext.at.Format(time.RFC3339))
	if c.cur != nil {
		msg += " and writes " + c.cur.Mode.Human() + " again"
	}
	c.events.Add(Event{Kind: KindExternal, Reason: msg, Caller: by})
	c.log.Info("taking the board back", "why", why)
	if c.cur == nil {
		return
	}
	c.forceApply = true
	c.apply(ctx, *c.cur)
	if !c.held && c.pair != nil && c.needPlan == "" {
		c.needPlan = why
	}
}
