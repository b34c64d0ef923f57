package control

import (
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// Issue 32: a latency budget no mode meets with whole minibatches pauses training — unless
// the training worker declared micro-batches: then training keeps running in turns short
// enough for the admission room (the scheduler picks the size). A power budget nothing
// meets still pauses it: shorter turns do not lower the power.
func TestInfeasibleLatencyKeepsMicroBatchedTrainingRunning(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	c := e.controller(Config{}, plan.Budgets{LatencyMS: 30, PowerMW: 35000, RateRPS: 20})
	e.board.set(20000, nil)
	deliver := func(sched.Grant) {}
	if _, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleTrain, Workload: tTrain, Batch: 32, MicroBatches: []int{4, 8, 16}}, deliver); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleInfer, Workload: tInfer, Batch: 1, BatchSizes: []int{1, 2, 4, 8}}, deliver); err != nil {
		t.Fatal(err)
	}
	e.tick(c, 300*time.Millisecond)
	st := c.Status()
	if st.Current == nil || st.Current.Predicted.Feasible || st.Current.Predicted.Binding != string(plan.ConstraintLatency) {
		t.Fatalf("plan %+v: want an infeasible plan bound by latency (whole minibatches)", st.Current)
	}
	if e.sched.Snapshot().TrainingPaused {
		t.Fatal("training paused although the training worker runs micro-batches that fit the room")
	}
	for _, ev := range c.Events().List(0) {
		if strings.HasPrefix(ev.Reason, "training paused") {
			t.Fatalf("event %q: training must not be paused", ev.Reason)
		}
	}
	// A power budget nothing meets still pauses it.
	c.SetBudgets(plan.Budgets{LatencyMS: 30, PowerMW: 1000, RateRPS: 20})
	e.tick(c, 300*time.Millisecond)
	if st := c.Status(); st.Current == nil || st.Current.Predicted.Binding == string(plan.ConstraintLatency) {
		t.Skipf("plan %+v: the power budget does not bind here", st.Current)
	}
	if !e.sched.Snapshot().TrainingPaused {
		t.Fatal("training runs although the power budget binds")
	}
}

// When even the smallest declared micro-batch does not fit the room, training is paused
// as before: shorter turns would still make requests miss.
func TestMicroBatchesThatDoNotFitStillPause(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	c := e.controller(Config{}, plan.Budgets{LatencyMS: 4, PowerMW: 35000, RateRPS: 20})
	e.board.set(20000, nil)
	deliver := func(sched.Grant) {}
	if _, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleTrain, Workload: tTrain, Batch: 32, MicroBatches: []int{16}}, deliver); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleInfer, Workload: tInfer, Batch: 1, BatchSizes: []int{1, 2, 4, 8}}, deliver); err != nil {
		t.Fatal(err)
	}
	e.tick(c, 300*time.Millisecond)
	if st := c.Status(); st.Current == nil || st.Current.Predicted.Binding != string(plan.ConstraintLatency) {
		t.Fatalf("plan %+v: want an infeasible plan bound by latency", st.Current)
	}
	if !e.sched.Snapshot().TrainingPaused {
		t.Fatal("training runs although not even its smallest micro-batch fits a 4 ms budget")
	}
}
