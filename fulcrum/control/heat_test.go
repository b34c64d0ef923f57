package control

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/powermode/tegra"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
)

// A simulated board heats under sustained training: its firmware caps the GPU under
// the planned clock. The controller sees it (a thermal event, status), and plans for
// the clocks the board runs (the hot steady state): the re-plan's mode keeps under the
// clock the board ran while it throttled, and the plan's own cold numbers are then
// what the board runs.
func TestBoardHeatsUnderSustainedTraining(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	b := testboard.Sim(t, filepath.Join(t.TempDir(), "board"), e.spec,
		sim.Options{ThermalTau: time.Second, Heat: &sim.HeatOptions{TripC: 50, Poll: 250 * time.Millisecond}})
	be, err := tegra.Open(ctx, b.Root(), e.spec, powermode.BoardInfo{Name: e.spec.Name})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Options{Sched: e.sched, Board: be, Store: e.store, Clock: e.clock, Targets: plan.Targets{LatencyMS: 400, PowerMW: 60000, RateRPS: 20}})
	if err != nil {
		t.Fatal(err)
	}
	// Sustained training: one minibatch registered for the whole test.
	act := filepath.Join(b.Root(), sim.ActivityDir, "1-train.json")
	raw := fmt.Sprintf(`{"workload":%q,"role":"train","batch":32,"pid":%d}`, tTrain, os.Getpid())
	if err := os.WriteFile(act, []byte(raw), 0o644); err != nil {
		t.Fatal(err)
	}
	e.register(nil)
	tick := func(d time.Duration) {
		for end := e.clock.Now().Add(d); e.clock.Now().Before(end); {
			e.clock.Advance(50 * time.Millisecond)
			if _, err := b.Step(e.clock.Now()); err != nil {
				t.Fatal(err)
			}
			_ = c.SamplePower(ctx)
			c.Step(ctx)
		}
	}
	tick(200 * time.Millisecond)
	first := c.Status().Current
	if first == nil {
		t.Fatalf("no plan: %v", kinds(c.Events().List(0)))
	}
	// Heat until the controller has planned under the thermal cap (bounded in simulated
	// time; the bound is not the behaviour asserted).
	var throttleEv, capEv, replan *Event
	for range 200 {
		tick(250 * time.Millisecond)
		evs := c.Events().List(0)
		for i := range evs {
			ev := &evs[i]
			switch {
			case ev.Kind == KindThermal && strings.HasPrefix(ev.Reason, "the board throttles: GPU runs") && throttleEv == nil:
				throttleEv = ev
			case ev.Kind == KindThermal && strings.Contains(ev.Reason, "planning for the clocks it runs") && capEv == nil:
				capEv = ev
			case ev.Kind == KindReplan && capEv != nil && ev.Seq > capEv.Seq && replan == nil:
				replan = ev
			}
		}
		if replan != nil {
			break
		}
	}
	if throttleEv == nil || capEv == nil || replan == nil {
		t.Fatalf("no throttle event, cap and re-plan after heating: %+v", c.Events().List(0))
	}
	if !strings.Contains(replan.Reason, "the board throttles") {
		t.Errorf("re-plan reason %q does not say the board throttles", replan.Reason)
	}
	st := c.Status()
	if st.Heat == nil || len(st.Heat.Zones) != len(e.spec.Thermal) || st.Heat.Zones[0].TripC != 50 {
		t.Fatalf("status heat = %+v, want every zone with its 50 °C trip point", st.Heat)
	}
	capHz := st.Heat.CapGPUHz
	if capHz == 0 || capHz >= first.Mode.GPUHz {
		t.Fatalf("thermal cap %d Hz, want one under the first plan's GPU %d Hz", capHz, first.Mode.GPUHz)
	}
	// Every cap set or lowered is followed by a re-plan within it.
	var capMHz int64
	for _, ev := range c.Events().List(0) {
		if ev.Kind == KindThermal && strings.Contains(ev.Reason, "planning for the clocks it runs (GPU ≤ ") {
			i := strings.Index(ev.Reason, "GPU ≤ ")
			if _, err := fmt.Sscanf(ev.Reason[i:], "GPU ≤ %d MHz", &capMHz); err != nil {
				t.Fatalf("cap event %q: %v", ev.Reason, err)
			}
		}
		if (ev.Kind == KindReplan || ev.Kind == KindStepUp) && capMHz > 0 && ev.Mode.GPUHz > capMHz*1e6 {
			t.Errorf("%s to %s with the board capped at GPU %d MHz: want a mode within the clocks it runs", ev.Kind, ev.Mode, capMHz)
		}
	}
	if replan.Mode.GPUHz >= first.Mode.GPUHz {
		t.Errorf("re-plan %s after throttling: want a lower GPU clock than the cold plan's %s", replan.Mode, first.Mode)
	}
}

// heatBoard is a fake board whose heat the test sets.
type heatBoard struct {
	*fakeBoard
	heat powermode.HeatReading
}

func (b *heatBoard) Heat(context.Context) (powermode.HeatReading, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.heat, nil
}

// A power violation while the board throttles says so in the step-down's reason, and
// the board's throttling and a zone past its trip point are events of their own.
func TestViolationWhileThrottledSaysWhy(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	hb := &heatBoard{fakeBoard: e.board}
	c, err := New(Options{Config: Config{Cooldown: 100 * time.Millisecond}, Sched: e.sched, Board: hb, Store: e.store, Clock: e.clock,
		Targets: plan.Targets{LatencyMS: 400, PowerMW: 35000, RateRPS: 20}})
	if err != nil {
		t.Fatal(err)
	}
	e.register(nil)
	e.board.set(20000, nil)
	hb.heat = powermode.HeatReading{Zones: []powermode.ThermalZone{{Zone: "tj-thermal", Celsius: 60, TripC: 99}}, GPULoad: 0.9}
	e.tick(c, 200*time.Millisecond)
	planned := c.Status().Current
	if planned == nil {
		t.Fatal("no plan")
	}
	seq := c.Status().LastEvent
	hb.mu.Lock()
	hb.heat = powermode.HeatReading{Zones: []powermode.ThermalZone{{Zone: "tj-thermal", Celsius: 99.5, TripC: 99}}, GPULoad: 0.9,
		GPUHz: 408e6, GPUFloorHz: planned.Mode.GPUHz, Throttled: true, Why: "GPU runs 408 MHz under its floor"}
	hb.mu.Unlock()
	// Two readings: the first sees floors the fake's cool reading did not have (0), and
	// a reading is judged for throttling once the previous one saw the same floors.
	e.tick(c, 100*time.Millisecond)
	var reasons []string
	for _, ev := range c.Events().List(seq) {
		if ev.Kind == KindThermal {
			reasons = append(reasons, ev.Reason)
		}
	}
	joined := strings.Join(reasons, "\n")
	for _, want := range []string{"tj-thermal at 99.5 °C passed its 99.0 °C trip point", "the board throttles: GPU runs 408 MHz", "planning for the clocks it runs (GPU ≤ 408 MHz)"} {
		if !strings.Contains(joined, want) {
			t.Errorf("thermal events %q: want one saying %q", reasons, want)
		}
	}
	if st := c.Status(); st.Heat == nil || !st.Heat.Throttled || st.Heat.ThrottledSince == nil || st.Heat.GPULoad == nil || *st.Heat.GPULoad != 0.9 {
		t.Errorf("status heat = %+v, want throttled since now with the GPU load", st.Heat)
	}
	seq = c.Status().LastEvent
	e.board.set(45000, nil) // over the 35 W budget
	e.tick(c, time.Second)
	var down *Event
	for _, ev := range c.Events().List(seq) {
		if ev.Kind == KindStepDown {
			down = &ev
			break
		}
	}
	if down == nil {
		t.Fatalf("no step-down for power over budget: %v", kinds(c.Events().List(seq)))
	}
	if !strings.Contains(down.Reason, "while the board throttles (GPU runs 408 MHz under its floor)") {
		t.Errorf("step-down reason %q does not say the board throttles", down.Reason)
	}
	// Cooled well under the trip point: the throttling ends and the cap is lifted.
	seq = c.Status().LastEvent
	hb.mu.Lock()
	hb.heat = powermode.HeatReading{Zones: []powermode.ThermalZone{{Zone: "tj-thermal", Celsius: 80, TripC: 99}}, GPULoad: 0.5}
	hb.mu.Unlock()
	e.board.set(20000, nil)
	e.tick(c, 100*time.Millisecond)
	var after []string
	for _, ev := range c.Events().List(seq) {
		if ev.Kind == KindThermal {
			after = append(after, ev.Reason)
		}
	}
	joined = strings.Join(after, "\n")
	for _, want := range []string{"no longer throttles", "back under its 99.0 °C trip point", "the thermal cap is lifted"} {
		if !strings.Contains(joined, want) {
			t.Errorf("thermal events after cooling %q: want one saying %q", after, want)
		}
	}
	if st := c.Status(); st.Heat.CapGPUHz != 0 || st.Heat.Throttled {
		t.Errorf("status after cooling: %+v", st.Heat)
	}
}

// The live profiler marks the points it measured while the board throttled, keeps them
// while the board is still hot, and measures them again once it runs cool, replacing
// the throttled numbers.
func TestLiveProfileWhileThrottledIsMarkedAndRemeasuredCool(t *testing.T) {
	e := newEnv(t, sched.RealClock{})
	defer e.sched.Close()
	pm := NewPowerMonitor(10 * time.Second)
	sw := &scriptedWorkers{e: e, power: pm, grants: map[string]int{}}
	trainID, inferID := e.register(sw.deliver)
	for _, id := range []string{trainID, inferID} {
		if err := e.sched.Acquire(id, 0); err != nil {
			t.Fatal(err)
		}
	}
	e.board.mu.Lock()
	e.board.powerFn = func(m powermode.Mode) float64 { return e.models[tTrain].PowerMW(e.spec, m, 32) }
	e.board.mu.Unlock()
	m := e.modes[3]
	hb := &heatBoard{fakeBoard: e.board, heat: powermode.HeatReading{Throttled: true, GPUHz: 612e6, GPUFloorHz: m.GPUHz, CPUKHz: 2188800, CPUFloorKHz: m.CPUKHz}}
	lp := &LiveProfiler{Sched: e.sched, Board: hb, Store: e.store, Power: pm,
		Pair:    Pair{Train: tTrain, TrainBatch: 32, Infer: tInfer, Batches: []int{1, 2, 4, 8}},
		Options: LiveOptions{Samples: 3, MinTime: time.Millisecond, PowerSettle: time.Millisecond}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := lp.Profile(ctx, m); err != nil {
		t.Fatal(err)
	}
	stored, err := e.store.List(store.Filter{Board: e.spec.Name})
	if err != nil || len(stored) != 5 {
		t.Fatalf("%d stored, %v", len(stored), err)
	}
	for _, p := range stored {
		if p.Throttled == nil || p.Throttled.GPUHzMin != 612e6 || p.Throttled.CPUKHzMin != 2188800 || p.Throttled.Readings < 3 {
			t.Fatalf("profile taken while throttled: %+v, want it marked with the clocks run", p.Throttled)
		}
	}
	// Still hot: the throttled points are kept, not measured again.
	grants := sw.count(proto.KindProfile)
	if _, err := lp.Profile(ctx, m); err != nil || sw.count(proto.KindProfile) != grants {
		t.Fatalf("measured again while still throttled: %v, grants %d → %d", err, grants, sw.count(proto.KindProfile))
	}
	// Cool: measured again and replaced, unmarked.
	hb.mu.Lock()
	hb.heat = powermode.HeatReading{GPUHz: m.GPUHz, GPUFloorHz: m.GPUHz, CPUKHz: m.CPUKHz, CPUFloorKHz: m.CPUKHz}
	hb.mu.Unlock()
	if _, err := lp.Profile(ctx, m); err != nil {
		t.Fatal(err)
	}
	if sw.count(proto.KindProfile) <= grants {
		t.Fatal("a throttled profile was not measured again once the board ran cool")
	}
	after, err := e.store.List(store.Filter{Board: e.spec.Name})
	if err != nil || len(after) != 5 {
		t.Fatalf("%d stored after the cool measurement, %v", len(after), err)
	}
	for i, p := range after {
		if p.Throttled != nil || !p.StartedAt.After(stored[i].FinishedAt) {
			t.Errorf("after the cool measurement: %+v (throttled %+v), want the fresh, unmarked one", p.Key(), p.Throttled)
		}
	}
}

// The thermal cap keeps the modes within both caps when any is, else those within the
// GPU cap, else every mode (the firmware caps whatever is chosen).
func TestUnderCapFallbacks(t *testing.T) {
	mk := func(gpuMHz, cpuMHz int64) powermode.Mode {
		return powermode.Mode{Cores: 8, CPUKHz: cpuMHz * 1000, GPUHz: gpuMHz * 1e6, EMCHz: 3199000000}
	}
	all := []powermode.Mode{mk(1300, 2201), mk(918, 2201), mk(816, 1728), mk(612, 1728)}
	id := func(m powermode.Mode) powermode.Mode { return m }
	for _, tc := range []struct {
		name          string
		gpuHz, cpuKHz int64
		want          []powermode.Mode
	}{
		{"no cap", 0, 0, all},
		{"both caps", 918e6, 2000000, []powermode.Mode{mk(816, 1728), mk(612, 1728)}},
		{"none within both: the GPU cap alone", 918e6, 1000000, []powermode.Mode{mk(918, 2201), mk(816, 1728), mk(612, 1728)}},
		{"none within the GPU cap: every mode", 306e6, 1000000, all},
	} {
		c := &Controller{}
		c.heat.capGPUHz, c.heat.capCPUKHz = tc.gpuHz, tc.cpuKHz
		in := slices.Clone(all)
		got := underCap(c, in, id)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
		if !slices.Equal(in, all) {
			t.Errorf("%s: the caller's slice changed to %v", tc.name, in)
		}
	}
}

// A mode write is not throttling: right after the controller raises the board's
// floors, the running clocks (the simulator's physics loop; on a Jetson the governor, a
// moment later) still show the previous mode's. The reading that sees the new floors
// with the old clocks is not judged, and no thermal event or throttled status follows
// — on a cool board (no --heat) whose clocks then follow the mode.
func TestModeWriteIsNotThrottling(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	b := testboard.Sim(t, filepath.Join(t.TempDir(), "board"), e.spec, sim.Options{})
	be, err := tegra.Open(ctx, b.Root(), e.spec, powermode.BoardInfo{Name: e.spec.Name})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Options{Sched: e.sched, Board: be, Store: e.store, Clock: e.clock, Targets: plan.Targets{LatencyMS: 400, PowerMW: 60000, RateRPS: 20}})
	if err != nil {
		t.Fatal(err)
	}
	act := filepath.Join(b.Root(), sim.ActivityDir, "1-train.json")
	raw := fmt.Sprintf(`{"workload":%q,"role":"train","batch":32,"pid":%d}`, tTrain, os.Getpid())
	if err := os.WriteFile(act, []byte(raw), 0o644); err != nil {
		t.Fatal(err)
	}
	e.register(nil)
	step := func(physics bool) {
		e.clock.Advance(50 * time.Millisecond)
		if physics {
			if _, err := b.Step(e.clock.Now()); err != nil {
				t.Fatal(err)
			}
		}
		_ = c.SamplePower(ctx)
		c.Step(ctx)
	}
	for range 4 {
		step(true)
	}
	first := c.Status().Current
	if first == nil {
		t.Fatalf("no plan: %v", kinds(c.Events().List(0)))
	}
	// From the slowest mode (its clocks running) to the fastest: the new floors are over
	// the running clocks until the physics catches up.
	high := slices.MaxFunc(e.modes, func(a, b powermode.Mode) int { return int((a.GPUHz - b.GPUHz) / 1e6) })
	low := powermode.Mode{Cores: high.Cores, CPUKHz: testboard.Space(t, e.spec).Levels().CPUKHz[0], GPUHz: e.modes[0].GPUHz, EMCHz: high.EMCHz}
	if high.GPUHz <= low.GPUHz || high.CPUKHz <= low.CPUKHz {
		t.Fatalf("modes %s and %s: want one faster in both GPU and CPU", low, high)
	}
	if _, err := c.ApplyMode(ctx, low); err != nil {
		t.Fatal(err)
	}
	step(true)
	step(true)
	seq := c.Status().LastEvent
	if _, err := c.ApplyMode(ctx, high); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		for _, ev := range c.Events().List(seq) {
			if ev.Kind == KindThermal {
				t.Errorf("%s: thermal event %q on a cool board", when, ev.Reason)
			}
		}
		if st := c.Status(); c.Throttled() || st.Heat == nil || st.Heat.Throttled || st.Heat.CapGPUHz != 0 || st.Heat.CapCPUKHz != 0 {
			t.Errorf("%s: status heat %+v, want a reading that is not throttled and no cap", when, st.Heat)
		}
	}
	// One reading with the new floors and the old clocks (no physics step in between).
	step(false)
	if h := c.Status().Heat; h == nil || (h.GPUHz >= h.GPUFloorHz && h.CPUKHz >= h.CPUFloorKHz) {
		t.Fatalf("heat %+v: want the reading taken before the clocks followed the mode (running under the new floor)", h)
	}
	check("reading before the clocks followed")
	// The clocks follow: still no throttling.
	step(true)
	step(true)
	check("after the clocks followed")
}

// A mode write while the board throttles (the re-plan under the thermal cap) does not
// end the spell: the reading whose floors moved keeps the throttled verdict, and the
// next one, with the floors settled, judges again.
func TestModeWriteKeepsThrottlingSpell(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	hb := &heatBoard{fakeBoard: e.board}
	c, err := New(Options{Sched: e.sched, Board: hb, Store: e.store, Clock: e.clock, Targets: plan.Targets{LatencyMS: 400, PowerMW: 60000, RateRPS: 20}})
	if err != nil {
		t.Fatal(err)
	}
	zones := []powermode.ThermalZone{{Zone: "tj-thermal", Celsius: 99.5, TripC: 99}}
	set := func(gpuHz, floorHz int64) {
		hb.mu.Lock()
		defer hb.mu.Unlock()
		hb.heat = powermode.HeatReading{Zones: zones, GPULoad: 0.9, GPUHz: gpuHz, GPUFloorHz: floorHz, Throttled: gpuHz < floorHz}
		if gpuHz < floorHz {
			hb.heat.Why = fmt.Sprintf("GPU runs %d MHz under its %d MHz floor", gpuHz/1e6, floorHz/1e6)
		}
	}
	set(816e6, 1224e6)
	e.tick(c, 100*time.Millisecond)
	if !c.Throttled() {
		t.Fatal("not throttled after two readings of GPU 816 MHz under its 1224 MHz floor")
	}
	seq := c.Status().LastEvent
	// The floor moves to 612 MHz (a mode under the cap) while the firmware still caps at
	// 816: the reading is taken across the write.
	set(816e6, 612e6)
	e.tick(c, 50*time.Millisecond)
	if !c.Throttled() {
		t.Error("the reading across the mode write ended the spell")
	}
	// Floors settled, clock over its floor: the spell ends, once.
	e.tick(c, 50*time.Millisecond)
	if c.Throttled() {
		t.Error("still throttled with GPU 816 MHz over its settled 612 MHz floor")
	}
	var ends int
	for _, ev := range c.Events().List(seq) {
		if ev.Kind == KindThermal && strings.Contains(ev.Reason, "no longer throttles") {
			ends++
		}
		if ev.Kind == KindThermal && strings.HasPrefix(ev.Reason, "the board throttles: GPU") {
			t.Errorf("spell restarted: %q", ev.Reason)
		}
	}
	if ends != 1 {
		t.Errorf("%d 'no longer throttles' events, want 1: %v", ends, c.Events().List(seq))
	}
}
