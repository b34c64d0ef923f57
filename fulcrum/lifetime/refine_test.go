package lifetime_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon"
	"github.com/fulcrum-edge/fulcrum/fulcrum/lifetime"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/internal/vclock"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// The live-refinement scenarios (issue 31): the pair of pair() on the simulated AGX
// (physics), from a store that holds a GPU ladder at 12 cores, the CPU and EMC at their
// highest: the stored times are the workload models' own, the stored power of each
// mode the models' times powerK[mode] (a profile biased as one noisy repeat can be).
const (
	refTrain = "resnet18-train"
	refInfer = "resnet50-infer"
	refRate  = 15.0
	refLatMS = 400.0
)

var refLadder = []int64{510e6, 714e6, 918e6, 1020e6, 1122e6}

func refMode(gpuHz int64) powermode.Mode {
	return powermode.Mode{Cores: 12, CPUKHz: 2201600, GPUHz: gpuHz, EMCHz: 3199000000}
}

// refStored is the store's profiles: the ladder's modes, power scaled by powerK (a
// mode not in it: 1).
func refStored(t *testing.T, powerK map[int64]float64) []store.Profile {
	t.Helper()
	spec := testboard.Spec(t, testboard.AGXOrin)
	models := testboard.Workloads(t)
	var out []store.Profile
	put := func(name string, role truth.Role, m powermode.Mode, b int, k float64) {
		w := models[name]
		ms, mw := w.TimeMS(spec, m, b), w.PowerMW(spec, m, b)*k
		out = append(out, store.Profile{Board: spec.Name, Workload: name, Role: role, Mode: m, Batch: b,
			TimeMS: store.TimeStats{Mean: ms, P50: ms, P95: ms}, PowerMW: store.PowerStats{Mean: mw},
			Samples: 1, PowerSamples: 1, StartedAt: vclock.Epoch, FinishedAt: vclock.Epoch, Source: store.SourceSim})
	}
	for _, g := range refLadder {
		k := powerK[g]
		if k == 0 {
			k = 1
		}
		m := refMode(g)
		put(refTrain, truth.Train, m, models[refTrain].Batch, k)
		for _, b := range models[refInfer].BatchSizes() {
			put(refInfer, truth.Infer, m, b, k)
		}
	}
	return out
}

// refProfiles is what the decision makes of stored profiles at the pair's budgets.
func refDecider(t *testing.T, powerMW float64) plan.Decider {
	t.Helper()
	b := plan.Budgets{RateRPS: refRate, LatencyMS: refLatMS, PowerMW: powerMW}.WithDefaults()
	return control.DecisionRules(control.DefaultConfig(), sched.DefaultConfig()).For(b, control.DefaultConfig().InferBatches)
}

// refBest is the decision's best configuration at mode gpuHz over the stored profiles.
func refBest(t *testing.T, stored []store.Profile, powerMW float64, gpuHz int64) plan.Scored {
	t.Helper()
	p := plan.ModeProfile{Mode: refMode(gpuHz), Repeats: 1}
	for _, sp := range stored {
		if sp.Mode != p.Mode {
			continue
		}
		if sp.Role == truth.Train {
			p.Train = plan.TrainPoint{Batch: sp.Batch, TimeMS: sp.TimeMS.Mean, PowerMW: sp.PowerMW.Mean}
		} else {
			p.Infer = append(p.Infer, plan.InferPoint{Batch: sp.Batch, TimeMS: sp.TimeMS.Mean, PowerMW: sp.PowerMW.Mean})
		}
	}
	all, err := refDecider(t, powerMW).ScoreAll([]plan.ModeProfile{p})
	if err != nil || len(all) == 0 {
		t.Fatalf("no stored profile at GPU %d MHz: %v", gpuHz/1e6, err)
	}
	best := all[0]
	for _, s := range all {
		if s.ThroughputSPS*s.PFeasible > best.ThroughputSPS*best.PFeasible {
			best = s
		}
	}
	return best
}

func refScenario(stored []store.Profile, powerMW float64, d time.Duration, trials bool) lifetime.Scenario {
	return lifetime.Scenario{Board: testboard.AGXOrin, Train: []string{refTrain},
		Infer:         []lifetime.Stream{{Workload: refInfer, RateRPS: refRate, LatencyMS: refLatMS}},
		PowerBudgetMW: powerMW, Searcher: "gmd", Duration: d, Seed: 1, Stored: stored,
		Configure: func(o *daemon.Options) { o.Control.Refine.Trials = trials }}
}

func refEvents(res lifetime.Result, kinds ...control.Kind) []control.Event {
	var out []control.Event
	for _, e := range res.Events {
		for _, k := range kinds {
			if e.Kind == k {
				out = append(out, e)
			}
		}
	}
	return out
}

func logRefine(t *testing.T, res lifetime.Result) {
	t.Helper()
	for _, e := range refEvents(res, control.KindPlan, control.KindReplan, control.KindTrial, control.KindConfirm, control.KindAbandon, control.KindStepDown, control.KindStepUp) {
		t.Logf("%6.1fs %s: %s", e.Time.Sub(vclock.Epoch).Seconds(), e.Kind, e.Reason)
	}
}

// refBudgetFor is the power budget at which the decision gives mode gpuHz's best stored
// configuration probability p of meeting every budget (bisection).
func refBudgetFor(t *testing.T, stored []store.Profile, gpuHz int64, p float64) float64 {
	t.Helper()
	return bisectBudget(p, func(mw float64) float64 { return refBest(t, stored, mw, gpuHz).PFeasible })
}

// bisectBudget is the power budget (mW) at which pAt, a configuration's P(every budget
// met) at a budget, reaches p.
func bisectBudget(p float64, pAt func(mw float64) float64) float64 {
	lo, hi := 1000.0, 200000.0
	for range 60 {
		mid := (lo + hi) / 2
		if pAt(mid) < p {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// TestRefineEvidenceTightensTheClaim: the stored profiles over-state power by 6 % (one
// noisy repeat each); the power budget is set where the decision claims GPU 1020 MHz
// with P just over 99 %. Running there, the live windows are pooled into its profile:
// minutes later it counts more repeats, its power estimate has moved to the board's
// mixed power, and the claim's P is higher than at the plan and than a minute in. (On
// main nothing learned live reached the decision: status had no refine figures and the
// claim stayed where the plan put it.) Trials are off: the operating point stays put.
func TestRefineEvidenceTightensTheClaim(t *testing.T) {
	k := map[int64]float64{}
	for _, g := range refLadder {
		k[g] = 1.06
	}
	stored := refStored(t, k)
	budget := refBudgetFor(t, stored, 1020e6, 0.993)
	offline := refBest(t, stored, budget, 1020e6)
	if up := refBest(t, stored, budget, 1122e6); up.PFeasible >= 0.99 {
		t.Fatalf("setup: at %.0f mW GPU 1122 MHz is claimable too (P %.3f)", budget, up.PFeasible)
	}
	var early, late *control.RefineStatus
	sc := refScenario(stored, budget, 5*time.Minute, false)
	sc.Probes = []lifetime.Probe{
		{At: 40 * time.Second, Do: func(in *lifetime.Instant) { early = in.Status().Refine }},
		{At: 5*time.Minute - time.Second, Do: func(in *lifetime.Instant) { late = in.Status().Refine }},
	}
	res := run(t, sc)
	logRefine(t, res)
	plans := refEvents(res, control.KindPlan)
	if len(plans) == 0 || plans[0].Mode == nil || *plans[0].Mode != refMode(1020e6) {
		t.Fatalf("want the plan at GPU 1020 MHz (offline P %.4f at %.0f mW): %+v", offline.PFeasible, budget, plans)
	}
	if early == nil || late == nil {
		t.Fatalf("no live refinement in the status: %+v, %+v", early, late)
	}
	t.Logf("offline P %.4f; at 40 s %+v; at 5 min %+v", offline.PFeasible, *early, *late)
	for _, r := range []*control.RefineStatus{early, late} {
		if r.Mode != refMode(1020e6) {
			t.Fatalf("refine figures of mode %s, want the planned GPU 1020 MHz", r.Mode.Human())
		}
	}
	if !(early.Pooled.Repeats > 1 && late.Pooled.Repeats > early.Pooled.Repeats) {
		t.Errorf("repeats the profile counts: 1 stored, %d at 40 s, %d at 5 min: want growing", early.Pooled.Repeats, late.Pooled.Repeats)
	}
	// P saturates at 1 in float64 within a minute here: rising, then not falling.
	if !(late.PFeasible >= early.PFeasible && early.PFeasible > offline.PFeasible) || late.PFeasible < 0.9999 {
		t.Errorf("P(every budget met): %.6f offline, %.6f at 40 s, %.6f at 5 min: want rising to ≥ 0.9999", offline.PFeasible, early.PFeasible, late.PFeasible)
	}
	if late.Pooled.PowerRatio > 0.97 {
		t.Errorf("pooled power ratio %.3f: the board's mixed power (6 %% under the stored) did not replace the stored estimate", late.Pooled.PowerRatio)
	}
}

// refTrialScenario: stored truthfully except GPU 1122 MHz, whose stored power sits on a
// budget the board's real draw there breaks by 8 %. The decision claims 918 MHz; 1020
// MHz (one GPU level up) fits with P just under the claim, and 1122 MHz is a coin toss.
func refTrialScenario(t *testing.T, d time.Duration) (lifetime.Scenario, float64) {
	t.Helper()
	truthful := refStored(t, nil)
	true1122 := refBest(t, truthful, 1e6, 1122e6).PowerMW
	budget := true1122 / 1.08
	stored := refStored(t, map[int64]float64{1122e6: budget / true1122})
	for _, c := range []struct {
		g      int64
		lo, hi float64
	}{{918e6, 0.99, 1}, {1020e6, 0.25, 0.99}, {1122e6, 0.25, 0.99}} {
		if p := refBest(t, stored, budget, c.g).PFeasible; p < c.lo || p >= c.hi {
			t.Fatalf("setup: at %.0f mW the decision gives GPU %d MHz P %.4f, want in [%g, %g)", budget, c.g/1e6, p, c.lo, c.hi)
		}
	}
	return refScenario(stored, budget, d, true), budget
}

func refModeIs(e control.Event, gpuHz int64) bool { return e.Mode != nil && *e.Mode == refMode(gpuHz) }

// TestRefineTrialBreakingABudgetGoesBack: from the confirmed configuration the
// controller tries GPU 1122 MHz; the board draws 8 % over the power budget there, so
// the trial is abandoned within seconds (the power average of the first settled
// readings) and the board returns to the confirmed mode, which it holds to the end;
// the failed neighbour is not tried again (backed off for 10 minutes). On main no
// neighbour is ever tried.
func TestRefineTrialBreakingABudgetGoesBack(t *testing.T) {
	sc, budget := refTrialScenario(t, 6*time.Minute)
	res := run(t, sc)
	logRefine(t, res)
	var trial *control.Event
	for i, e := range res.Events {
		if e.Kind == control.KindTrial && refModeIs(e, 1122e6) {
			if trial != nil {
				t.Fatalf("GPU 1122 MHz tried again at %s after its trial failed at %s", e.Time.Sub(vclock.Epoch), trial.Time.Sub(vclock.Epoch))
			}
			trial = &res.Events[i]
			var end *control.Event
			for j := i + 1; j < len(res.Events); j++ {
				if k := res.Events[j].Kind; k == control.KindAbandon || k == control.KindConfirm || k == control.KindStepDown || k == control.KindReplan {
					end = &res.Events[j]
					break
				}
			}
			if end == nil || end.Kind != control.KindAbandon {
				t.Fatalf("trial of GPU 1122 MHz (over the %.0f mW budget) not abandoned: next decision %+v", budget, end)
			}
			if took := end.Time.Sub(e.Time); took > 5*time.Second {
				t.Errorf("the trial ran %s over the power budget before it was abandoned; want the first settled power window (≤ 5 s)", took)
			}
			if !refModeIs(*end, 1020e6) || !strings.Contains(end.Reason, "power") {
				t.Errorf("abandon went to %v (%s); want back to the confirmed GPU 1020 MHz, for power", end.Mode, end.Reason)
			}
		}
	}
	if trial == nil {
		t.Fatal("no trial of GPU 1122 MHz")
	}
	if res.FinalMode != refMode(1020e6) {
		t.Errorf("final mode %s, want the confirmed GPU 1020 MHz", res.FinalMode.Human())
	}
	if res.PowerBrokenS > 5 {
		t.Errorf("power over budget %.1f s", res.PowerBrokenS)
	}
}

// TestRefineTrialConfirmedIsKept: the plan claims GPU 918 MHz; GPU 1020 MHz, one level
// up, is predicted to train more with P under the claim. The controller tries it, its
// live evidence claims it (P ≥ 99 %) with no budget broken, it is confirmed and kept:
// the run ends there (a later trial above it goes back to it). On main the plan's 918
// MHz is held for the whole run.
func TestRefineTrialConfirmedIsKept(t *testing.T) {
	sc, _ := refTrialScenario(t, 4*time.Minute)
	res := run(t, sc)
	logRefine(t, res)
	plans := refEvents(res, control.KindPlan)
	if len(plans) == 0 || !refModeIs(plans[0], 918e6) {
		t.Fatalf("want the plan at GPU 918 MHz: %+v", plans)
	}
	var tried, confirmed bool
	for _, e := range refEvents(res, control.KindTrial, control.KindConfirm, control.KindAbandon) {
		switch {
		case e.Kind == control.KindTrial && refModeIs(e, 1020e6):
			tried = true
		case e.Kind == control.KindAbandon && tried && !confirmed:
			t.Fatalf("trial of GPU 1020 MHz abandoned: %s", e.Reason)
		case e.Kind == control.KindConfirm && tried && refModeIs(e, 1020e6):
			confirmed = true
		}
	}
	if !tried || !confirmed {
		t.Fatalf("GPU 1020 MHz tried %v, confirmed %v", tried, confirmed)
	}
	if res.FinalMode != refMode(1020e6) {
		t.Errorf("final mode %s, want the confirmed GPU 1020 MHz kept", res.FinalMode.Human())
	}
}

// TestRefineOffByConfig: controller.refine.enabled false is the controller without live
// refinement — the trial scenario plans 918 MHz and holds it: no trial, confirm or
// abandon, and no refine figures in the status.
func TestRefineOffByConfig(t *testing.T) {
	sc, _ := refTrialScenario(t, 3*time.Minute)
	sc.Configure = func(o *daemon.Options) { o.Control.Refine.Enabled = false }
	var st *control.RefineStatus
	sc.Probes = []lifetime.Probe{{At: 2 * time.Minute, Do: func(in *lifetime.Instant) { st = in.Status().Refine }}}
	res := run(t, sc)
	if evs := refEvents(res, control.KindTrial, control.KindConfirm, control.KindAbandon); len(evs) > 0 {
		t.Errorf("refinement off, yet %d refinement events, the first %s: %s", len(evs), evs[0].Kind, evs[0].Reason)
	}
	if st != nil {
		t.Errorf("refinement off, yet the status has %+v", *st)
	}
	if res.FinalMode != refMode(918e6) {
		t.Errorf("final mode %s, want the plan's GPU 918 MHz held", res.FinalMode.Human())
	}
}

// TestRefineNearClaimFromAPausedPlan: the stored profiles over-state power by 6 % at
// every mode (one noisy repeat each) and the power budget sits where the best of them,
// GPU 510 MHz, is claimed with P 95 %: nothing reaches the 99 % a claim needs, so the
// plan pauses training. A paused plan gathers no live evidence; with near-claim trials
// (the default) the controller runs that configuration under a trial's bounded exposure,
// its windows pool the board's lower mixed power in, and it is confirmed and kept:
// training runs to the end. With near_claim off (main's behaviour) training stays
// paused after the plan.
func TestRefineNearClaimFromAPausedPlan(t *testing.T) {
	k := map[int64]float64{}
	for _, g := range refLadder {
		k[g] = 1.06
	}
	stored := refStored(t, k)
	budget := refBudgetFor(t, stored, 510e6, 0.95)
	for _, g := range refLadder {
		if p := refBest(t, stored, budget, g).PFeasible; p >= 0.99 {
			t.Fatalf("setup: at %.0f mW GPU %d MHz is claimable (P %.4f)", budget, g/1e6, p)
		}
	}
	results := map[bool]lifetime.Result{}
	for _, near := range []bool{false, true} {
		sc := refScenario(stored, budget, 4*time.Minute, true)
		sc.Configure = func(o *daemon.Options) {
			o.Control.Refine.NearClaim = near
			o.Control.ResearchOff = true // the stored modes are what there is to decide on
		}
		res := run(t, sc)
		t.Logf("near_claim %v: %.0f samples after the plan, paused %.0f s, power broken %.1f s, latency broken %.1f s", near, res.TrainSamplesAfterPlan[refTrain], res.TrainPausedS, res.PowerBrokenS, res.LatencyBrokenS)
		logRefine(t, res)
		results[near] = res
	}
	off, on := results[false], results[true]
	if n := len(refEvents(off, control.KindTrial)); n > 0 {
		t.Errorf("near_claim off: %d trials", n)
	}
	var tried, confirmed bool
	for _, e := range refEvents(on, control.KindTrial, control.KindConfirm, control.KindAbandon) {
		switch {
		case e.Kind == control.KindTrial && strings.Contains(e.Reason, "paused"):
			tried = true
		case e.Kind == control.KindConfirm && tried:
			confirmed = true
		}
	}
	if !tried || !confirmed {
		t.Fatalf("near-claim trial from the paused plan: tried %v, confirmed %v", tried, confirmed)
	}
	if a, b := on.TrainSamplesAfterPlan[refTrain], off.TrainSamplesAfterPlan[refTrain]; !(a > 2*b) {
		t.Errorf("training samples after the plan: %.0f with near-claim trials, %.0f without; want the confirmed configuration training", a, b)
	}
	if on.PowerBrokenS > 5 {
		t.Errorf("power over budget %.1f s with near-claim trials", on.PowerBrokenS)
	}
}
