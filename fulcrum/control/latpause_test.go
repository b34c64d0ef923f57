package control

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// The latency rule's last resort (latpause.go): the pair's p99 over the budget at the
// fastest-training mode with every smaller batch there broken before — nowhere shorter to
// step to. Training pauses at the configuration in force for latency_pause_ms, resumes,
// and a p99 that breaks again soon after doubles the pause; one that breaks only after
// training ran more than twice the last pause starts again from latency_pause_ms. The mode
// and batch never move. Before, the step only said so and training kept making the
// stream's requests late (the pair with heavy-tailed minibatches: 8 % late, docs/runtime.md).
func TestLatencyLastResortPausesTraining(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.modes = e.modes[:5] // GPU 408–1020 MHz: the plan's mode trains the fastest
	e.seed()
	c := e.controller(Config{MinLatency: 10, LatencyPause: 10 * time.Second}, plan.Targets{LatencyMS: 400, RateRPS: 20})
	e.register(nil)
	e.board.set(20000, nil)
	e.tick(c, 100*time.Millisecond)
	cur := c.Status().Current
	if cur == nil || cur.Mode != e.modes[4] {
		t.Fatalf("plan %+v: want mode %s (the fastest training)", cur, e.modes[4].Human())
	}
	breakLatency := func() {
		t.Helper()
		c.mu.Lock()
		for b := 1; b <= 8; b++ { // every other batch of the mode broke the budget before
			if b != cur.Batch() {
				c.markBad(c.pair.Infer, cur.Mode, b)
			}
		}
		c.measured.LatencyP99MS, c.latCount = 450, c.cfg.MinLatency // a p99 over enough requests to judge
		c.stepDownLatency(context.Background())
		c.mu.Unlock()
	}
	pauseFor := func(want string) {
		t.Helper()
		evs := c.Events().List(0)
		last := evs[len(evs)-1]
		if last.Kind != KindStepDown || !strings.Contains(last.Reason, "training paused for "+want+" at the configuration in force") {
			t.Fatalf("last event %s: %s; want the last resort's pause of %s", last.Kind, last.Reason, want)
		}
		if !e.sched.Snapshot().TrainingPaused {
			t.Fatalf("training runs after the last resort's %s pause", want)
		}
		if st := c.Status().Current; st.Mode != cur.Mode || st.Batch() != cur.Batch() {
			t.Fatalf("the last resort moved the configuration: mode %s batch %d", st.Mode.Human(), st.Batch())
		}
	}
	breakLatency()
	pauseFor("10s")
	e.tick(c, 9*time.Second)
	if !e.sched.Snapshot().TrainingPaused {
		t.Fatal("training resumed before the pause ended")
	}
	e.tick(c, 2*time.Second)
	if e.sched.Snapshot().TrainingPaused {
		t.Fatal("training still paused after the last resort's 10 s")
	}
	e.tick(c, 6*time.Second) // broke again soon after: twice as long
	breakLatency()
	pauseFor("20s")
	e.tick(c, 21*time.Second)
	if e.sched.Snapshot().TrainingPaused {
		t.Fatal("training still paused after the last resort's 20 s")
	}
	e.tick(c, 45*time.Second) // ran more than twice the last pause: from the start again
	breakLatency()
	pauseFor("10s")
	// A budget change decides again: the pause is the decision's, not the last resort's.
	if err := c.SetTargets(plan.Targets{LatencyMS: 800, RateRPS: 20}); err != nil {
		t.Fatal(err)
	}
	e.tick(c, time.Second)
	if e.sched.Snapshot().TrainingPaused {
		t.Fatal("training paused after a looser budget was set: the last resort outlived the decision")
	}
}
