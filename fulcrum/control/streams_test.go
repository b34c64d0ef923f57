package control

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

const tInfer2 = "yolov8n-infer"

// seedStream stores noise-free profiles of a further inference workload at the env's modes.
func (e *env) seedStream(name string) {
	e.t.Helper()
	now := time.Now().UTC()
	w := e.models[name]
	for _, m := range e.modes {
		for _, b := range []int{1, 2, 4, 8} {
			ms, mw := w.TimeMS(e.spec, m, b), w.PowerMW(e.spec, m, b)
			if err := e.store.Put(store.Profile{Board: e.spec.Name, Workload: name, Role: truth.Infer, Mode: m, Batch: b,
				TimeMS: store.TimeStats{Mean: ms, P50: ms, P95: ms}, PowerMW: store.PowerStats{Mean: mw},
				Samples: 1, StartedAt: now, FinishedAt: now, Source: store.SourceSim}); err != nil {
				e.t.Fatal(err)
			}
		}
	}
}

func (e *env) registerInfer(name string) string {
	e.t.Helper()
	id, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleInfer, Workload: name, Batch: 1, BatchSizes: []int{1, 2, 4, 8}}, func(sched.Grant) {})
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

func batchOf(t *testing.T, s *sched.Scheduler, id string) int {
	t.Helper()
	for _, w := range s.Snapshot().Workers {
		if w.ID == id {
			return w.Batch
		}
	}
	t.Fatalf("worker %s not registered", id)
	return 0
}

// With two inference streams the controller decides the mode and both batches jointly
// (the same decision plan.MultiDecider makes over the stored profiles), holds each stream
// to its own budget, re-plans when a stream joins or leaves, and shows every stream.
func TestPlanSeveralStreams(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	e.seedStream(tInfer2)
	c := e.controller(Config{}, plan.Targets{LatencyMS: 400, PowerMW: 35000, RateRPS: 20})
	if err := c.SetStreamTarget(tInfer2, StreamTarget{LatencyMS: 160, RateRPS: 30}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.SetStreamTarget(tInfer2, StreamTarget{LatencyMS: 0.05}, nil); err == nil || !strings.Contains(err.Error(), "latency_ms") {
		t.Fatalf("a 0.05 ms stream budget accepted: %v", err)
	}
	e.board.set(20000, nil)
	_, in1 := e.register(nil)
	in2 := e.registerInfer(tInfer2)
	e.tick(c, 100*time.Millisecond)

	st := c.Status()
	if st.Current == nil || len(st.Current.Streams) != 2 || len(st.Streams) != 2 {
		t.Fatalf("status %+v: want a plan for both streams", st)
	}
	// The decision is plan.MultiDecider's over the stored profiles.
	g := &group{Train: []TrainJob{{Workload: tTrain, Batch: 32}}, Streams: []StreamSpec{{tInfer, []int{1, 2, 4, 8}}, {tInfer2, []int{1, 2, 4, 8}}}}
	ps, err := StoredMultiProfiles(e.store, e.spec.Name, g)
	if err != nil || len(ps) != len(e.modes) {
		t.Fatalf("stored multi profiles: %d, %v; want one per seeded mode", len(ps), err)
	}
	mb := plan.MultiBudgets{Streams: []plan.StreamBudget{{Name: tInfer, RateRPS: 20, LatencyMS: 400}, {Name: tInfer2, RateRPS: 30, LatencyMS: 160}}, PowerMW: 35000}
	d, err := c.Rules().ForMulti(mb, c.Config().InferBatches).Decide(ps)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Feasible || st.Current.Mode != d.Best.Mode || !slices.Equal([]int{st.Current.Streams[0].Batch, st.Current.Streams[1].Batch}, d.Best.Batches()) {
		t.Fatalf("applied %s %+v; the decision is %s %v (feasible %v)", st.Current.Mode.Human(), st.Current.Streams, d.Best.Mode.Human(), d.Best.Batches(), d.Feasible)
	}
	if e.board.current() != d.Best.Mode || batchOf(t, e.sched, in1) != d.Best.Streams[0].Batch || batchOf(t, e.sched, in2) != d.Best.Streams[1].Batch {
		t.Fatalf("board %s, batches %d %d: the plan is not in force", e.board.current().Human(), batchOf(t, e.sched, in1), batchOf(t, e.sched, in2))
	}
	for i, s := range st.Streams {
		want := []float64{400, 160}[i]
		if s.LatencyBudgetMS != want || s.PredLatencyMS <= 0 || s.PredLatencyMS > want || s.Batch != d.Best.Streams[i].Batch {
			t.Fatalf("stream %d status %+v: want budget %v ms and a predicted p99 within it", i, s, want)
		}
	}
	if !st.Streams[1].OwnBudget || st.Streams[0].OwnBudget || st.Streams[1].RateRPS != 30 || st.Streams[0].RateRPS != 20 {
		t.Fatalf("stream budgets in the status: %+v", st.Streams)
	}
	// The tight stream's requests get its own deadline in the scheduler.
	if wl, _ := e.sched.Snapshot().Workload(proto.RoleInfer, tInfer2); wl.LatencyBudgetMS != 160 {
		t.Fatalf("scheduler holds %v ms for %s, want 160", wl.LatencyBudgetMS, tInfer2)
	}
	// The second stream's load is counted: the pair alone gets a higher training rate.
	pairOnly, err := c.Rules().For(plan.Targets{LatencyMS: 400, PowerMW: 35000}.Budgets(20), c.Config().InferBatches).Decide(mustProfiles(t, c))
	if err != nil {
		t.Fatal(err)
	}
	if st.Current.Predicted.ThroughputSPS >= pairOnly.Best.ThroughputSPS {
		t.Fatalf("two streams predict %.1f samples/s, the pair alone %.1f: the second stream's GPU share is not counted",
			st.Current.Predicted.ThroughputSPS, pairOnly.Best.ThroughputSPS)
	}

	// An operator's mode keeps every stream's batch.
	if _, err := c.ApplyMode(context.Background(), e.modes[0]); err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Status().Streams {
		if s.Batch == 0 || batchOf(t, e.sched, map[string]string{tInfer: in1, tInfer2: in2}[s.Workload]) != s.Batch {
			t.Fatalf("after an operator's mode: stream %+v", s)
		}
	}
	if err := c.SetTargets(plan.Targets{LatencyMS: 400, PowerMW: 35000, RateRPS: 20}); err != nil { // releases the hold
		t.Fatal(err)
	}
	e.tick(c, 100*time.Millisecond)

	// The second stream leaves: the pair is planned again.
	seq := c.Status().LastEvent
	e.sched.Unregister(in2)
	e.tick(c, 100*time.Millisecond)
	evs := c.Events().List(seq)
	st = c.Status()
	if countKind(evs, KindReplan) != 1 || len(st.Current.Streams) != 1 || len(st.Streams) != 1 {
		t.Fatalf("after the second stream left: %v, streams %+v", kinds(evs), st.Streams)
	}
	// A further stream joins: all three are planned jointly.
	e.seedStream("mobilenetv3-infer")
	seq = c.Status().LastEvent
	in3 := e.registerInfer("mobilenetv3-infer")
	e.tick(c, 100*time.Millisecond)
	evs = c.Events().List(seq)
	st = c.Status()
	if countKind(evs, KindReplan) != 1 || !strings.Contains(evs[0].Reason, "mobilenetv3-infer") || len(st.Current.Streams) != 2 || len(st.Streams) != 2 {
		t.Fatalf("after a stream joined: %v, streams %+v", evs, st.Streams)
	}
	if batchOf(t, e.sched, in3) != st.Current.Streams[1].Batch {
		t.Fatalf("the joining stream serves batch %d, planned %d", batchOf(t, e.sched, in3), st.Current.Streams[1].Batch)
	}
}

func mustProfiles(t *testing.T, c *Controller) []plan.ModeProfile {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	ps, err := StoredProfiles(c.store, c.board.Info().Name, *c.pair) // the pair's alone
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// Two training jobs and one stream: the plan is the joint decision with the jobs'
// weights (the operator's, else 1), and the scheduler gets the same weights.
func TestPlanTwoTrainingJobs(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	const tTrain2 = "mobilenetv3-train"
	now := time.Now().UTC()
	w := e.models[tTrain2]
	for _, m := range e.modes {
		ms, mw := w.TimeMS(e.spec, m, w.Batch), w.PowerMW(e.spec, m, w.Batch)
		if err := e.store.Put(store.Profile{Board: e.spec.Name, Workload: tTrain2, Role: truth.Train, Mode: m, Batch: w.Batch,
			TimeMS: store.TimeStats{Mean: ms, P50: ms, P95: ms}, PowerMW: store.PowerStats{Mean: mw},
			Samples: 1, StartedAt: now, FinishedAt: now, Source: store.SourceSim}); err != nil {
			t.Fatal(err)
		}
	}
	c := e.controller(Config{}, plan.Targets{LatencyMS: 400, PowerMW: 35000, RateRPS: 20})
	if err := c.SetStreamTarget(tTrain2, StreamTarget{TrainWeight: 3}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.SetStreamTarget(tTrain2, StreamTarget{TrainWeight: -1}, nil); err == nil {
		t.Fatal("a negative training weight accepted")
	}
	e.board.set(20000, nil)
	e.register(nil)
	if _, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleTrain, Workload: tTrain2, Batch: w.Batch}, func(sched.Grant) {}); err != nil {
		t.Fatal(err)
	}
	e.tick(c, 100*time.Millisecond)
	st := c.Status()
	if st.Current == nil || len(st.Current.Streams) != 1 || len(st.Train) != 2 {
		t.Fatalf("status %+v: want a joint plan for two jobs and one stream", st)
	}
	g := &group{Train: []TrainJob{{Workload: tTrain, Batch: 32}, {Workload: tTrain2, Batch: w.Batch}}, Streams: []StreamSpec{{tInfer, []int{1, 2, 4, 8}}}}
	ps, err := StoredMultiProfiles(e.store, e.spec.Name, g)
	if err != nil || len(ps) != len(e.modes) {
		t.Fatalf("stored multi profiles: %d, %v", len(ps), err)
	}
	mb := plan.MultiBudgets{Streams: []plan.StreamBudget{{Name: tInfer, RateRPS: 20, LatencyMS: 400}}, PowerMW: 35000, TrainWeights: []float64{1, 3}}
	d, err := c.Rules().ForMulti(mb, c.Config().InferBatches).Decide(ps)
	if err != nil {
		t.Fatal(err)
	}
	if st.Current.Mode != d.Best.Mode || st.Current.Streams[0].Batch != d.Best.Streams[0].Batch || st.Current.Predicted.ThroughputSPS != d.Best.ObjectiveSPS {
		t.Fatalf("applied %s batch %d (%.1f), the weighted decision is %s batch %d (%.1f)", st.Current.Mode.Human(), st.Current.Streams[0].Batch,
			st.Current.Predicted.ThroughputSPS, d.Best.Mode.Human(), d.Best.Streams[0].Batch, d.Best.ObjectiveSPS)
	}
	if sh := d.Best.TrainShares; len(sh) != 2 || sh[0] != 0.25 || sh[1] != 0.75 {
		t.Fatalf("training shares %v, want [0.25 0.75]", sh)
	}
}

// A stream whose p99 breaks its own budget: its batch at the mode is left out and the
// controller steps down (rule 4, the pair's reaction for any count) to a smaller batch of
// that stream at this mode or a shorter training turn, naming the stream; the other
// stream's budget is not judged against it. (Before issue 29's last part the streams
// learned a p99 ratio and were decided again; the detector then served at 20/s and
// batch 1 at the fastest-training mode, where rule 4 has nothing smaller or shorter to
// take: at 60/s the plan batches it — at 40/s too before the model counted the queue of
// batches, docs/design.md §2.)
func TestStreamLatencyViolationStepsDown(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	e.seedStream(tInfer2)
	c := e.controller(Config{MinLatency: 10}, plan.Targets{LatencyMS: 400, PowerMW: 35000, RateRPS: 20})
	if err := c.SetStreamTarget(tInfer2, StreamTarget{LatencyMS: 280, RateRPS: 60}, nil); err != nil {
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
	first := c.Status().Current
	if first == nil || len(first.Streams) != 2 || first.Streams[1].Batch < 2 {
		t.Fatalf("no joint plan batching %s: %+v", tInfer2, first)
	}
	seq := c.Status().LastEvent
	// Latency is judged on requests served at the configuration in force only.
	e.clock.Advance(e.sched.Config().RecentWindow)
	// Serve 15 of the detector's requests 340 ms after they arrive (already late when they
	// reach the scheduler, so that a batch is dispatched at once): over its 280 ms.
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
	evs := c.Events().List(seq)
	var stepped *Event
	for i := range evs {
		t.Logf("%s: %s", evs[i].Kind, evs[i].Reason)
		if evs[i].Kind == KindStepDown && strings.Contains(evs[i].Reason, "stream "+tInfer2+": p99 latency") {
			stepped = &evs[i]
		}
	}
	if stepped == nil {
		t.Fatalf("no step down naming the stream after its p99 broke its budget: %v", evs)
	}
	st := c.Status()
	if st.Current.Mode == first.Mode && st.Current.Streams[1].Batch == first.Streams[1].Batch {
		t.Fatalf("the broken configuration (%s, batch %d) was decided again", first.Mode.Human(), first.Streams[1].Batch)
	}
	if st.Current.Mode == first.Mode && st.Current.Streams[1].Batch > first.Streams[1].Batch {
		t.Fatalf("stepped from batch %d to a larger batch %d at the same mode", first.Streams[1].Batch, st.Current.Streams[1].Batch)
	}
	if e.sched.Snapshot().TrainingPaused {
		t.Fatal("training paused by a step to a configuration predicted within the budgets")
	}
	if v, _ := c.Counters(); v["latency"] != 1 {
		t.Fatalf("latency violations counted: %d, want 1", v["latency"])
	}
}

// With two streams and an empty store, the search walks the pooled pair while every
// stream is profiled live at each mode it asks for; the plan is then the joint decision.
func TestSearchSeveralStreams(t *testing.T) {
	e, c := newLiveEnv(t, Config{MaxProfiles: 4, Live: LiveOptions{Samples: 2, MinTime: time.Millisecond}},
		plan.Targets{LatencyMS: 400, PowerMW: 30000, RateRPS: 20})
	defer e.sched.Close()
	sw := &scriptedWorkers{e: e, power: c.power, grants: map[string]int{}}
	in2, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleInfer, Workload: tInfer2, Batch: 1, BatchSizes: []int{1, 2, 4, 8}}, sw.deliver)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.sched.Acquire(in2, 0); err != nil {
		t.Fatal(err)
	}
	c.Step(context.Background())
	if !c.Status().Searching {
		t.Fatalf("no search started with an empty store: %v", kinds(c.Events().List(0)))
	}
	for deadline := time.Now().Add(60 * time.Second); c.Status().Searching; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("search did not finish in 60 s")
		}
	}
	st := c.Status()
	evs := c.Events().List(0)
	if st.Current == nil || len(st.Current.Streams) != 2 || countKind(evs, KindPlan) != 1 {
		t.Fatalf("after the search: current %+v, events %v", st.Current, evs)
	}
	// One mode here draws 31.8 W against the 30 W budget. Where the power guard trips
	// there depends on when its 1 s average first has enough readings (taken on the wall
	// clock as grants are delivered): at the training point, at an inference point, or —
	// on a loaded host — only while a further stream is measured, after the first pair's
	// profile run completed. Such a mode may hold part of its points; every other mode is
	// profiled once per stream, its training measured once.
	abandoned := map[powermode.Mode]bool{}
	runs := map[powermode.Mode]int{} // profile runs, one "profiled mode … live" event each
	for _, ev := range evs {
		if ev.Kind != KindProfile || ev.Mode == nil {
			continue
		}
		switch {
		case strings.HasPrefix(ev.Reason, "abandoned profiling mode"):
			abandoned[*ev.Mode] = true
		case strings.HasPrefix(ev.Reason, "profiled mode"):
			runs[*ev.Mode]++
		}
	}
	var complete []powermode.Mode
	total := 0
	for m, n := range runs {
		total += n
		switch {
		case abandoned[m] && n > 1:
			t.Fatalf("mode %s: %d profile runs, but the guard abandoned it: only the first pair's may have completed", m.Human(), n)
		case !abandoned[m] && n != 2:
			t.Fatalf("mode %s: %d profile runs, want one for each of the 2 streams", m.Human(), n)
		case !abandoned[m]:
			complete = append(complete, m)
		}
	}
	if len(complete) == 0 || len(runs) > 4 || st.Live.Profiled != total || st.Live.Modes != len(runs) {
		t.Fatalf("%d modes profiled for both streams, %d with any profile run (≤ 4 wanted); status counts %d runs at %d modes, the events %d", len(complete), len(runs), st.Live.Profiled, st.Live.Modes, total)
	}
	if st.StoredProfiles < len(complete) || st.StoredProfiles > len(complete)+len(abandoned) {
		t.Fatalf("%d modes stored for every workload: want the %d profiled for both streams (and at most the %d abandoned)", st.StoredProfiles, len(complete), len(abandoned))
	}
	// The search-done event counts distinct modes (what the searcher's budget caps) and
	// names the profile runs apart (issue 34: "30 modes profiled live" for 13 modes).
	var done string
	for _, ev := range evs {
		if ev.Kind == KindProfile && strings.Contains(ev.Reason, "search done") {
			done = ev.Reason
		}
	}
	if !strings.Contains(done, fmt.Sprintf("%d modes profiled live (%d profile runs", len(runs), total)) {
		t.Fatalf("%d modes profiled in %d runs; event %q", len(runs), total, done)
	}
	ys, err := e.store.List(store.Filter{Board: e.spec.Name, Workload: tInfer2})
	if err != nil {
		t.Fatal(err)
	}
	trains, err := e.store.List(store.Filter{Board: e.spec.Name, Workload: tTrain})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range complete {
		ny := 0
		for _, y := range ys {
			if y.Mode == m {
				ny++
			}
		}
		nt := 0
		for _, tr := range trains {
			if tr.Mode == m {
				nt++
			}
		}
		if ny != 4 || nt != 1 {
			t.Fatalf("mode %s: %d profiles of %s (want its 4 batch sizes), %d training profiles (want one: measured once, not per stream)", m.Human(), ny, tInfer2, nt)
		}
	}
	for _, tr := range trains {
		if !slices.Contains(complete, tr.Mode) && !abandoned[tr.Mode] {
			t.Fatalf("training stored at mode %s, which no profile run completed or abandoned", tr.Mode.Human())
		}
	}
	var named bool
	for _, ev := range evs {
		named = named || (ev.Kind == KindProfile && strings.Contains(ev.Reason, tInfer2+" at 4 batch sizes"))
	}
	if !named {
		t.Fatalf("no event for the second stream's live profiles: %v", evs)
	}
	if e.board.current() != st.Current.Mode {
		t.Fatalf("board at %s, plan %s", e.board.current().Human(), st.Current.Mode.Human())
	}
}

// The board draws 1.5× the predicted power at every mode (issue 34 item 3 saw
// 1.36–2.13× after a three-stream search): one power violation must take the controller to
// a mode within the budget at that ratio, not walk down the modes one violation (and one
// mode change) at a time, learning the ratio at each. Rule 2 scales every candidate by
// the step's ratio (the pair's power step, for any count since issue 29's last part), so
// every step down lands within the budget. After the hold the decision is taken again
// (rule 6) with the corrections learned at the modes that broke it: a step up to a mode
// not yet measured over the budget may break it once more, which teaches that mode; no
// mode is stepped up to twice.
func TestSeveralStreamsPowerUnderPredictedEverywhere(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	e.seedStream(tInfer2)
	const ratio = 1.5
	const budget = 33000.0 // the first plan, 12c/2201.6/918/3199, is predicted at 27.5 W
	draw := func(m powermode.Mode) float64 { return ratio * e.models[tTrain].PowerMW(e.spec, m, 32) }
	e.board.mu.Lock()
	e.board.powerFn = draw
	e.board.mu.Unlock()
	c := e.controller(Config{}, plan.Targets{LatencyMS: 400, PowerMW: budget, RateRPS: 5})
	e.register(nil)
	e.registerInfer(tInfer2)
	e.tick(c, 30*time.Second)
	var last Kind
	downs := 0
	upTo := map[string]int{}
	for _, ev := range c.Events().List(0) {
		t.Logf("%s: %s", ev.Kind, ev.Reason)
		switch {
		case ev.Kind == KindStepDown || ev.Kind == KindStepUp:
			last = ev.Kind
		case ev.Kind == KindApply && ev.Mode != nil && last == KindStepDown:
			downs++
			if got := draw(*ev.Mode); got > budget {
				t.Errorf("a power step down went to %s, drawing %.1f W against the %.1f W budget: one violation must reach a mode within it", ev.Mode.Human(), got/1000, budget/1000)
			}
			last = ""
		case ev.Kind == KindApply && ev.Mode != nil && last == KindStepUp:
			if upTo[ev.Mode.Human()]++; upTo[ev.Mode.Human()] > 1 {
				t.Errorf("stepped up to %s twice: the correction learned there was not kept", ev.Mode.Human())
			}
			last = ""
		}
	}
	final := e.board.current()
	if got := draw(final); got > budget {
		t.Fatalf("after 30 s at %s the board draws %.1f W against the %.1f W budget", final.Human(), got/1000, budget/1000)
	}
	if v, _ := c.Counters(); downs == 0 || v["power"] != uint64(downs) {
		t.Errorf("%d power violations acted on, %d step downs applied: want every violation answered by one step down", v["power"], downs)
	}
}

// A mode the first pair abandons as over the power budget is not profiled for the further
// streams (it was, and counted as profiled: issue 34 item 3).
func TestSearchSeveralStreamsSkipsAbandonedModes(t *testing.T) {
	// The guard judges readings taken after a settle time over a window: both short here,
	// where the scripted batches take a millisecond.
	live := LiveOptions{Samples: 2, MinTime: 20 * time.Millisecond, PowerSettle: time.Millisecond, PowerWindow: 20 * time.Millisecond, SensorLag: time.Millisecond}
	e, c := newLiveEnv(t, Config{MaxProfiles: 6, Live: live}, plan.Targets{LatencyMS: 400, PowerMW: 15000, RateRPS: 20})
	defer e.sched.Close()
	sw := &scriptedWorkers{e: e, power: c.power, grants: map[string]int{}}
	in2, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleInfer, Workload: tInfer2, Batch: 1, BatchSizes: []int{1, 2, 4, 8}}, sw.deliver)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.sched.Acquire(in2, 0); err != nil {
		t.Fatal(err)
	}
	c.Step(context.Background())
	for deadline := time.Now().Add(60 * time.Second); c.Status().Searching; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("search did not finish in 60 s")
		}
	}
	st := c.Status()
	if st.Live.Abandoned == 0 {
		t.Fatalf("no mode abandoned over a 15 W budget: %+v", st.Live)
	}
	trained := map[powermode.Mode]bool{}
	trains, err := e.store.List(store.Filter{Board: e.spec.Name, Workload: tTrain})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range trains {
		trained[p.Mode] = true
	}
	ys, err := e.store.List(store.Filter{Board: e.spec.Name, Workload: tInfer2})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ys {
		if !trained[p.Mode] {
			t.Errorf("%s profiled at %s, a mode the first pair abandoned over the budget", tInfer2, p.Mode.Human())
		}
	}
	if st.Live.Modes != st.StoredProfiles {
		t.Errorf("%d modes counted as profiled live, %d stored for every workload", st.Live.Modes, st.StoredProfiles)
	}
	// Each abandoned mode is abandoned once, by the first pair: no further stream's
	// profiler went to it.
	abandoned := map[powermode.Mode]int{}
	for _, ev := range c.Events().List(0) {
		if ev.Kind == KindProfile && ev.Mode != nil && strings.HasPrefix(ev.Reason, "abandoned profiling mode") {
			abandoned[*ev.Mode]++
		}
	}
	for m, n := range abandoned {
		if n != 1 {
			t.Errorf("mode %s abandoned %d times: the further streams were profiled there after the first pair was over the budget", m.Human(), n)
		}
	}
}
