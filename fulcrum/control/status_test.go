package control

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// One status shows one measured rate per stream (issue 34 item 2): the streams' rows, the
// workloads' rows and the budgets line used to show three different figures for the same
// stream (the controller's meter, the scheduler's window mean, the first stream's meter).
func TestStatusOneRatePerStream(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	e.seedStream(tInfer2)
	c := e.controller(Config{RateTau: 500 * time.Millisecond, RateWarmup: time.Second}, plan.Targets{LatencyMS: 400, PowerMW: 35000})
	e.board.set(20000, nil)
	_, in1 := e.register(nil)
	in2 := e.registerInfer(tInfer2)
	n := 0
	acc := map[string]float64{} // requests due, carried between 50 ms ticks
	arrive := func(rates map[string]float64, d time.Duration) {
		for end := e.clock.Now().Add(d); e.clock.Now().Before(end); {
			for id, r := range rates {
				var reqs []proto.Request
				acc[id] += r * 0.05
				k := int(acc[id])
				acc[id] -= float64(k)
				for range k {
					n++
					reqs = append(reqs, proto.Request{ID: fmt.Sprintf("r%d", n)})
				}
				if err := e.sched.Arrivals(id, reqs); err != nil {
					t.Fatal(err)
				}
			}
			e.tick(c, 50*time.Millisecond)
		}
	}
	// The rates change: a window mean and an EWMA disagree until both forget the old one.
	arrive(map[string]float64{in1: 10, in2: 4}, 4*time.Second)
	arrive(map[string]float64{in1: 4, in2: 12}, time.Second)
	api := NewAPI(c, time.Time{})
	st, err := api.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Streams) != 2 {
		t.Fatalf("status shows %d streams: %+v", len(st.Streams), st.Streams)
	}
	for _, s := range st.Streams {
		if s.RateFixed || s.RateRPS <= 0 {
			t.Fatalf("stream %+v: want a measured rate", s)
		}
		for _, wl := range st.Workloads {
			if wl.Workload == s.Workload && wl.Role == proto.RoleInfer && wl.ArrivalRateHz != s.RateRPS {
				t.Errorf("stream %s: %.2f req/s in the streams' rows, %.2f in the workloads' rows", s.Workload, s.RateRPS, wl.ArrivalRateHz)
			}
		}
	}
	// With several streams there is no one measured rate: the budgets line shows none.
	if !st.Budgets.RateAuto || st.Budgets.RateRPS != 0 || strings.Contains(st.Budgets.String(), "measured") {
		t.Errorf("budgets with two streams measured separately: %+v (%s); want rate auto and no one measured rate", st.Budgets, st.Budgets.String())
	}
	// The stream that leaves: one stream, and the budgets line shows its rate, the same one.
	e.sched.Unregister(in2)
	arrive(map[string]float64{in1: 6}, time.Second)
	st, err = api.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Streams) != 1 || st.Budgets.RateRPS != st.Streams[0].RateRPS {
		t.Errorf("one stream: streams %+v, budgets %+v; want the same measured rate", st.Streams, st.Budgets)
	}
}

// An infeasible plan for several streams: the degraded reason gives the figures the
// decision was judged on (predicted with training running) beside what the board draws
// now, with training paused (issue 34 item 2: "DEGRADED: … power budget" at 9.7 W against
// 30 W, unexplained).
func TestDegradedReasonGivesItsFigures(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	e.seedStream(tInfer2)
	c := e.controller(Config{}, plan.Targets{LatencyMS: 400, PowerMW: 8000, RateRPS: 10})
	e.board.set(6500, nil) // training paused: the board draws far less than predicted
	e.register(nil)
	e.registerInfer(tInfer2)
	e.tick(c, 2*time.Second)
	st, err := NewAPI(c, time.Time{}).Status(context.Background())
	if err != nil || st.Plan == nil || st.Plan.Feasible || st.Plan.Binding != "power" || !st.TrainingPaused {
		t.Fatalf("want an infeasible plan bound by power with training paused: plan %+v, paused %v, %v", st.Plan, st.TrainingPaused, err)
	}
	want := fmt.Sprintf("the plan is predicted to draw %.1f W with training running, over the 8 W budget; the board draws 6.5 W now (1 s average) with training paused", st.Plan.PredPowerMW/1000)
	if !st.Degraded || !strings.Contains(st.DegradedReason, want) {
		t.Errorf("degraded reason %q; want it to say %q", st.DegradedReason, want)
	}
}
