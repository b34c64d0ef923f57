package sim

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"
)

// HeatOptions switch on the simulated firmware's thermal throttling (docs/simulator.md
// "Heat"). Without them (Options.Heat nil) the zones still warm with power but no clock
// is ever capped: the cold steady state the ground-truth tables and benches assume.
type HeatOptions struct {
	// CPerW is the heat sink's steady-state rise per board watt, °C/W; default 0.55
	// (a module with its fan). A passively cooled module is nearer 1.5–2.
	CPerW float64
	// TripC, when set, is written as every zone's passive trip point; 0 keeps the
	// tree's (faketree.DefaultTripMC, 99 °C).
	TripC float64
	// HystC: the cap is released one step per poll once every zone is this far under
	// its trip point; default 2 °C.
	HystC float64
	// Poll is the throttle governor's period: one cooling step up or down per poll,
	// like the kernel's step_wise governor; default 1 s.
	Poll time.Duration
}

// Heat defaults.
const (
	DefaultCPerW = 0.55
	DefaultHystC = 2.0
	DefaultPoll  = time.Second
	// ThrottlePath is the in-board file holding the simulated firmware's cooling
	// state (0: no cap; n: every clock capped n table steps under what was set), so
	// minibatches in other processes run at the capped clocks.
	ThrottlePath = simRunDir + "/throttle"
)

func (h *HeatOptions) withDefaults() *HeatOptions {
	if h == nil {
		return nil
	}
	o := *h
	if o.CPerW <= 0 {
		o.CPerW = DefaultCPerW
	}
	if o.HystC <= 0 {
		o.HystC = DefaultHystC
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	return &o
}

// capLevel is the level s table steps under v in an ascending table (the lowest at
// worst); v itself when it is not in the table and s is 0.
func capLevel(levels []int64, v int64, s int) int64 {
	if s <= 0 || len(levels) == 0 {
		return v
	}
	i, _ := slices.BinarySearch(levels, v)
	i = min(i, len(levels)-1)
	return min(v, levels[max(i-s, 0)])
}

// capped is the state with every clock s table steps under what was set: the
// firmware's throttle overrides the min/max the kernel was given.
func (st boardState) capped(p *boardPaths, s int) boardState {
	if s <= 0 {
		return st
	}
	gpu := p.spec.GPU.FreqsHz
	st.gpuMaxHz = capLevel(gpu, st.gpuMaxHz, s)
	st.gpuMinHz = min(st.gpuMinHz, st.gpuMaxHz)
	cls := slices.Clone(st.clusters)
	for i := range cls {
		cls[i].maxKHz = capLevel(p.spec.CPU.FreqsKHz, cls[i].maxKHz, s)
		cls[i].minKHz = min(cls[i].minKHz, cls[i].maxKHz)
	}
	st.clusters = cls
	return st
}

// readThrottle is the cooling state the physics loop last wrote; 0 when none.
func (p *boardPaths) readThrottle() int {
	v, err := p.readInt(ThrottlePath)
	if err != nil || v < 0 {
		return 0
	}
	return int(v)
}

// tripC is a zone's passive trip point in °C as the tree holds it (0: none).
func (b *Board) tripC(zone int) float64 {
	for n := range 8 {
		dir := fmt.Sprintf("/sys/devices/virtual/thermal/thermal_zone%d", zone)
		typ, err := b.paths.readString(fmt.Sprintf("%s/trip_point_%d_type", dir, n))
		if err != nil {
			return 0
		}
		if typ != "passive" {
			continue
		}
		mc, err := b.paths.readInt(fmt.Sprintf("%s/trip_point_%d_temp", dir, n))
		if err != nil {
			return 0
		}
		return float64(mc) / 1000
	}
	return 0
}

// setTrips writes tripC as every zone's passive trip point.
func (b *Board) setTrips(tripC float64) error {
	var errs []error
	for i := range b.paths.spec.Thermal {
		dir := fmt.Sprintf("/sys/devices/virtual/thermal/thermal_zone%d", i)
		for n := range 8 {
			typ, err := b.paths.readString(fmt.Sprintf("%s/trip_point_%d_type", dir, n))
			if err != nil {
				break
			}
			if typ == "passive" {
				errs = append(errs, b.writeFile(fmt.Sprintf("%s/trip_point_%d_temp", dir, n), strconv.FormatInt(int64(tripC*1000), 10)+"\n"))
			}
		}
	}
	return errors.Join(errs...)
}

// stepThrottle runs the throttle governor once per Poll: one cooling step up while any
// zone is at or over its trip point, one down once every zone is HystC under it. It
// writes the state for the runners and returns it.
func (b *Board) stepThrottle(now time.Time) (int, error) {
	h := b.opts.Heat
	if h == nil {
		return 0, nil
	}
	if !b.lastPoll.IsZero() && now.Sub(b.lastPoll) < h.Poll {
		return b.throttle, nil
	}
	b.lastPoll = now
	over, under := false, true
	for i, z := range b.paths.spec.Thermal {
		trip := b.tripC(i)
		if trip <= 0 {
			continue
		}
		t := b.tempsC[z]
		if t >= trip {
			over = true
		}
		if t > trip-h.HystC {
			under = false
		}
	}
	limit := max(len(b.paths.spec.GPU.FreqsHz), len(b.paths.spec.CPU.FreqsKHz))
	switch {
	case over && b.throttle < limit:
		b.throttle++
	case under && b.throttle > 0:
		b.throttle--
	}
	if err := b.writeFileIfChanged(ThrottlePath, strconv.Itoa(b.throttle)+"\n"); err != nil {
		return b.throttle, fmt.Errorf("sim: write the throttle state: %w", err)
	}
	return b.throttle, nil
}

// Throttle is the simulated firmware's cooling state now (0: no clock capped).
func (b *Board) Throttle() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.throttle
}

// clearThrottle removes a stale throttle state left by an earlier loop.
func clearThrottle(p *boardPaths) error {
	if err := os.Remove(p.path(ThrottlePath)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}
