package lifetime_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon"
	"github.com/fulcrum-edge/fulcrum/fulcrum/lifetime"
	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// pausedAt20W is a configuration of the AGX one-stream lifetime sweep of
// docs/benchmarks.md at 20 W (resnet18-train beside mobilenetv3-infer at rateRPS within
// 200 ms; seed is the bench's run seed for it), on the simulator's noise-free truth of
// the pair. On main GMD's first search claims nothing there (latency binds through the
// training turn time, the power budget caps the GPU clock) and training pauses for the
// rest of the run ("Why GMD pauses at 20 W" is the 10 req/s one, seed 1).
func pausedAt20W(t *testing.T, rateRPS float64, seed int64, d time.Duration) lifetime.Scenario {
	t.Helper()
	spec := testboard.Spec(t, testboard.AGXOrin)
	rows, err := sim.TruthRows(spec, testboard.Workloads(t), sim.TruthOptions{Workloads: []string{"resnet18-train", "mobilenetv3-infer"}})
	if err != nil {
		t.Fatal(err)
	}
	tab, err := truth.NewTable(rows)
	if err != nil {
		t.Fatal(err)
	}
	// Near-claim trials (TestRefineNearClaimFromAPausedPlan) are off: these tests are of
	// the re-search and its back-off, which a near-claim that certifies would end.
	return lifetime.Scenario{Board: testboard.AGXOrin, Truth: tab, Train: []string{"resnet18-train"},
		Infer:         []lifetime.Stream{{Workload: "mobilenetv3-infer", RateRPS: rateRPS, LatencyMS: 200}},
		PowerBudgetMW: 20000, Searcher: "gmd", Duration: d, Seed: seed,
		Configure: func(o *daemon.Options) { o.Control.Refine.NearClaim = false }}
}

// researches are the controller's own re-searches (KindSearch events).
func researches(evs []control.Event) []control.Event {
	var out []control.Event
	for _, e := range evs {
		if e.Kind == control.KindSearch {
			out = append(out, e)
		}
	}
	return out
}

// The bench's run seed (seed 1) of the 20 W configuration at 10 req/s.
const seed10RPS = 3368749347194225895

// TestPausedTrainingSearchesAgain: the 20 W, 10 req/s run ("Why GMD pauses at 20 W")
// whose first search claims nothing no longer stays paused for the rest of the
// half-hour. The controller re-searches while training is paused (each re-search says
// why), backing off between them, GMD probes down from the mode power keeps from a claim,
// and training resumes: it trains far more than the same run with re-searching switched
// off, which pauses for good. (The 20 req/s run this test used first no longer pauses at
// all since profile batches over the room stopped waiting for a gap: its first search
// claims a configuration.)
func TestPausedTrainingSearchesAgain(t *testing.T) {
	d := 30 * time.Minute
	off := pausedAt20W(t, 10, seed10RPS, d)
	off.Configure = func(o *daemon.Options) { o.Control.ResearchOff, o.Control.Refine.NearClaim = true, false }
	roff, ron := run(t, off), run(t, pausedAt20W(t, 10, seed10RPS, d))
	if n := len(researches(roff.Events)); n != 0 {
		t.Fatalf("research_off: %d re-searches", n)
	}
	if roff.TrainPausedS < d.Seconds()/2 {
		t.Fatalf("research_off: training paused %.0f s of %s: the scenario no longer pauses (pick another)", roff.TrainPausedS, d)
	}
	rs := checkResearches(t, ron, d)
	if len(rs) == 0 {
		t.Fatalf("no re-search in %s with training paused %.0f s", d, ron.TrainPausedS)
	}
	got, paused := ron.TrainSamples["resnet18-train"], roff.TrainSamples["resnet18-train"]
	if got < 5*paused {
		t.Errorf("trained %.0f samples with re-searches, %.0f without: want training to resume (at least 5× the paused run's)", got, paused)
	}
	if ron.TrainPausedS > 0.9*roff.TrainPausedS {
		t.Errorf("training paused %.0f s with re-searches, %.0f s without", ron.TrainPausedS, roff.TrainPausedS)
	}
}

// TestPausedSearchesBackOff: 20 W at 15 req/s (the 10 req/s run's seed), where the first
// search claims nothing and so do several re-searches. Re-searches run while training is
// paused, each profiling modes the store did not hold, and they back off: no re-search
// storm, whatever they find. A run with re-searches is as deterministic as any: the
// searcher is handed what it knows in a fixed order (the live profiler's over-budget
// records were a map's random order, and two runs of the same seed parted at the third
// re-search). (It ran at 10 req/s until that run's first re-search resumed training.)
func TestPausedSearchesBackOff(t *testing.T) {
	d := 30 * time.Minute
	off := pausedAt20W(t, 15, seed10RPS, d)
	off.Configure = func(o *daemon.Options) { o.Control.ResearchOff, o.Control.Refine.NearClaim = true, false }
	roff, ron := run(t, off), run(t, pausedAt20W(t, 15, seed10RPS, d))
	if again := run(t, pausedAt20W(t, 15, seed10RPS, d)); eventLog(t, again.Events) != eventLog(t, ron.Events) {
		t.Errorf("the same seed twice: %d and %d events, %v and %v samples", len(ron.Events), len(again.Events), ron.TrainSamples, again.TrainSamples)
	}
	rs := checkResearches(t, ron, d)
	if len(rs) < 2 {
		t.Fatalf("%d re-searches in %s with training paused %.0f s: want it searched again", len(rs), d, ron.TrainPausedS)
	}
	if ron.ProfilesTaken <= roff.ProfilesTaken {
		t.Errorf("%d modes profiled with re-searches, %d without: a re-search must measure modes the store does not hold", ron.ProfilesTaken, roff.ProfilesTaken)
	}
}

// checkResearches logs the run's re-searches and checks that each says why and that
// they back off: holds of 50 s, 100 s, … up to 800 s leave room for at most five in 30
// minutes after the first plan, plus one for each time a plan was feasible in between (a
// storm would start one every control period).
func checkResearches(t *testing.T, r lifetime.Result, d time.Duration) []control.Event {
	t.Helper()
	rs := researches(r.Events)
	for _, e := range rs {
		t.Logf("%.0f s: %s", e.Time.Sub(r.Events[0].Time).Seconds(), e.Reason)
		if !strings.Contains(e.Reason, "training is paused") && !strings.Contains(e.Reason, "the last search failed") {
			t.Errorf("a re-search event does not say why: %q", e.Reason)
		}
	}
	resumed := 0
	for _, e := range r.Events {
		if e.Kind == control.KindApply && strings.HasPrefix(e.Reason, "training resumed") {
			resumed++
		}
	}
	if len(rs) > 5+resumed || len(rs) > 12 {
		t.Errorf("%d re-searches in %s (training resumed %d times): the back-off does not hold", len(rs), d, resumed)
	}
	return rs
}
