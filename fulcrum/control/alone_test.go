package control

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// aloneEnv stores two modes by hand, beside a 40 ms budget at 20 req/s and 15 W: fast
// (GPU 1224 MHz: training 50 ms, inference 5 ms, both at 20 W) and slow (GPU 408 MHz:
// training 100 ms, inference 10 ms, both at 12 W). Nothing meets the budgets with
// training (a request waits behind a 50–100 ms training turn); the decision's
// least-violating configuration is the fast mode (latency 1.4× and power 1.33× the
// budgets against latency 2.75×), where the streams alone still break the power budget:
// the board draws 20 W whatever runs there. The slow mode serves them alone within both.
func aloneEnv(t *testing.T) (e *env, fast, slow powermode.Mode) {
	e, fast, slow, _ = aloneEnv3(t, false)
	return e, fast, slow
}

// aloneEnv3 is aloneEnv, with a third mode when mid is set (GPU 816 MHz: training 70 ms,
// inference 7 ms, both at 13 W), which then serves the streams best alone.
func aloneEnv3(t *testing.T, mid bool) (e *env, fast, slow, middle powermode.Mode) {
	t.Helper()
	e = newEnv(t, sched.NewFakeClock())
	fast, slow = e.modes[5], e.modes[0]
	now := time.Now().UTC()
	put := func(w string, role truth.Role, m powermode.Mode, b int, ms, mw float64) {
		if err := e.store.Put(store.Profile{Board: e.spec.Name, Workload: w, Role: role, Mode: m, Batch: b,
			TimeMS: store.TimeStats{Mean: ms, P50: ms, P95: ms}, PowerMW: store.PowerStats{Mean: mw},
			Samples: 1, StartedAt: now, FinishedAt: now, Source: store.SourceSim}); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []struct {
		mode           powermode.Mode
		trainMS, infMS float64
		powerMW        float64
	}{{fast, 50, 5, 20000}, {slow, 100, 10, 12000}, {e.modes[2], 70, 7, 13000}} {
		if m.mode == e.modes[2] && !mid {
			continue
		}
		put(tTrain, truth.Train, m.mode, 32, m.trainMS, m.powerMW)
		put(tInfer, truth.Infer, m.mode, 1, m.infMS, m.powerMW)
	}
	return e, fast, slow, e.modes[2]
}

// Issue 31 (budgets broken after the plan where nothing keeps them with training): a
// plan that pauses training runs the configuration that serves the streams best alone
// when its own, served alone, would still break a budget; switched off, the decision's
// configuration runs as before.
func TestPausedPlanServesTheStreamsAlone(t *testing.T) {
	targets := plan.Targets{RateRPS: 20, LatencyMS: 40, PowerMW: 15000}
	for _, off := range []bool{false, true} {
		e, fast, slow := aloneEnv(t)
		_, _ = e.register(nil)
		ctl := e.controller(Config{ServeAloneOff: off, MinProfiles: 2, ResearchOff: true}, targets)
		e.board.set(10000, nil)
		e.tick(ctl, 100*time.Millisecond)
		cur := ctl.Status().Current
		if cur == nil {
			t.Fatalf("off %v: nothing planned; events %v", off, kinds(ctl.Events().List(0)))
		}
		if !e.sched.Snapshot().TrainingPaused || cur.Predicted.Feasible {
			t.Fatalf("off %v: training paused %v, claimed %v: want a paused plan", off, e.sched.Snapshot().TrainingPaused, cur.Predicted.Feasible)
		}
		want := slow
		if off {
			want = fast
		}
		if cur.Mode != want {
			t.Fatalf("off %v: applied %s, want %s", off, cur.Mode.Human(), want.Human())
		}
		var plans []string
		for _, ev := range ctl.Events().List(0) {
			if ev.Kind == KindPlan {
				plans = append(plans, ev.Reason)
			}
		}
		said := len(plans) > 0 && strings.Contains(plans[len(plans)-1], "serves them best alone")
		if said == off {
			t.Errorf("off %v: the plan's event %q", off, plans)
		}
		if !off && (cur.Predicted.ThroughputSPS != 0 || cur.Predicted.PowerMW > targets.PowerMW || cur.Predicted.LatencyMS > targets.LatencyMS) {
			t.Errorf("served alone: predicted %+v, want no training and both budgets kept", cur.Predicted)
		}
	}
}

// The power rule, with nothing within the power budget with training, steps to the
// configuration that serves the streams best alone within it, not to the lowest-power
// configuration (chosen for nothing the streams need). Here training draws more than
// inference at both modes (14 and 13 W against 8 and 7 W), the plan trains at the fast
// mode (13.4 W predicted against 15 W), and the board then reads 19 W there: scaled by
// that 1.42×, nothing with training is within 13.5 W, the fast mode alone is (8 W).
func TestPowerStepServesAloneWhenNothingFitsWithTraining(t *testing.T) {
	for _, off := range []bool{true, false} {
		powerStepAlone(t, off)
	}
}

func powerStepAlone(t *testing.T, off bool) {
	e := newEnv(t, sched.NewFakeClock())
	fast, slow := e.modes[5], e.modes[0]
	now := time.Now().UTC()
	put := func(w string, role truth.Role, m powermode.Mode, b int, ms, mw float64) {
		if err := e.store.Put(store.Profile{Board: e.spec.Name, Workload: w, Role: role, Mode: m, Batch: b,
			TimeMS: store.TimeStats{Mean: ms, P50: ms, P95: ms}, PowerMW: store.PowerStats{Mean: mw},
			Samples: 1, StartedAt: now, FinishedAt: now, Source: store.SourceSim}); err != nil {
			t.Fatal(err)
		}
	}
	put(tTrain, truth.Train, fast, 32, 50, 14000)
	put(tInfer, truth.Infer, fast, 1, 5, 8000)
	put(tTrain, truth.Train, slow, 32, 100, 13000)
	put(tInfer, truth.Infer, slow, 1, 10, 7000)
	_, _ = e.register(nil)
	{
		ctl := e.controller(Config{MinProfiles: 2, ResearchOff: true, ServeAloneOff: off}, plan.Targets{RateRPS: 20, LatencyMS: 400, PowerMW: 15000})
		e.board.set(10000, nil)
		e.tick(ctl, 100*time.Millisecond)
		if cur := ctl.Status().Current; cur == nil || cur.Mode != fast || !cur.Predicted.Feasible {
			t.Fatalf("off %v: planned %+v, want the fast mode claimed", off, cur)
		}
		e.board.set(19000, nil) // over the 15 W budget
		var step *Event
		for i := 0; i < 100 && step == nil; i++ {
			e.tick(ctl, 50*time.Millisecond)
			for _, ev := range ctl.Events().List(0) {
				if ev.Kind == KindStepDown {
					step = &ev
				}
			}
		}
		if step == nil {
			t.Fatalf("off %v: no power step in 5 s; events %v", off, kinds(ctl.Events().List(0)))
		}
		cur := ctl.Status().Current
		alone := strings.Contains(step.Reason, "served alone")
		if alone == off || (!off && !e.sched.Snapshot().TrainingPaused) {
			t.Errorf("off %v: the step %q to %s, training paused %v", off, step.Reason, cur.Mode.Human(), e.sched.Snapshot().TrainingPaused)
		}
		if !off && (cur.Mode != fast || cur.Predicted.PowerMW > 15000*0.9) {
			t.Errorf("served alone at %s, predicted %+v: want the fast mode within 13.5 W", cur.Mode.Human(), cur.Predicted)
		}
		if off && cur.Mode != slow {
			t.Errorf("serving alone off: stepped to %s, want the lowest-power configuration (%s)", cur.Mode.Human(), slow.Human())
		}
	}
}

// The latency rule while the streams are served alone steps to another configuration
// served alone — not to one with a shorter training turn, which would resume training
// where nothing meets the budgets with it. Served alone at the middle mode (7 ms batches)
// and read late (60 ms against 40 ms), it steps to the slow mode: the fast one is over
// the power budget alone.
func TestLatencyStepWhileServedAlone(t *testing.T) {
	e, _, slow, mid := aloneEnv3(t, true)
	c := e.controller(Config{MinProfiles: 2, ResearchOff: true, MinLatency: 5}, plan.Targets{RateRPS: 20, LatencyMS: 40, PowerMW: 15000})
	srv := e.serveInference()
	e.board.set(10000, nil)
	e.tick(c, 100*time.Millisecond)
	if cur := c.Status().Current; cur == nil || cur.Mode != mid || !e.sched.Snapshot().TrainingPaused {
		t.Fatalf("planned %+v: want the middle mode served alone", cur)
	}
	seq := c.Status().LastEvent
	e.tick(c, 6*time.Second) // past the latency cooldown and the recent window
	for range 12 {
		srv.serve(1, 60*time.Millisecond, nil)
		c.Step(context.Background())
	}
	evs := c.Events().List(seq)
	cur := c.Status().Current
	var step string
	for _, ev := range evs {
		if ev.Kind == KindStepDown {
			step = ev.Reason
		}
	}
	if cur.Mode != slow || !e.sched.Snapshot().TrainingPaused || cur.Predicted.Feasible || !strings.Contains(step, "while the streams are served alone") {
		t.Fatalf("after the p99 broke: %s, training paused %v, claimed %v, step %q; events %v", cur.Mode.Human(), e.sched.Snapshot().TrainingPaused, cur.Predicted.Feasible, step, kinds(evs))
	}
}
