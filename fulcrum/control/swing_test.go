package control

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// slowStream is an inference worker whose requests the test serves at the latency it
// chooses (the scheduler measures arrival age plus nothing: grants are released at once).
type slowStream struct {
	name   string
	id     string
	grants chan sched.Grant
	seq    uint64
}

func (e *env) slowStream(name string) *slowStream {
	e.t.Helper()
	s := &slowStream{name: name, grants: make(chan sched.Grant, 64)}
	id, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleInfer, Workload: name, Batch: 1, BatchSizes: []int{1, 2, 4, 8}},
		func(g sched.Grant) { s.grants <- g })
	if err != nil {
		e.t.Fatal(err)
	}
	s.id = id
	return s
}

// serve serves n requests of s, each latencyMS after it arrived.
func (s *slowStream) serve(t *testing.T, sc *sched.Scheduler, n int, latencyMS float64) {
	t.Helper()
	for range n {
		s.seq++
		if err := sc.Acquire(s.id, s.seq); err != nil {
			t.Fatal(err)
		}
		if err := sc.Arrivals(s.id, []proto.Request{{ID: fmt.Sprintf("%s-%d", s.name, s.seq), AgeMS: latencyMS}}); err != nil {
			t.Fatal(err)
		}
		var g sched.Grant
		select {
		case g = <-s.grants:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no grant for a queued request", s.name)
		}
		if err := sc.Release(s.id, sched.Release{Grant: g.ID}); err != nil {
			t.Fatal(err)
		}
	}
}

// modelLatencyMS is model v1's p99 for each stream at the configuration in force (what
// the stored profiles predict, without any ratio the controller learned).
func modelLatencyMS(t *testing.T, c *Controller) map[string]float64 {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	ps, err := StoredMultiProfiles(c.store, c.board.Info().Name, c.grp)
	if err != nil {
		t.Fatal(err)
	}
	rates, _ := c.streamRates(c.clock.Now())
	m, err := plan.NewMultiModel(c.multiBudgets(rates), c.cfg.InferBatches)
	if err != nil {
		t.Fatal(err)
	}
	var batches []int
	for _, s := range c.grp.Streams {
		batches = append(batches, c.batchFor(*c.cur, s.Workload))
	}
	out := map[string]float64{}
	for _, p := range ps {
		if p.Mode != c.cur.Mode {
			continue
		}
		e, err := m.Evaluate(p, batches)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range e.Streams {
			out[s.Name] = s.LatencyMS
		}
	}
	return out
}

// Several streams that each measure twice model v1's latency at every mode: the
// controller learns the ratio at the first violation and moves once, to a configuration
// predicted within the budgets after the correction, or, where none is, to the least
// violating one with training paused, and stays there. It walked from mode to mode,
// each violation leaving out one (stream, mode, batch) and finding the next as
// under-predicted (issue 34 item 3: 7 mode changes in 60 s, down to 1 core, on the
// simulated AGX with three streams).
func TestSeveralStreamsLatencyUnderPredictedEverywhere(t *testing.T) {
	const ratio = 2.0
	for _, tc := range []struct {
		name             string
		latMS, rateRPS   float64
		wantPaused       bool
		wantViolationsLE uint64
	}{
		// The first plan's streams are predicted at 112 and 116 ms: at twice that no
		// stored configuration is within 200 ms.
		{name: "none within the budget", latMS: 200, rateRPS: 5, wantPaused: true, wantViolationsLE: 1},
		// At 40 req/s the first plan batches (229 and 237 ms predicted); batch 1 is
		// within 250 ms at twice the model.
		{name: "one within the budget", latMS: 250, rateRPS: 40, wantPaused: false, wantViolationsLE: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, sched.NewFakeClock())
			e.seed()
			e.seedStream(tInfer2)
			c := e.controller(Config{MinLatency: 10}, plan.Targets{LatencyMS: tc.latMS, PowerMW: 60000, RateRPS: tc.rateRPS})
			e.board.set(20000, nil)
			if _, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleTrain, Workload: tTrain, Batch: 32}, func(sched.Grant) {}); err != nil {
				t.Fatal(err)
			}
			streams := []*slowStream{e.slowStream(tInfer), e.slowStream(tInfer2)}
			e.tick(c, 100*time.Millisecond)
			if c.Status().Current == nil || len(c.Status().Current.Streams) != 2 {
				t.Fatalf("no joint plan: %+v", c.Status().Current)
			}
			t.Logf("first plan: %s, model v1 %v", c.Status().Current.Mode.Human(), modelLatencyMS(t, c))
			for range 60 {
				model := modelLatencyMS(t, c)
				for _, s := range streams {
					s.serve(t, e.sched, 4, ratio*model[s.name])
				}
				e.tick(c, time.Second)
			}
			var changes []string
			for _, ev := range c.Events().List(0) {
				t.Logf("%s: %s", ev.Kind, ev.Reason)
				if ev.Kind == KindApply && ev.Mode != nil {
					changes = append(changes, fmt.Sprintf("%s %v", ev.Mode.Human(), ev.Reason[strings.Index(ev.Reason, " and ")+5:strings.LastIndex(ev.Reason, " applied")]))
				}
			}
			v, _ := c.Counters()
			t.Logf("%d configurations applied in 60 s (%s); %d latency violations acted on", len(changes), strings.Join(changes, " → "), v["latency"])
			if len(changes) > 2 || v["latency"] > tc.wantViolationsLE {
				t.Fatalf("%d configurations applied in 60 s (%s) after %d latency violations: the controller walked instead of learning the ratio",
					len(changes), strings.Join(changes, " → "), v["latency"])
			}
			paused := e.sched.Snapshot().TrainingPaused
			if paused != tc.wantPaused {
				t.Errorf("training paused: %v, want %v", paused, tc.wantPaused)
			}
			// Where training runs, what runs is within every budget at the measured ratio.
			st := c.Status()
			model := modelLatencyMS(t, c)
			for _, s := range st.Current.Streams {
				if ratio*model[s.Workload] > s.LatencyBudgetMS && !paused {
					t.Errorf("stream %s at %s batch %d: %.1f ms measured against %.0f ms, and training runs", s.Workload, st.Current.Mode.Human(), s.Batch, ratio*model[s.Workload], s.LatencyBudgetMS)
				}
			}
		})
	}
}

// Latency is judged on requests served at the configuration in force: requests served
// slowly just before a re-plan moved the mode do not count against the new mode (they
// did: the new mode's points were left out before it had served a request).
func TestSeveralStreamsLatencyJudgedSinceTheChange(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	e.seedStream(tInfer2)
	c := e.controller(Config{MinLatency: 10}, plan.Targets{LatencyMS: 400, PowerMW: 60000, RateRPS: 5})
	e.board.set(20000, nil)
	if _, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleTrain, Workload: tTrain, Batch: 32}, func(sched.Grant) {}); err != nil {
		t.Fatal(err)
	}
	s := e.slowStream(tInfer2)
	e.registerInfer(tInfer)
	e.tick(c, 100*time.Millisecond)
	first := c.Status().Current
	if first == nil || len(first.Streams) != 2 {
		t.Fatalf("no joint plan: %+v", first)
	}
	e.tick(c, e.sched.Config().RecentWindow+time.Second)
	// 15 requests served at 900 ms at the first mode, then a lower power budget moves
	// the mode.
	s.serve(t, e.sched, 15, 900)
	if err := c.SetTargets(plan.Targets{LatencyMS: 400, PowerMW: 25000, RateRPS: 5}); err != nil {
		t.Fatal(err)
	}
	e.tick(c, 200*time.Millisecond)
	second := c.Status().Current
	if second.Mode == first.Mode {
		t.Fatalf("test premise: the 25 W budget kept mode %s", first.Mode.Human())
	}
	e.tick(c, 2*e.sched.Config().RecentWindow)
	for _, ev := range c.Events().List(0) {
		t.Logf("%s: %s", ev.Kind, ev.Reason)
	}
	if v, _ := c.Counters(); v["latency"] != 0 {
		t.Fatalf("%d latency violations acted on at mode %s, judged on requests served at %s before the change", v["latency"], second.Mode.Human(), first.Mode.Human())
	}
	if got := c.Status().Current.Mode; got != second.Mode {
		t.Fatalf("mode %s, want %s kept: nothing was served slowly there", got.Human(), second.Mode.Human())
	}
	// Served slowly at the mode in force, it is judged.
	s.serve(t, e.sched, 15, 900)
	e.tick(c, 200*time.Millisecond)
	if v, _ := c.Counters(); v["latency"] != 1 {
		t.Fatalf("%d latency violations acted on after 15 requests at 900 ms at the mode in force, want 1", v["latency"])
	}
}

// Training paused because the learned ratios put every configuration over a budget
// comes back once the streams stay well under their budgets for the retry hold: the
// ratios are eased and the streams decided again (it stayed paused until the workloads
// or the budgets changed).
func TestSeveralStreamsPausedByRatiosEaseBack(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	e.seedStream(tInfer2)
	c := e.controller(Config{MinLatency: 10}, plan.Targets{LatencyMS: 200, PowerMW: 60000, RateRPS: 5})
	e.board.set(20000, nil)
	if _, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleTrain, Workload: tTrain, Batch: 32}, func(sched.Grant) {}); err != nil {
		t.Fatal(err)
	}
	streams := []*slowStream{e.slowStream(tInfer), e.slowStream(tInfer2)}
	e.tick(c, 100*time.Millisecond)
	for range 30 { // twice model v1 at every mode: nothing fits, training paused
		model := modelLatencyMS(t, c)
		for _, s := range streams {
			s.serve(t, e.sched, 4, 2*model[s.name])
		}
		e.tick(c, time.Second)
	}
	if !e.sched.Snapshot().TrainingPaused {
		t.Fatal("test premise: training not paused by the learned ratios")
	}
	for range 120 { // then well under the budget
		for _, s := range streams {
			s.serve(t, e.sched, 4, 50)
		}
		e.tick(c, time.Second)
	}
	eased := 0
	for _, ev := range c.Events().List(0) {
		t.Logf("%s: %s", ev.Kind, ev.Reason)
		if strings.Contains(ev.Reason, "easing them") {
			eased++
		}
	}
	if eased == 0 {
		t.Fatal("no easing of the learned ratios after 120 s well under the budgets with training paused")
	}
	if e.sched.Snapshot().TrainingPaused {
		t.Errorf("training still paused after %d eases with every stream at 50 ms against 200", eased)
	}
}
