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

// TestTwoStreamTrialEndsOnOneStreamsOwnLatency: a trial is judged stream by stream, each
// against its own latency budget (issue 31 item 3). With two streams the second stream's
// requests are served in 340 ms: over its own 280 ms budget, under the shared 400 ms the
// first stream holds. With its own budget the trial is abandoned at once, the
// configuration goes back to the confirmed one and the second stream's point at the
// trial is marked (not the first's); with only the shared budget the trial stays on. The
// pair's stream is held to its own budget too (before, the pair's trials judged it
// against the shared one: the trial stayed on at 340 ms against an own 280 ms).
func TestTwoStreamTrialEndsOnOneStreamsOwnLatency(t *testing.T) {
	for _, tc := range []struct {
		name     string
		two, own bool
	}{{"two streams, own budget", true, true}, {"two streams, shared budget", true, false}, {"pair, own budget", false, true}, {"pair, shared budget", false, false}} {
		own := tc.own
		e := newEnv(t, sched.NewFakeClock())
		e.seed()
		late := tInfer
		if tc.two {
			late = tInfer2
			e.seedStream(tInfer2)
		}
		c := e.controller(Config{MinLatency: 10, Refine: DefaultRefineOptions()}, plan.Targets{LatencyMS: 400, PowerMW: 35000, RateRPS: 20})
		var target StreamTarget
		if tc.two {
			target.RateRPS = 40
		}
		if own {
			target.LatencyMS = 280
		}
		if err := c.SetStreamTarget(late, target, nil); err != nil {
			t.Fatal(err)
		}
		e.board.set(20000, nil)
		grants := make(chan sched.Grant, 64)
		deliver := func(g sched.Grant) { grants <- g }
		if _, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleTrain, Workload: tTrain, Batch: 32}, func(sched.Grant) {}); err != nil {
			t.Fatal(err)
		}
		if tc.two {
			if _, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleInfer, Workload: tInfer, Batch: 1, BatchSizes: []int{1, 2, 4, 8}}, func(sched.Grant) {}); err != nil {
				t.Fatal(err)
			}
		}
		in2, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleInfer, Workload: late, Batch: 1, BatchSizes: []int{1, 2, 4, 8}}, deliver)
		if err != nil {
			t.Fatal(err)
		}
		streams := 1
		if tc.two {
			streams = 2
		}
		e.tick(c, 100*time.Millisecond)
		if cur := c.Status().Current; cur == nil || len(cur.Streams) != streams {
			t.Fatalf("%s: no plan of every stream: %+v", tc.name, cur)
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
			t.Fatalf("%s: the plan in force is not scored: %v", tc.name, err)
		}
		all, err := c.refineDecider(rates).ScoreAll(ps)
		if err != nil {
			c.mu.Unlock()
			t.Fatal(err)
		}
		var try *plan.MultiScored
		for i := range all {
			if s := all[i]; s.Mode == c.cur.Mode && keyOfScored(s) != from && (!tc.two || s.Streams[0].Batch == c.cur.Streams[0].Batch) {
				try = &all[i]
				break
			}
		}
		if try == nil {
			c.mu.Unlock()
			t.Fatalf("%s: no other configuration at mode %s", tc.name, c.cur.Mode.Human())
		}
		c.ref.confirmed = &refinePoint{key: from, eval: fs.MultiEval, at: now}
		c.ref.trial = &refineTrial{key: keyOfScored(*try), from: *c.ref.confirmed, start: now, deadline: now.Add(c.cfg.Refine.TrialMax)}
		c.decideRefined(context.Background(), KindTrial, "a trial of the test", try.MultiEval, rates)
		trial := *c.cur
		c.mu.Unlock()
		if keyOfChoice(trial) != keyOfScored(*try) {
			t.Fatalf("%s: the trial applied %+v, want %s", tc.name, trial, c.keyWords(keyOfScored(*try)))
		}
		seq := c.Status().LastEvent
		// Latency is judged on requests served at the configuration in force only.
		e.clock.Advance(e.sched.Config().RecentWindow)
		// Serve 15 of the late stream's requests 340 ms after they arrive.
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
			t.Logf("%s: %s: %s", tc.name, ev.Kind, ev.Reason)
			if ev.Kind == KindAbandon {
				abandon = &ev
			}
		}
		c.mu.Lock()
		bad2 := c.isBad(late, trial.Mode, trial.Streams[streams-1].Batch)
		bad1 := tc.two && c.isBad(tInfer, trial.Mode, trial.Streams[0].Batch)
		onTrial := c.ref.trial != nil
		back := keyOfChoice(*c.cur) == from
		c.mu.Unlock()
		if !own {
			if abandon != nil || !onTrial || bad2 {
				t.Fatalf("%s: the shared 400 ms budget held, yet the trial ended (abandon %+v, marked %v)", tc.name, abandon, bad2)
			}
			continue
		}
		want := "p99 latency 340.0 ms over the 280 ms budget" // the pair's words
		if tc.two {
			want = "stream " + tInfer2 + ": p99 latency 340.0 ms over its 280 ms budget"
		}
		if abandon == nil || !strings.Contains(abandon.Reason, want) {
			t.Fatalf("%s: no abandon saying %q: %+v", tc.name, want, abandon)
		}
		if len(abandon.Streams) != streams || abandon.Streams[streams-1] != (StreamBatch{Workload: late, Batch: c.Status().Current.Streams[streams-1].Batch}) || abandon.Batch != abandon.Streams[0].Batch {
			t.Fatalf("%s: the abandon event names the batches %+v (batch %d): want every stream's, back at the confirmed configuration", tc.name, abandon.Streams, abandon.Batch)
		}
		if onTrial || !back {
			t.Fatalf("%s: after the abandon: on trial %v, back at the confirmed configuration %v", tc.name, onTrial, back)
		}
		if !bad2 || bad1 {
			t.Fatalf("%s: marked points: the stream that broke %v (want true), the other %v (want false)", tc.name, bad2, bad1)
		}
		st := c.Status().Refine
		if st == nil || len(st.Failed) != 1 || len(st.Failed[0].Streams) != streams || st.Failed[0].Streams[streams-1].Batch != trial.Streams[streams-1].Batch {
			t.Fatalf("%s: status refine failed neighbours %+v: want the trial with every stream's batch", tc.name, st)
		}
	}
}
