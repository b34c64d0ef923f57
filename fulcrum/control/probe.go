package control

import (
	"context"
	"fmt"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Probes of modes not profiled yet (issue 31, docs/controller.md "Live refinement"):
// trials only choose among stored configurations, and a search stores about fifteen
// modes of thousands, so a confirmed configuration whose neighbours one level faster were
// never profiled stays where the search left it, however much budget it leaves (traced on
// the AGX lifetime sweep: 30 req/s, 50 ms, 20 W held 15.3 W for the hour while the mode one
// GPU level up trains 13 % more at 17.4 W). A probe profiles one such neighbour live —
// the live profiler's guards apply: power over the budget abandons it, turns over the
// latency room are not run — and goes back to the confirmed configuration; the trial
// rule then decides on the stored profile as on any other, so a probe that finds nothing
// better costs one profile and moves nothing.

// probeOrder is the order the knobs are raised in: the GPU clock first (what training
// and inference turns scale with most on a Jetson), then the memory clock, then the CPU
// clock. Online cores are left out: more of them rarely shortens a GPU turn and costs
// power; on the lifetime sweeps every probe of a core level up led to a trial its own
// evidence abandoned (Orin NX 30 req/s, 150 ms, 20 W: three probes and trials of
// 4/6/8 cores, each 5–7 s of late requests and 15 s at a slower mode).
func probeOrder() [3]powermode.Knob {
	return [...]powermode.Knob{powermode.KnobGPU, powermode.KnobEMC, powermode.KnobCPU}
}

// probeCandidate is the mode to probe from the confirmed configuration cs: one knob one
// level up (probeOrder), in the space, under the thermal cap, not stored, not recorded
// over the power budget and not probed before at this power budget; none while cs's
// predicted power leaves less than ProbeHeadroom of the power budget (a faster mode
// would not fit). One training job and one stream only. Called with c.mu held.
func (c *Controller) probeCandidate(cs plan.MultiScored) (powermode.Mode, bool) {
	o := c.cfg.Refine
	if !o.Probes || c.grp != nil || c.pair == nil || c.board == nil {
		return powermode.Mode{}, false
	}
	if c.ref.probedMW != c.targets.PowerMW {
		// Another power budget: a mode abandoned over the old one may fit the new one.
		c.ref.probed, c.ref.probedMW = nil, c.targets.PowerMW
	}
	if b := c.targets.PowerMW; b > 0 && cs.PowerMW > b*(1-o.ProbeHeadroom) {
		return powermode.Mode{}, false
	}
	sp := c.board.Space()
	if sp == nil {
		return powermode.Mode{}, false
	}
	idx, ok := sp.Index(cs.Mode)
	if !ok {
		return powermode.Mode{}, false
	}
	stored, err := c.storedPlanned()
	if err != nil {
		return powermode.Mode{}, false
	}
	have := make(map[powermode.Mode]bool, len(stored))
	for _, p := range stored {
		have[p.Mode] = true
	}
	over := map[powermode.Mode]bool{}
	b := c.targets.Shared()
	for _, r := range c.liveProfiler(*c.pair, b.PowerMW, b.LatencyMS, nil, "").OverBudgetModes() {
		if b.PowerMW > 0 && r.PowerMW > b.PowerMW {
			have[r.Mode], over[r.Mode] = true, true // measured over this budget: nothing to learn there
		}
	}
	dims := sp.Dims()
	fresh := func(n powermode.Index) (powermode.Mode, bool) {
		for k := range n {
			if n[k] < 0 || n[k] >= dims[k] {
				return powermode.Mode{}, false
			}
		}
		if !sp.ContainsIndex(n) {
			return powermode.Mode{}, false
		}
		m := sp.Mode(n)
		if have[m] || c.ref.probed[m] || len(underCap(c, []powermode.Mode{m}, func(m powermode.Mode) powermode.Mode { return m })) == 0 {
			return powermode.Mode{}, false
		}
		return m, true
	}
	for _, k := range probeOrder() {
		n := idx
		n[k]++
		if m, ok := fresh(n); ok {
			return m, true
		}
	}
	// Trades: where the GPU clock one level up was measured over the power budget, that
	// level with the memory clock or online cores one level down (tradeOrder) — the
	// power of a knob that buys little training spent on the one that buys most. Raising
	// the CPU or memory clock in a trade was measured and dropped: on the 1 h AGX table
	// (30 req/s, 50 ms, 30 W) a CPU-up, memory-down trade was tried three times, each
	// predicted 196–205 samples/s and measured 166–169, and the ratio fell 0.847 → 0.808.
	up := idx
	if up[powermode.KnobGPU]++; up[powermode.KnobGPU] >= dims[powermode.KnobGPU] || !sp.ContainsIndex(up) || !over[sp.Mode(up)] {
		return powermode.Mode{}, false
	}
	for _, d := range tradeOrder() {
		n := up
		n[d]--
		if m, ok := fresh(n); ok {
			return m, true
		}
	}
	return powermode.Mode{}, false
}

// tradeOrder is the order a trade lowers a knob in: the memory clock first (the
// lifetime sweeps' optima run it low beside compute-bound training), then online cores.
func tradeOrder() [2]powermode.Knob {
	return [...]powermode.Knob{powermode.KnobEMC, powermode.KnobCores}
}

// isTrade reports that b is a with the GPU clock one level up and one tradeOrder knob
// one level down (probeCandidate's trades; the trial rule takes them as neighbours).
func isTrade(sp *powermode.Space, a, b powermode.Mode) bool {
	if sp == nil {
		return false
	}
	ia, oka := sp.Index(a)
	ib, okb := sp.Index(b)
	if !oka || !okb || ib[powermode.KnobGPU]-ia[powermode.KnobGPU] != 1 || ib[powermode.KnobCPU] != ia[powermode.KnobCPU] {
		return false
	}
	de, dc := ib[powermode.KnobEMC]-ia[powermode.KnobEMC], ib[powermode.KnobCores]-ia[powermode.KnobCores]
	return de == -1 && dc == 0 || de == 0 && dc == -1
}

// startProbe profiles m live in the background, as a search would (training paused by
// the live profiler while it measures), then applies the configuration in force again.
// Called with c.mu held.
func (c *Controller) startProbe(m powermode.Mode, from cfgKey, now time.Time) {
	if c.ref.probed == nil {
		c.ref.probed = map[powermode.Mode]bool{}
	}
	c.ref.probed[m] = true
	c.ref.nextTrial = now.Add(c.cfg.Refine.Window * time.Duration(c.cfg.Refine.ConfirmWindows))
	done := sched.NewEvent(c.clock)
	c.job, c.jobDone, c.jobMethod = true, done, "probe"
	keepMicro := c.microKeep
	c.microKeep = false
	pair := *c.pair
	b := c.targets.Shared()
	prev := *c.cur
	mode := m
	c.events.Add(Event{Kind: KindProfile, Mode: &mode, Reason: fmt.Sprintf("probing mode %s live, a neighbour of the confirmed %s not profiled yet: no stored neighbour ranks higher, and the configuration leaves power budget unused; back to it after the profile",
		m.Human(), c.keyWords(from))})
	ctx, cancel := context.WithCancel(c.base)
	sched.Go(c.clock, func() {
		defer done.Fire()
		defer cancel()
		lp := c.liveProfiler(pair, b.PowerMW, b.LatencyMS, nil, "")
		lp.ByRoom, lp.InferByRoom = true, true // a plan is in force: keep its streams' p99
		_, err := lp.Profile(ctx, m)
		counts := lp.Counts()
		c.mu.Lock()
		defer c.mu.Unlock()
		c.job, c.jobMethod = false, ""
		c.forceApply = true // the live profiler moved the board
		c.live.add(counts)
		if err != nil {
			c.events.Add(Event{Kind: KindProfile, Mode: &mode, Reason: "probe of " + m.Human() + " stopped", Err: err.Error()})
		}
		if ctx.Err() != nil || !samePair(c.pair, &pair) || c.held || c.ext != nil || c.needPlan != "" {
			return // stopping, other workers, the operator's mode, or a plan asked for: the step decides
		}
		c.apply(c.base, prev)
		c.microKeep = keepMicro
	})
}
