package control

import (
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// docs/design.md §2: when no known configuration meets the budgets, training is paused (inference
// and power first) and resumes once budgets a configuration meets are set.
func TestTrainingPausedWhileNothingIsFeasible(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	// 1 ms p99 with training running is impossible on any stored mode.
	c := e.controller(Config{}, plan.Targets{LatencyMS: 1, PowerMW: 35000, RateRPS: 20})
	e.board.set(20000, nil)
	e.register(nil)
	e.tick(c, 300*time.Millisecond)
	st := c.Status()
	if st.Current == nil || st.Current.Predicted.Feasible {
		t.Fatalf("plan %+v: want an infeasible least-violating configuration", st.Current)
	}
	if !e.sched.Snapshot().TrainingPaused {
		t.Fatal("training runs although no configuration meets the budgets")
	}
	paused := false
	for _, ev := range c.Events().List(0) {
		paused = paused || strings.HasPrefix(ev.Reason, "training paused")
	}
	if !paused {
		t.Fatalf("no event says training was paused: %v", kinds(c.Events().List(0)))
	}
	c.SetTargets(plan.Targets{LatencyMS: 400, PowerMW: 35000, RateRPS: 20})
	e.tick(c, 300*time.Millisecond)
	if st := c.Status(); st.Current == nil || !st.Current.Predicted.Feasible {
		t.Fatalf("plan %+v after relaxing the budgets: want feasible", st.Current)
	}
	if e.sched.Snapshot().TrainingPaused {
		t.Fatal("training still paused under budgets a configuration meets")
	}
}
