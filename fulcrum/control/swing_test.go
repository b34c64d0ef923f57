package control

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/powermode"
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
	s.serveBatches(t, sc, n, 1, latencyMS)
}

// serveBatches serves n batches of s of batch requests each (the batch the stream is set
// to, so that the scheduler grants at once), each latencyMS after it arrived.
func (s *slowStream) serveBatches(t *testing.T, sc *sched.Scheduler, n, batch int, latencyMS float64) {
	t.Helper()
	for range n {
		s.seq++
		if err := sc.Acquire(s.id, s.seq); err != nil {
			t.Fatal(err)
		}
		reqs := make([]proto.Request, batch)
		for k := range reqs {
			reqs[k] = proto.Request{ID: fmt.Sprintf("%s-%d-%d", s.name, s.seq, k), AgeMS: latencyMS}
		}
		if err := sc.Arrivals(s.id, reqs); err != nil {
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
	m, err := plan.NewMultiModel(c.plannedBudgets(rates), c.cfg.InferBatches)
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
// controller steps once (rule 4: a smaller batch of the broken stream or a shorter
// training turn, the highest-throughput one predicted within the budgets at this step's
// ratio) and stays; it walked from mode to mode, each violation leaving out one (stream,
// mode, batch) and finding the next as under-predicted (issue 34 item 3: 7 mode changes
// in 60 s, down to 1 core, on the simulated AGX with three streams). Where nothing
// smaller or shorter is stored (batch 1 at the fastest-training mode), the mode stays and
// the rule's last resort pauses training at it, for latency_pause_ms and then twice that
// as the p99 breaks again soon after training resumed, as for the pair (latpause.go):
// before issue 29's last part the learned ratio put every configuration over the budget
// and paused training until the ratios eased, which is what a few-% overshoot did too
// (TestSeveralStreamsFewPercentOverKeepsTraining).
func TestSeveralStreamsLatencyUnderPredictedEverywhere(t *testing.T) {
	const ratio = 2.0
	for _, tc := range []struct {
		name             string
		latMS, rateRPS   float64
		wantApplied      int
		wantViolationsLE uint64
	}{
		// The first plan's streams are predicted at 112 and 116 ms, batch 1 at the
		// fastest-training mode: nothing is smaller or shorter.
		{name: "nothing smaller or shorter", latMS: 200, rateRPS: 5, wantApplied: 1, wantViolationsLE: 60},
		// At 40 req/s and 300 ms the first plan batches (240 and 248 ms predicted, the
		// queue of batches counted); batch 1 is within 300 ms at twice the model.
		{name: "one within the budget", latMS: 300, rateRPS: 40, wantApplied: 2, wantViolationsLE: 1},
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
			if len(changes) != tc.wantApplied || v["latency"] > tc.wantViolationsLE {
				t.Fatalf("%d configurations applied in 60 s (%s) after %d latency violations: want %d, at most %d violations",
					len(changes), strings.Join(changes, " → "), v["latency"], tc.wantApplied, tc.wantViolationsLE)
			}
			if tc.wantApplied == 1 {
				// The last resort: paused 20 s, resumed, paused 40 s (still paused at 60 s).
				var pauses, resumes []string
				for _, ev := range c.Events().List(0) {
					switch {
					case ev.Kind == KindStepDown && strings.Contains(ev.Reason, "training paused for"):
						pauses = append(pauses, ev.Reason[strings.Index(ev.Reason, "training paused for"):][:len("training paused for 20s")])
					case ev.Kind == KindStepUp && strings.Contains(ev.Reason, "training resumed at the configuration in force"):
						resumes = append(resumes, ev.Reason)
					}
				}
				if len(pauses) != 2 || pauses[0] != "training paused for 20s" || pauses[1] != "training paused for 40s" || len(resumes) != 1 {
					t.Fatalf("last resort: pauses %q, %d resumes: want 20 s, a resume, then 40 s", pauses, len(resumes))
				}
				if !e.sched.Snapshot().TrainingPaused {
					t.Error("training runs 60 s in, inside the second last-resort pause")
				}
				return
			}
			if e.sched.Snapshot().TrainingPaused {
				t.Error("training paused: no decision predicted the configuration in force over a budget")
			}
			// What runs after the step is within every budget at the measured ratio.
			st := c.Status()
			model := modelLatencyMS(t, c)
			for _, s := range st.Current.Streams {
				if ratio*model[s.Workload] > s.LatencyBudgetMS {
					t.Errorf("stream %s at %s batch %d: %.1f ms measured against %.0f ms", s.Workload, st.Current.Mode.Human(), s.Batch, ratio*model[s.Workload], s.LatencyBudgetMS)
				}
			}
		})
	}
}

// Issue 29's last part, the harm measured in make demo's step 5 (about one run in two):
// the scheduler spends each request's slack on training, so every stream's p99 sits near
// its budget whatever model v1 predicts, and a few-% overshoot (p99 308.9 ms over 300)
// was read as a 2× model error expected at every mode: every configuration looked over
// the budget, the decision claimed none and training paused (here it survives in
// micro-batches only because the micro-batch watch keeps them running; the demo has
// none). Now a stream a few % over its budget at a claimed configuration steps to a
// stored one with a shorter training turn predicted within the budgets at this step's
// ratio — a trainer whose micro-batch of 16 takes 90 % of its minibatch's time (small
// batches leave the GPU idle) — and the plan in force stays claimed.
func TestSeveralStreamsFewPercentOverKeepsTraining(t *testing.T) {
	e, c, first := overshootRun(t, 1.03)
	if e.sched.Snapshot().TrainingPaused {
		t.Fatal("training paused after a 3 % overshoot, although a stored configuration with a shorter training turn is predicted within the budget")
	}
	cur := c.Status().Current
	if cur.Mode == first.Mode && cur.MicroBatch() == first.MicroBatch() && sameBatches(cur.Streams, first.Streams) {
		t.Fatalf("still at the broken configuration %s (micro-batch %d)", cur.Mode.Human(), cur.MicroBatch())
	}
	if !cur.Predicted.Feasible {
		t.Errorf("at %s micro-batch %d, predicted infeasible: a 3 %% overshoot made every configuration look over the budget", cur.Mode.Human(), cur.MicroBatch())
	}
}

// The same streams 50 % over their budget: no prediction's noise (heavy-tailed turns put
// two streams 15–170 % over, docs/runtime.md). Nothing is predicted within at the step's
// ratio, and model v1's fallback — for an overshoot inside the hysteresis band — is not
// taken: the first step is the last resort, training paused at the configuration in force.
// Before, the step moved to what model v1 predicts within and kept training, and on the
// lifetime runs six such steps in a row kept the streams late (seeds 6 and 9 of the two
// streams' TailTable over their p99).
func TestSeveralStreamsFarOverPausesTraining(t *testing.T) {
	_, c, first := overshootRun(t, 1.5)
	var downs []Event
	for _, ev := range c.Events().List(0) {
		if ev.Kind == KindStepDown {
			downs = append(downs, ev)
		}
	}
	if len(downs) == 0 {
		t.Fatal("no latency step at 1.5× the budget")
	}
	if !strings.Contains(downs[0].Reason, "the last resort") {
		t.Errorf("first step at 1.5× the budget: %s; want the last resort's pause", downs[0].Reason)
	}
	if cur := c.Status().Current; cur.Mode != first.Mode || !sameBatches(cur.Streams, first.Streams) {
		t.Errorf("moved from %s to %s at 1.5× the budget: want the configuration in force kept, training paused", first.Mode.Human(), cur.Mode.Human())
	}
}

// overshootRun: two streams and one trainer whose micro-batch of 16 takes 90 % of its
// minibatch's time (small batches leave the GPU idle), both streams over·budget at the
// first claimed plan and at 85 % of it elsewhere (the budget less the scheduler's
// margin: it spends the slack on training), for 40 s of ticks. It returns the plan it
// started from.
func overshootRun(t *testing.T, over float64) (*env, *Controller, *Choice) {
	t.Helper()
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	e.seedStream(tInfer2)
	e.seedMicro16(0.9)
	const budgetMS = 300.0
	c := e.controller(Config{MinLatency: 10}, plan.Targets{LatencyMS: budgetMS, PowerMW: 60000, RateRPS: 5})
	e.board.set(20000, nil)
	if _, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleTrain, Workload: tTrain, Batch: 32, MicroBatches: []int{16}}, func(sched.Grant) {}); err != nil {
		t.Fatal(err)
	}
	streams := []*slowStream{e.slowStream(tInfer), e.slowStream(tInfer2)}
	e.tick(c, 100*time.Millisecond)
	first := c.Status().Current
	if first == nil || len(first.Streams) != 2 || !first.Predicted.Feasible || first.MicroBatch() != 0 {
		t.Fatalf("test premise: want a claimed joint plan of whole minibatches, got %+v", first)
	}
	t.Logf("first plan: %s, model v1 %v", first.Mode.Human(), modelLatencyMS(t, c))
	e.tick(c, e.sched.Config().RecentWindow)
	for range 40 {
		lat := 0.85 * budgetMS
		cur := c.Status().Current
		if cur.Mode == first.Mode && cur.MicroBatch() == first.MicroBatch() && sameBatches(cur.Streams, first.Streams) {
			lat = over * budgetMS
		}
		for i, s := range streams {
			s.serveBatches(t, e.sched, 4, max(cur.Streams[i].Batch, 1), lat)
		}
		e.tick(c, time.Second)
	}
	for _, ev := range c.Events().List(0) {
		t.Logf("%s: %s", ev.Kind, ev.Reason)
	}
	return e, c, first
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

// Several streams step back up (rule 6, the pair's, for any count since issue 29's last
// part): the board draws 1.5× the prediction at the first plan's mode only; the power
// step goes down by that ratio, and once power stayed under budget·(1−hysteresis) for the
// hold the decision is taken again with the correction learned there and moves to the
// better mode below it. Before, several streams had no step up (the ratio was expected at
// every mode and kept until the workloads changed).
func TestSeveralStreamsStepBackUp(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	e.seedStream(tInfer2)
	const budget = 33000.0
	c := e.controller(Config{}, plan.Targets{LatencyMS: 400, PowerMW: budget, RateRPS: 5})
	e.register(nil)
	e.registerInfer(tInfer2)
	e.tick(c, 100*time.Millisecond)
	first := c.Status().Current
	if first == nil || len(first.Streams) != 2 {
		t.Fatalf("no joint plan: %+v", first)
	}
	draw := func(m powermode.Mode) float64 {
		mw := e.models[tTrain].PowerMW(e.spec, m, 32)
		if m == first.Mode {
			return 1.5 * mw
		}
		return mw
	}
	e.board.mu.Lock()
	e.board.powerFn = draw
	e.board.mu.Unlock()
	e.tick(c, 30*time.Second)
	var down, up *Choice
	for _, ev := range c.Events().List(0) {
		t.Logf("%s: %s", ev.Kind, ev.Reason)
	}
	st := c.Status()
	for _, ev := range c.Events().List(0) {
		if ev.Kind == KindStepDown && down == nil && ev.Mode != nil {
			down = &Choice{Mode: *ev.Mode, Predicted: *ev.Predicted}
		}
		if ev.Kind == KindStepUp && ev.Mode != nil {
			up = &Choice{Mode: *ev.Mode, Predicted: *ev.Predicted}
		}
	}
	if down == nil || up == nil {
		t.Fatalf("step down %v, step up %v: want both", down, up)
	}
	if up.Mode == first.Mode || up.Predicted.ThroughputSPS <= down.Predicted.ThroughputSPS {
		t.Fatalf("stepped up to %s (%.1f samples/s) from %s (%.1f): want a mode other than the broken %s, predicted to train more",
			up.Mode.Human(), up.Predicted.ThroughputSPS, down.Mode.Human(), down.Predicted.ThroughputSPS, first.Mode.Human())
	}
	if st.Current.Mode != up.Mode || draw(st.Current.Mode) > budget {
		t.Fatalf("ends at %s drawing %.1f W: want the stepped-up %s, within the %.1f W budget", st.Current.Mode.Human(), draw(st.Current.Mode)/1000, up.Mode.Human(), budget/1000)
	}
	if e.sched.Snapshot().TrainingPaused {
		t.Error("training paused")
	}
}
