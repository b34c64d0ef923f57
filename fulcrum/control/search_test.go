package control

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// A search pauses training while it measures modes (the live profiler). A plan whose
// latency alone is infeasible keeps a watch on the declared micro-batches (watchMicro):
// it resumes training once the smallest one fits the room. During a search the board
// moves to modes where it may fit, and the watch then resumed training beside the
// profile batches: on the lifetime board a re-search drew 30–39 W against a 20 W budget
// for 14 s that way (docs/benchmarks.md "After-plan breaks"). While the search runs,
// training stays paused; the plan after it decides again.
func TestSearchKeepsMicroBatchedTrainingPaused(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	c := e.controller(Config{}, plan.Targets{LatencyMS: 30, PowerMW: 35000, RateRPS: 20})
	e.board.set(20000, nil)
	deliver := func(sched.Grant) {} // profile batches are never answered: the search stays in flight
	trainID, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleTrain, Workload: tTrain, Batch: 32, MicroBatches: []int{16}}, deliver)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleInfer, Workload: tInfer, Batch: 1, BatchSizes: []int{1, 2, 4, 8}}, deliver); err != nil {
		t.Fatal(err)
	}
	e.tick(c, 300*time.Millisecond)
	// Measured at the plan's mode, the micro-batch is too long for the room: the watch
	// pauses training.
	if err := e.sched.ExpectTimes(trainID, map[int]time.Duration{16: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	e.tick(c, 300*time.Millisecond)
	if st := c.Status(); st.Current == nil || st.Current.Predicted.Binding != string(plan.ConstraintLatency) || !e.sched.Snapshot().TrainingPaused {
		t.Fatalf("plan %+v, paused %v: want training paused by a plan infeasible on latency", st.Current, e.sched.Snapshot().TrainingPaused)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = c.Optimize(ctx, "gmd", 0)
	}()
	for i := 0; c.Searching() == ""; i++ {
		if i > 1000 {
			t.Fatal("the search did not start")
		}
		time.Sleep(time.Millisecond)
	}
	// The search moved the board; there the micro-batch fits the room.
	if err := e.sched.ExpectTimes(trainID, map[int]time.Duration{16: time.Microsecond}); err != nil {
		t.Fatal(err)
	}
	if !e.sched.Snapshot().Workers[0].MicroBatchFits && !e.sched.Snapshot().Workers[1].MicroBatchFits {
		t.Fatal("the micro-batch does not fit the room: the test shows nothing")
	}
	e.tick(c, time.Second)
	if c.Searching() == "" {
		t.Fatal("the search ended: the test shows nothing")
	}
	if !e.sched.Snapshot().TrainingPaused {
		t.Error("training resumed while the search measures modes")
	}
	for _, ev := range c.Events().List(0) {
		if strings.HasPrefix(ev.Reason, "training resumed") {
			t.Errorf("event %q during the search", ev.Reason)
		}
	}
	cancel()
	<-done
}
