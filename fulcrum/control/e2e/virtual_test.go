package e2e_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/lifetime"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/internal/vclock"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// The end-to-end assertions on virtual time (docs/design.md §9, "Which tests run on
// virtual time"): fulcrumd's own scheduler, controller, decision and bbolt store with
// its default configuration, the simulated board stepped by the clock and in-process
// workers (fulcrum/lifetime). What the real-time tests beside these used to assert in
// wall-clock time — a plan soon after start, the p99 and the 1 s power within their
// budgets, a re-plan after the rate doubles, a step down when the power budget drops —
// is asserted here, the same every run however busy the host; the real-time tests keep
// the sockets, processes and fulcrumctl, and report their timings.

// storedTruth is what seed stores, as the scenario's stored profiles: the simulator's
// noise-free truth at seedModes for the given workloads.
func storedTruth(spec *powermode.BoardSpec, models map[string]*sim.Workload, train string, infer ...string) []store.Profile {
	var out []store.Profile
	for _, m := range seedModes(spec) {
		w := models[train]
		out = append(out, truthProfile(spec, w, truth.Train, m, w.Batch, vclock.Epoch))
		for _, n := range infer {
			for _, b := range models[n].BatchSizes() {
				out = append(out, truthProfile(spec, models[n], truth.Infer, m, b, vclock.Epoch))
			}
		}
	}
	return out
}

// sample is the daemon at one second of virtual time.
type sample struct {
	at             time.Duration
	recentP99MS    float64 // the first stream's recent p99 window (the scheduler's)
	recentCount    int
	powerMW        float64 // the board's 1 s average
	powerBudgetMW  float64 // the budget in force
	mode           powermode.Mode
	trainMinibatch uint64
}

// samples are the per-second samples of a run.
type samples []sample

// maxPowerMW is the highest 1 s power average over [from, to] and the samples seen.
func (tr samples) maxPowerMW(from, to time.Duration) (float64, int) {
	mx, n := 0.0, 0
	for _, s := range tr {
		if s.at >= from && s.at <= to {
			mx, n = math.Max(mx, s.powerMW), n+1
		}
	}
	return mx, n
}

func (tr samples) at(d time.Duration) sample {
	for _, s := range tr {
		if s.at >= d {
			return s
		}
	}
	return sample{}
}

// firstEvent is the first event of kind at or after from (virtual time since start)
// whose reason contains substr.
func firstEvent(evs []control.Event, kind control.Kind, from time.Duration, substr string) (control.Event, time.Duration, bool) {
	for _, e := range evs {
		at := e.Time.Sub(vclock.Epoch)
		if e.Kind == kind && at >= from && strings.Contains(e.Reason, substr) {
			return e, at, true
		}
	}
	return control.Event{}, 0, false
}

func logEvents(t *testing.T, evs []control.Event) {
	t.Helper()
	for _, e := range evs {
		t.Logf("event %d +%.2fs %s: %s %s", e.Seq, e.Time.Sub(vclock.Epoch).Seconds(), e.Kind, e.Reason, e.Err)
	}
}

// TestControllerOnVirtualTime is TestControllerEndToEnd's assertions on virtual time:
// ResNet-18 training beside ResNet-50 inference at 15 req/s within 400 ms under 35 W,
// from stored profiles; the rate doubles at 60 s; at 100 s the power budget drops to
// 80 % of the present draw.
func TestControllerOnVirtualTime(t *testing.T) {
	const (
		doubleAt = 60 * time.Second
		lowerAt  = 100 * time.Second
		runFor   = 115 * time.Second
		settle   = 2 * time.Second
	)
	spec := testboard.Spec(t, testboard.AGXOrin)
	models := testboard.Workloads(t)
	stored := storedTruth(spec, models, trainWL, inferWL)
	var (
		tr       samples
		atPlan   control.Status
		planMode powermode.Mode
		window   struct {
			p99MS, p50MS float64
			count        int
			trained      uint64
		}
		lowered struct {
			drawMW, newMW float64
			err           error
		}
		workers int
	)
	sc := lifetime.Scenario{Board: testboard.AGXOrin, Train: []string{trainWL},
		Infer:         []lifetime.Stream{{Workload: inferWL, RateRPS: rateRPS, LatencyMS: latencyMS}},
		PowerBudgetMW: powerW * 1000, Searcher: "gmd", Duration: runFor, Seed: 1, Stored: stored,
		Changes: []lifetime.Change{{At: doubleAt, RateFactor: 2}},
		Probes: []lifetime.Probe{
			{At: time.Second, Every: time.Second, Do: func(in *lifetime.Instant) {
				s := sample{at: in.Elapsed(), powerMW: in.PowerMW(), powerBudgetMW: in.PowerBudgetMW()}
				snap := in.Snapshot()
				if wl, ok := snap.Workload(proto.RoleInfer, inferWL); ok {
					s.recentP99MS, s.recentCount = wl.LatencyRecent.P99MS, wl.LatencyRecent.Count
				}
				if wl, ok := snap.Workload(proto.RoleTrain, trainWL); ok {
					s.trainMinibatch = wl.Minibatches
				}
				s.mode, _ = in.Mode()
				tr = append(tr, s)
			}},
			// The plan's instant: the controller's status and the board's mode.
			{At: 10 * time.Second, Do: func(in *lifetime.Instant) {
				atPlan = in.Status()
				planMode, _ = in.Mode()
				workers = len(in.Snapshot().Workers)
			}},
			// The scheduler's window (30 s) just before the rate doubles.
			{At: doubleAt - time.Millisecond, Do: func(in *lifetime.Instant) {
				snap := in.Snapshot()
				wl, _ := snap.Workload(proto.RoleInfer, inferWL)
				window.p99MS, window.p50MS, window.count = wl.Latency.P99MS, wl.Latency.P50MS, wl.Latency.Count
				if tw, ok := snap.Workload(proto.RoleTrain, trainWL); ok {
					window.trained = tw.Minibatches
				}
			}},
			// The operator lowers the power budget below the present draw.
			{At: lowerAt, Do: func(in *lifetime.Instant) {
				lowered.drawMW = in.PowerMW()
				lowered.newMW = math.Max(lowered.drawMW*0.8, 20000)
				b := in.Targets().Shared()
				b.PowerMW = lowered.newMW
				lowered.err = in.SetTargets(b)
			}},
		}}
	start := time.Now()
	res, err := lifetime.Run(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s of virtual time in %s real", sc.Duration, time.Since(start).Round(time.Millisecond))
	defer func() {
		if t.Failed() {
			logEvents(t, res.Events)
		}
	}()

	// 1. The first plan comes from the stored profiles (no profiling), and is applied.
	pe, planAt, ok := firstEvent(res.Events, control.KindPlan, 0, "")
	if !ok || res.FirstPlanS < 0 {
		t.Fatalf("no plan (first plan applied at %.1f s)", res.FirstPlanS)
	}
	t.Logf("plan at +%.1fs, applied at +%.1fs: %s", planAt.Seconds(), res.FirstPlanS, pe.Reason)
	if planAt > 8*time.Second {
		t.Errorf("the first plan came %.1f s after the workers started; want within 8 s", planAt.Seconds())
	}
	if atPlan.Live.Profiled != 0 || atPlan.StoredProfiles != len(seedModes(spec)) {
		t.Errorf("planning at start profiled %d modes live and saw %d stored profiles; want 0 and %d", atPlan.Live.Profiled, atPlan.StoredProfiles, len(seedModes(spec)))
	}
	if atPlan.Current == nil || !atPlan.Current.Predicted.Feasible {
		t.Fatalf("the plan is not feasible: %+v", atPlan.Current)
	}
	if planMode != atPlan.Current.Mode || workers != 2 {
		t.Fatalf("at 10 s the board is at %s, the plan says %s; %d workers registered (want 2)", planMode, atPlan.Current.Mode, workers)
	}

	// 2. Converged: over the scheduler's 30 s window before the doubling, the p99 within
	// the latency budget, every 1 s power average within the power budget, training on.
	from := time.Duration(res.FirstPlanS*float64(time.Second)) + settle
	maxMW, n := tr.maxPowerMW(from, doubleAt)
	t.Logf("window before the doubling: %d served, p50 %.1f ms, p99 %.1f ms (budget %.0f); max 1 s power %.2f W over %d s (budget %.0f W); mode %s batch %d",
		window.count, window.p50MS, window.p99MS, latencyMS, maxMW/1000, n, powerW, atPlan.Current.Mode.Human(), atPlan.Current.Batch())
	if window.count < int(rateRPS*30/2) {
		t.Errorf("only %d requests served in the window", window.count)
	}
	if window.p99MS <= 0 || window.p99MS > latencyMS {
		t.Errorf("p99 latency %.1f ms over the %.0f ms budget", window.p99MS, latencyMS)
	}
	if n < 30 || maxMW > powerW*1000 {
		t.Errorf("max 1 s power average %.2f W over %d samples; budget %.0f W", maxMW/1000, n, powerW)
	}
	if window.trained < 20 {
		t.Errorf("training ran %d minibatches; it must progress", window.trained)
	}

	// 3. The rate doubles: a re-plan within 10 s, the budgets still held after it.
	rp, rpAt, ok := firstEvent(res.Events, control.KindReplan, doubleAt, "arrival rate drifted")
	if !ok {
		t.Fatalf("no re-plan for the doubled arrival rate")
	}
	t.Logf("re-plan %.1fs after the doubling: %s", (rpAt - doubleAt).Seconds(), rp.Reason)
	if rpAt > doubleAt+10*time.Second {
		t.Errorf("re-plan %.1f s after the rate doubled; want within 10 s", (rpAt - doubleAt).Seconds())
	}
	after := tr.at(rpAt + 5*time.Second)
	maxMW, n = tr.maxPowerMW(rpAt+time.Second, rpAt+5*time.Second)
	t.Logf("after the re-plan: recent p99 %.1f ms over %d requests, max 1 s power %.2f W over %d s", after.recentP99MS, after.recentCount, maxMW/1000, n)
	if after.recentCount == 0 || after.recentP99MS > latencyMS || n == 0 || maxMW > powerW*1000 {
		t.Errorf("after the re-plan: p99 %.1f ms over %d requests (budget %.0f), max 1 s power %.2f W (budget %.0f)", after.recentP99MS, after.recentCount, latencyMS, maxMW/1000, powerW)
	}

	// 4. The power budget drops below the present draw: a step down within 2 s, and
	// the power within the new budget 3 s later.
	if lowered.err != nil || lowered.newMW >= lowered.drawMW {
		t.Fatalf("lowering the power budget from a %.1f W draw to %.1f W: %v", lowered.drawMW/1000, lowered.newMW/1000, lowered.err)
	}
	sd, sdAt, ok := firstEvent(res.Events, control.KindStepDown, lowerAt, "")
	if !ok {
		t.Fatalf("no step_down after lowering the power budget from %.0f W to %.1f W (present draw %.1f W)", powerW, lowered.newMW/1000, lowered.drawMW/1000)
	}
	t.Logf("step_down %.2fs after lowering the budget to %.1f W (draw %.1f W): %s", (sdAt - lowerAt).Seconds(), lowered.newMW/1000, lowered.drawMW/1000, sd.Reason)
	if sdAt > lowerAt+2*time.Second {
		t.Errorf("step_down %.2f s after the budget dropped; want within 2 s", (sdAt - lowerAt).Seconds())
	}
	maxMW, n = tr.maxPowerMW(lowerAt+3*time.Second, runFor)
	t.Logf("from 3 s after lowering the budget: max 1 s power %.2f W over %d s (new budget %.1f W)", maxMW/1000, n, lowered.newMW/1000)
	if n == 0 || maxMW > lowered.newMW {
		t.Errorf("power %.2f W over the new %.1f W budget from 3 s after it dropped", maxMW/1000, lowered.newMW/1000)
	}
	s := res.Streams[0]
	t.Logf("run: %d requests, %d served, %d refused, %d late, p99 after the plan %.1f ms; training %.0f samples; %d events",
		s.Requests, s.Served, s.Refused, s.Late, s.P99AfterPlanMS, res.TrainSamples[trainWL], len(res.Events))
	if s.Served < s.Requests*9/10 {
		t.Errorf("served %d of %d requests", s.Served, s.Requests)
	}
}

// TestTwoStreamsOnVirtualTime is TestTwoStreamsEndToEnd's assertions on virtual time: a
// classifier at 8 req/s within 400 ms and a detector at 20 req/s within its own 300 ms
// beside one trainer, from stored profiles: one joint plan with each stream's own
// budget, and over the scheduler's 30 s window each stream's p99 within it.
func TestTwoStreamsOnVirtualTime(t *testing.T) {
	const (
		lookAt = 40 * time.Second
		runFor = 45 * time.Second
	)
	spec := testboard.Spec(t, testboard.AGXOrin)
	models := testboard.Workloads(t)
	type seen struct {
		count  int
		p99MS  float64
		missed uint64
	}
	var (
		status  control.Status
		windows = map[string]seen{}
		trained uint64
	)
	sc := lifetime.Scenario{Board: testboard.AGXOrin, Train: []string{trainWL},
		Infer: []lifetime.Stream{{Workload: inferWL, RateRPS: classRate, LatencyMS: latencyMS},
			{Workload: streamWL, RateRPS: streamRate, LatencyMS: streamLat}},
		PowerBudgetMW: powerW * 1000, Searcher: "gmd", Duration: runFor, Seed: 1,
		Stored: storedTruth(spec, models, trainWL, inferWL, streamWL),
		Probes: []lifetime.Probe{{At: lookAt, Do: func(in *lifetime.Instant) {
			status = in.Status()
			snap := in.Snapshot()
			for _, n := range []string{inferWL, streamWL} {
				wl, _ := snap.Workload(proto.RoleInfer, n)
				windows[n] = seen{count: wl.Latency.Count, p99MS: wl.Latency.P99MS, missed: wl.DeadlineMisses}
			}
			if tw, ok := snap.Workload(proto.RoleTrain, trainWL); ok {
				trained = tw.Minibatches
			}
		}}}}
	start := time.Now()
	res, err := lifetime.Run(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s of virtual time in %s real", sc.Duration, time.Since(start).Round(time.Millisecond))
	defer func() {
		if t.Failed() {
			logEvents(t, res.Events)
		}
	}()

	// 1. One joint plan for both streams from the stored profiles.
	var pe control.Event
	var planAt time.Duration
	found := false
	for _, e := range res.Events {
		if e.Kind == control.KindPlan && strings.Contains(e.Reason, inferWL) && strings.Contains(e.Reason, streamWL) {
			pe, planAt, found = e, e.Time.Sub(vclock.Epoch), true
			break
		}
	}
	if !found {
		t.Fatalf("no plan for both streams")
	}
	t.Logf("plan at +%.1fs: %s", planAt.Seconds(), pe.Reason)
	if planAt > 8*time.Second {
		t.Errorf("the joint plan came %.1f s after the workers started; want within 8 s", planAt.Seconds())
	}
	if status.Live.Profiled != 0 || status.StoredProfiles != len(seedModes(spec)) {
		t.Errorf("planning profiled %d modes live and saw %d stored profiles; want 0 and %d", status.Live.Profiled, status.StoredProfiles, len(seedModes(spec)))
	}
	if status.Current == nil || !status.Current.Predicted.Feasible || len(status.Current.Streams) != 2 {
		t.Fatalf("the plan is not a feasible plan for two streams: %+v", status.Current)
	}
	budget := map[string]float64{inferWL: latencyMS, streamWL: streamLat}
	for _, s := range status.Current.Streams {
		if s.LatencyBudgetMS != budget[s.Workload] || s.PredLatencyMS > budget[s.Workload] {
			t.Errorf("stream %+v: want its own budget %v ms and a predicted p99 within it", s, budget[s.Workload])
		}
	}

	// 2. Both streams running: each p99 within its own budget over the scheduler's
	// window; training progresses.
	for _, n := range []string{inferWL, streamWL} {
		w := windows[n]
		t.Logf("stream %s over the 30 s window to %s: %d served, p99 %.1f ms (budget %.0f ms), %d deadline misses", n, lookAt, w.count, w.p99MS, budget[n], w.missed)
		if w.count < 50 {
			t.Errorf("stream %s: %d served in the window", n, w.count)
		}
		if w.p99MS <= 0 || w.p99MS > budget[n] {
			t.Errorf("stream %s: p99 %.1f ms over its %.0f ms budget", n, w.p99MS, budget[n])
		}
	}
	t.Logf("training: %d minibatches by %s (predicted %.1f samples/s)", trained, lookAt, status.Current.Predicted.ThroughputSPS)
	if trained < 20 {
		t.Errorf("training ran %d minibatches; it must progress", trained)
	}
	for _, s := range res.Streams {
		t.Logf("stream %s over the run: %d requests, %d served, %d refused, %d late, p99 %.1f ms", s.Workload, s.Requests, s.Served, s.Refused, s.Late, s.P99MS)
		if s.Refused != 0 || s.Served < s.Requests*9/10 {
			t.Errorf("stream %s: served %d of %d requests, %d refused", s.Workload, s.Served, s.Requests, s.Refused)
		}
	}
}
