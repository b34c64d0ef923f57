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

// TestTwoStreamTrialEndsOnOneStreamsOwnLatency: a trial with two streams is judged
// stream by stream, each against its own latency budget (issue 31 item 3). The second
// stream's requests are served in 340 ms: over its own 280 ms budget, under the shared
// 400 ms the first stream holds. With its own budget the trial is abandoned at once, the
// configuration goes back to the confirmed one and the second stream's point at the
// trial is marked (not the first's); with only the shared budget the trial stays on.
func TestTwoStreamTrialEndsOnOneStreamsOwnLatency(t *testing.T) {
	for _, own := range []bool{true, false} {
		e := newEnv(t, sched.NewFakeClock())
		e.seed()
		e.seedStream(tInfer2)
		c := e.controller(Config{MinLatency: 10, Refine: DefaultRefineOptions()}, plan.Targets{LatencyMS: 400, PowerMW: 35000, RateRPS: 20})
		target := StreamTarget{RateRPS: 40}
		if own {
			target.LatencyMS = 280
		}
		if err := c.SetStreamTarget(tInfer2, target, nil); err != nil {
			t.Fatal(err)
		}
		e.board.set(20000, nil)
		e.register(nil)
		grants := make(chan sched.Grant, 64)
		in2, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleInfer, Workload: tInfer2, Batch: 1, BatchSizes: []int{1, 2, 4, 8}},
			func(g sched.Grant) { grants <- g })
		if err != nil {
			t.Fatal(err)
		}
		e.tick(c, 100*time.Millisecond)
		if cur := c.Status().Current; cur == nil || len(cur.Streams) != 2 {
			t.Fatalf("own %v: no joint plan of both streams: %+v", own, cur)
		}
		// A trial from the plan in force (confirmed) to another stored configuration of
		// both streams at the same mode, started as refineStep starts one.
		c.mu.Lock()
		now := e.clock.Now()
		rates, _ := c.streamRates(now)
		from := keyOfChoice(*c.cur)
		fs, ok := c.scoreKey(from, rates)
		ps, err := c.plannedProfiles()
		if !ok || err != nil {
			c.mu.Unlock()
			t.Fatalf("own %v: the plan in force is not scored: %v", own, err)
		}
		all, err := c.refineDecider(rates).ScoreAll(ps)
		if err != nil {
			c.mu.Unlock()
			t.Fatal(err)
		}
		var try *plan.MultiScored
		for i := range all {
			if s := all[i]; s.Mode == c.cur.Mode && keyOfScored(s) != from && s.Streams[0].Batch == c.cur.Streams[0].Batch {
				try = &all[i]
				break
			}
		}
		if try == nil {
			c.mu.Unlock()
			t.Fatalf("own %v: no other configuration at mode %s", own, c.cur.Mode.Human())
		}
		c.ref.confirmed = &refinePoint{key: from, eval: fs.MultiEval, at: now}
		c.ref.trial = &refineTrial{key: keyOfScored(*try), from: *c.ref.confirmed, start: now, deadline: now.Add(c.cfg.Refine.TrialMax)}
		c.decideRefined(context.Background(), KindTrial, "a trial of the test", try.MultiEval, rates)
		trial := *c.cur
		c.mu.Unlock()
		if keyOfChoice(trial) != keyOfScored(*try) {
			t.Fatalf("own %v: the trial applied %+v, want %s", own, trial, c.keyWords(keyOfScored(*try)))
		}
		seq := c.Status().LastEvent
		// Latency is judged on requests served at the configuration in force only.
		e.clock.Advance(e.sched.Config().RecentWindow)
		// Serve 15 of the second stream's requests 340 ms after they arrive.
		for i := range 15 {
			if err := e.sched.Acquire(in2, uint64(i)); err != nil {
				t.Fatal(err)
			}
			if err := e.sched.Arrivals(in2, []proto.Request{{ID: fmt.Sprint("r", i), AgeMS: 290}}); err != nil {
				t.Fatal(err)
			}
			var g sched.Grant
			select {
			case g = <-grants:
			case <-time.After(5 * time.Second):
				t.Fatal("no grant for an overdue request")
			}
			e.clock.Advance(50 * time.Millisecond)
			if err := e.sched.Release(in2, sched.Release{Grant: g.ID}); err != nil {
				t.Fatal(err)
			}
		}
		e.tick(c, 100*time.Millisecond)
		var abandon *Event
		for _, ev := range c.Events().List(seq) {
			t.Logf("own %v: %s: %s", own, ev.Kind, ev.Reason)
			if ev.Kind == KindAbandon {
				abandon = &ev
			}
		}
		c.mu.Lock()
		bad2 := c.isBad(tInfer2, trial.Mode, trial.Streams[1].Batch)
		bad1 := c.isBad(tInfer, trial.Mode, trial.Streams[0].Batch)
		onTrial := c.ref.trial != nil
		back := keyOfChoice(*c.cur) == from
		c.mu.Unlock()
		if !own {
			if abandon != nil || !onTrial || bad2 {
				t.Fatalf("shared 400 ms budget held: the trial ended (abandon %+v, marked %v)", abandon, bad2)
			}
			continue
		}
		if abandon == nil || !strings.Contains(abandon.Reason, "stream "+tInfer2+": p99 latency") || !strings.Contains(abandon.Reason, "over its 280 ms budget") {
			t.Fatalf("no abandon naming the stream over its own 280 ms budget: %+v", abandon)
		}
		if onTrial || !back {
			t.Fatalf("after the abandon: on trial %v, back at the confirmed configuration %v", onTrial, back)
		}
		if !bad2 || bad1 {
			t.Fatalf("marked points: the stream that broke %v (want true), the other %v (want false)", bad2, bad1)
		}
		st := c.Status().Refine
		if st == nil || len(st.Failed) != 1 || len(st.Failed[0].Streams) != 2 || st.Failed[0].Streams[1].Batch != trial.Streams[1].Batch {
			t.Fatalf("status refine failed neighbours %+v: want the trial with both streams' batches", st)
		}
	}
}
