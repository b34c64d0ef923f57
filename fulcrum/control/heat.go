package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// KindThermal: the board began or stopped throttling, a thermal zone passed its trip
// point, or the plan's thermal cap was set, lowered or lifted (docs/design.md §9).
const KindThermal Kind = "thermal"

// HeatClearC is how far under its trip point every zone must be before the plan's
// thermal cap is lifted: a board that cooled only to the trip point would throttle
// again at once.
const HeatClearC = 5.0

// heatState is what the controller knows of the board's heat. Guarded by c.mu.
type heatState struct {
	last        *powermode.HeatReading
	err         error
	unsupported bool            // the board cannot say (NVML): never read again
	since       time.Time       // this spell of throttling began (zero: not throttling)
	over        map[string]bool // zones at or over their trip point
	// capGPUHz and capCPUKHz are the clocks the board ran while it throttled: the plan
	// keeps under them (the hot steady state) until every zone is HeatClearC under its
	// trip point (0: no cap).
	capGPUHz  int64
	capCPUKHz int64
	// floorsAt is when the readings first showed the clock floors they show now.
	floorsAt time.Time
}

// observeHeat reads the board's heat once per step and records what changed as events:
// throttling begun or ended, zones over their trip point, and the plan's thermal cap.
// A cap set or lowered, or lifted, asks for a re-plan. Called with c.mu held.
func (c *Controller) observeHeat(ctx context.Context, now time.Time) {
	hs, ok := c.board.(powermode.HeatSensor)
	if !ok || c.heat.unsupported {
		return
	}
	h, err := hs.Heat(ctx)
	if errors.Is(err, powermode.ErrNoHeat) {
		c.heat.unsupported = true
		return
	}
	if err != nil {
		if c.heat.err == nil {
			c.log.Warn("reading the board's heat failed; temperatures and throttling are not shown until it reads again", "err", err)
		}
		c.heat.err = err
		return
	}
	c.heat.err = nil
	if p := c.heat.last; p == nil || p.GPUFloorHz != h.GPUFloorHz || p.CPUFloorKHz != h.CPUFloorKHz {
		c.heat.floorsAt = now
	}
	judged := now.Sub(c.heat.floorsAt) >= c.throttleSettle()
	if !judged {
		// The floors moved since the last reading: a mode was just written (by the
		// controller, a search, or another tool), and a clock still running the old
		// mode's speed is not the firmware's cap. The verdict stays the last one's.
		h.Throttled, h.Why = false, ""
		if p := c.heat.last; p != nil && p.Throttled {
			h.Throttled, h.Why = true, p.Why
		}
	}
	c.heat.last = &h
	if c.heat.over == nil {
		c.heat.over = map[string]bool{}
	}
	for _, z := range h.Zones {
		over := z.Err == "" && z.TripC > 0 && z.Celsius >= z.TripC
		switch {
		case over && !c.heat.over[z.Zone]:
			c.events.Add(Event{Kind: KindThermal, Reason: fmt.Sprintf("thermal zone %s at %.1f °C passed its %.1f °C trip point", z.Zone, z.Celsius, z.TripC)})
		case !over && c.heat.over[z.Zone]:
			c.events.Add(Event{Kind: KindThermal, Reason: fmt.Sprintf("thermal zone %s back under its %.1f °C trip point (%.1f °C)", z.Zone, z.TripC, z.Celsius)})
		}
		c.heat.over[z.Zone] = over
	}
	switch {
	case h.Throttled && c.heat.since.IsZero():
		c.heat.since = now
		c.events.Add(Event{Kind: KindThermal, Reason: "the board throttles: " + h.Why + hottestNote(h)})
	case !h.Throttled && !c.heat.since.IsZero():
		c.events.Add(Event{Kind: KindThermal, Reason: fmt.Sprintf("the board no longer throttles (after %s)%s", now.Sub(c.heat.since).Round(time.Second), hottestNote(h))})
		c.heat.since = time.Time{}
	}
	if h.Throttled {
		if judged { // an unsettled reading's clocks may be the old mode's: no cap from them
			c.lowerCap(h)
		}
		return
	}
	if (c.heat.capGPUHz > 0 || c.heat.capCPUKHz > 0) && cooled(h) {
		c.heat.capGPUHz, c.heat.capCPUKHz = 0, 0
		why := fmt.Sprintf("the board cooled: every thermal zone is %.0f °C or more under its trip point; the thermal cap is lifted", HeatClearC)
		c.events.Add(Event{Kind: KindThermal, Reason: why})
		if c.cur != nil && !c.held {
			c.needPlan = why
		}
	}
}

// throttleSettle is how long the clock floors must have stayed as they are before a
// reading may be judged for throttling. A reading right after a mode write sees the new
// floors with the running clocks still at the old mode's (the kernel moves them within a
// devfreq/cpufreq update; the simulator at its next physics step, up to 500 ms on
// virtual time), and a read racing the write can pair an old clock with a new floor:
// neither is the firmware capping a clock. One control period was not enough: a
// search's mode writes are followed by the controller's next reading a period later,
// before the simulator's clocks moved (lifetime runs showed "CPU runs 115 MHz under its
// 2201 MHz floor" at 42 °C, and a re-plan under that cap, after mode changes). A real
// throttle lasts seconds or more and shows once the floors have settled.
func (c *Controller) throttleSettle() time.Duration {
	return max(2*c.cfg.PowerSettle, 2*c.cfg.Period)
}

// lowerCap sets the thermal cap to the clocks the board runs while throttled (lowering
// it, never raising it) and asks for a re-plan under it.
func (c *Controller) lowerCap(h powermode.HeatReading) {
	g, cpu := c.heat.capGPUHz, c.heat.capCPUKHz
	if h.GPUHz > 0 && h.GPUHz < h.GPUFloorHz && (g == 0 || h.GPUHz < g) {
		g = h.GPUHz
	}
	if h.CPUKHz > 0 && h.CPUKHz < h.CPUFloorKHz && (cpu == 0 || h.CPUKHz < cpu) {
		cpu = h.CPUKHz
	}
	if g == c.heat.capGPUHz && cpu == c.heat.capCPUKHz {
		return
	}
	c.heat.capGPUHz, c.heat.capCPUKHz = g, cpu
	why := "the board throttles: planning for the clocks it runs (" + c.capWords() + ")"
	c.events.Add(Event{Kind: KindThermal, Reason: why + hottestNote(h)})
	if c.cur != nil && !c.held {
		c.needPlan = why
	}
}

func (c *Controller) capWords() string {
	var parts []string
	if c.heat.capGPUHz > 0 {
		parts = append(parts, fmt.Sprintf("GPU ≤ %d MHz", c.heat.capGPUHz/1e6))
	}
	if c.heat.capCPUKHz > 0 {
		parts = append(parts, fmt.Sprintf("CPU ≤ %d MHz", c.heat.capCPUKHz/1000))
	}
	return strings.Join(parts, ", ")
}

func hottestNote(h powermode.HeatReading) string {
	z, ok := h.Hottest()
	if !ok {
		return ""
	}
	if z.TripC > 0 {
		return fmt.Sprintf(" (hottest: %s %.1f °C, trip %.1f °C)", z.Zone, z.Celsius, z.TripC)
	}
	return fmt.Sprintf(" (hottest: %s %.1f °C)", z.Zone, z.Celsius)
}

// cooled: every readable zone with a trip point is HeatClearC under it.
func cooled(h powermode.HeatReading) bool {
	return !slices.ContainsFunc(h.Zones, func(z powermode.ThermalZone) bool {
		return z.Err == "" && z.TripC > 0 && z.Celsius > z.TripC-HeatClearC
	})
}

// underCap leaves out the profiles of modes over the thermal cap: their cold numbers
// are not what the board would run. Modes within both the GPU and the CPU cap are kept;
// when none is, those within the GPU cap (the GPU's clock is what training and
// inference run on); when none is either, nothing is left out (the firmware caps
// whatever is chosen; violations then step down as usual).
func underCap[P any](c *Controller, ps []P, mode func(P) powermode.Mode) []P {
	g, cpu := c.heat.capGPUHz, c.heat.capCPUKHz
	for _, cp := range [][2]int64{{g, cpu}, {g, 0}} {
		if cp == [2]int64{} {
			continue
		}
		over := func(p P) bool {
			m := mode(p)
			return (cp[0] > 0 && m.GPUHz > cp[0]) || (cp[1] > 0 && m.CPUKHz > cp[1])
		}
		if slices.ContainsFunc(ps, func(p P) bool { return !over(p) }) {
			return slices.DeleteFunc(slices.Clone(ps), over) // the caller's slice is left whole
		}
	}
	return ps
}

// heatNote is what a violation's reason adds while heat is involved: the board
// throttles now, or the plan keeps under a thermal cap. Called with c.mu held.
func (c *Controller) heatNote() string {
	switch h := c.heat.last; {
	case h != nil && h.Throttled:
		return fmt.Sprintf(" — while the board throttles (%s)%s, so the clocks run are not the mode's", h.Why, hottestNote(*h))
	case c.heat.capGPUHz > 0 || c.heat.capCPUKHz > 0:
		return " — under the thermal cap (" + c.capWords() + ")"
	}
	return ""
}

// Throttled says the board throttles now (the last heat reading).
func (c *Controller) Throttled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.heat.last != nil && c.heat.last.Throttled
}

// Heat is the board's heat as the status reports it: every thermal zone against its trip
// point, the GPU's load, the clocks the board runs against the floor it was set to, and
// the thermal cap the plan keeps under (the control API's api.Heat copies it).
type Heat struct {
	At    time.Time     `json:"at"`
	Zones []ThermalZone `json:"zones"`
	// GPULoad is the GPU's busy fraction 0..1; nil when the board has no load node.
	GPULoad     *float64 `json:"gpu_load,omitempty"`
	GPUHz       int64    `json:"gpu_hz"`        // running (cur_freq)
	GPUFloorHz  int64    `json:"gpu_floor_hz"`  // set (min_freq)
	CPUKHz      int64    `json:"cpu_khz"`       // the slowest online cluster, running
	CPUFloorKHz int64    `json:"cpu_floor_khz"` // that cluster's scaling_min_freq
	Throttled   bool     `json:"throttled"`
	// ThrottleReason says which clock runs under its floor; ThrottledSince when this
	// spell of throttling began (nil when not throttled).
	ThrottleReason string     `json:"throttle_reason,omitempty"`
	ThrottledSince *time.Time `json:"throttled_since,omitempty"`
	// CapGPUHz and CapCPUKHz are the thermal cap (0: no cap; docs/design.md §9).
	CapGPUHz  int64 `json:"cap_gpu_hz,omitempty"`
	CapCPUKHz int64 `json:"cap_cpu_khz,omitempty"`
}

// ThermalZone is one thermal zone: its temperature and passive trip point (0: none);
// Error is set for a zone that could not be read.
type ThermalZone struct {
	Zone    string  `json:"zone"`
	Celsius float64 `json:"celsius"`
	TripC   float64 `json:"trip_c,omitempty"`
	Error   string  `json:"error,omitempty"`
}

// heatStatus is the last heat reading as the status reports it (nil before one).
// Called with c.mu held.
func (c *Controller) heatStatus() *Heat {
	h := c.heat.last
	if h == nil {
		return nil
	}
	out := &Heat{At: h.At, GPUHz: h.GPUHz, GPUFloorHz: h.GPUFloorHz, CPUKHz: h.CPUKHz, CPUFloorKHz: h.CPUFloorKHz,
		Throttled: h.Throttled, ThrottleReason: h.Why, CapGPUHz: c.heat.capGPUHz, CapCPUKHz: c.heat.capCPUKHz}
	if h.GPULoad >= 0 {
		l := h.GPULoad
		out.GPULoad = &l
	}
	if !c.heat.since.IsZero() {
		s := c.heat.since
		out.ThrottledSince = &s
	}
	for _, z := range h.Zones {
		out.Zones = append(out.Zones, ThermalZone{Zone: z.Zone, Celsius: z.Celsius, TripC: z.TripC, Error: z.Err})
	}
	return out
}
