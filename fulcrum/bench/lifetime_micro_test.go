package bench

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// microLifeSpec is the lifetime sweep of the simulated AGX's resnet18-train beside
// mobilenetv3-infer at 30 req/s, with latency budgets below a resnet18 minibatch (25 and
// 50 ms, ~100 ms at MAXN) and one above it.
func microLifeSpec(tab *truth.Table, micro bool, run LifeRunner) LifetimeSpec {
	return LifetimeSpec{Truth: tab, Board: "agx-orin-64gb", Pairs: []Pair{{"resnet18-train", "mobilenetv3-infer"}},
		RatesRPS: []float64{30}, LatenciesMS: []float64{25, 50, 150}, PowersMW: []float64{30000, 50000},
		Methods: []string{"gmd", "oracle-m3"}, Duration: 10 * time.Minute, Noise: 0.03, Seed: 1, Micro: micro,
		Admission: plan.Admission{MarginMS: 5, DevRel: 0.06}, Run: run}
}

// Issue 32 in the lifetime bench. Micro off is the k = 1 bench exactly: a table with
// micro-batch rows gives the report (JSON) of the same table without them, and the
// harness's trainers are told to declare none. Micro on: the runs are told to declare
// micro-batches, the budgets below a minibatch get a denominator (no longer apart), and
// the held oracle-m3 decision trains within every budget in more configurations.
func TestRunLifetimeMicroBatches(t *testing.T) {
	with, without := microTables(t)
	run := func(tab *truth.Table, micro bool) (*LifetimeReport, *standIn) {
		s := &standIn{}
		rep, err := RunLifetime(context.Background(), microLifeSpec(tab, micro, s.run))
		if err != nil {
			t.Fatal(err)
		}
		return rep, s
	}
	before, _ := run(without, true)
	off, offRuns := run(with, false)
	jb, _ := json.Marshal(before)
	jo, _ := json.Marshal(off)
	if string(jb) != string(jo) {
		t.Fatalf("micro off on a table with micro-batch rows:\n%s\nthe table without them:\n%s", jo, jb)
	}
	for _, r := range offRuns.runs {
		if r.Micro {
			t.Fatalf("micro off: run %s told to declare micro-batches", r.Method)
		}
	}
	on, onRuns := run(with, true)
	if !on.Micro || off.Micro {
		t.Fatalf("report micro: on %v, off %v", on.Micro, off.Micro)
	}
	for _, r := range onRuns.runs {
		if !r.Micro {
			t.Fatalf("micro on: run %s not told to declare micro-batches", r.Method)
		}
	}
	if on.ConfigsApart >= off.ConfigsApart {
		t.Fatalf("configurations apart: %d with micro-batches, %d at k = 1: the budgets below a minibatch should get a denominator", on.ConfigsApart, off.ConfigsApart)
	}
	or, orOff := on.Methods[1], off.Methods[1]
	t.Logf("oracle-m3 within every budget: %d of %d scored at k = 1, %d of %d with micro-batches", orOff.WithinBudget, off.Configs-off.ConfigsApart, or.WithinBudget, on.Configs-on.ConfigsApart)
	if or.WithinBudget <= orOff.WithinBudget || or.ViolationPct != 0 || or.LatencyBrokenPct != 0 {
		t.Fatalf("oracle-m3 with micro-batches %+v, at k = 1 %+v: want more configurations within every budget, none broken", or, orOff)
	}
	// The budgets below a minibatch that only micro-batches open: the held decision
	// trains there, all of it after its plan at t = 0.
	opened := 0
	for ci, c := range on.Configurations {
		if off.Configurations[ci].IdealSamples != 0 || c.IdealSamples <= 0 {
			continue
		}
		opened++
		if r := c.Runs[1]; r.TrainSamples <= 0 || r.TrainAfterPlan != r.TrainSamples {
			t.Fatalf("%s: opened by micro-batches, but oracle-m3 %+v", c.Config, r)
		}
	}
	if opened == 0 {
		t.Fatal("no configuration opened by micro-batches")
	}
}

// Several streams: the lifetime bench's several-workload denominator and oracle know
// micro-batches too, and the held decision is scored with its micro-batch (on the whole
// minibatch it would break the latency budget it was chosen for).
func TestRunLifetimeMicroBatchesStreams(t *testing.T) {
	with, _ := multiMicroTables(t)
	spec := LifetimeSpec{Truth: with, Board: "agx-orin-64gb", Streams: 2, RatesRPS: []float64{30}, LatenciesMS: []float64{50}, PowersMW: []float64{50000},
		Methods: []string{"oracle-m3"}, Duration: 10 * time.Minute, Admission: plan.Admission{MarginMS: 5, DevRel: 0.06}}
	off, err := RunLifetime(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	spec.Micro = true
	on, err := RunLifetime(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if off.ConfigsApart != 1 || off.Micro || on.ConfigsApart != 0 || !on.Micro {
		t.Fatalf("apart: %d at k = 1 (micro %v), %d with micro-batches (micro %v): want the 50 ms budget apart at k = 1 only", off.ConfigsApart, off.Micro, on.ConfigsApart, on.Micro)
	}
	o := on.Outcomes[0][0]
	if !o.Planned || o.TrainSamples <= 0 || o.LatencyBrokenS != 0 || o.PowerBrokenS != 0 || on.Methods[0].WithinBudget != 1 {
		t.Fatalf("oracle-m3 with micro-batches: %+v (row %+v): want it training within every budget", o, on.Methods[0])
	}
}

var errTestFailed = errors.New("stand-in failure")

// Within every budget by hand: a run counts when it trained after its first plan (at
// least 1 % of the denominator) and broke no budget for over 1 % of the time after that
// plan (what its first search broke before it does not count); one that trained but
// broke one is a violation; apart configurations count in neither.
func TestSummariseLifetimeWithin(t *testing.T) {
	const durS = 1100
	ok := LifeResult{TrainSamples: 900, TrainAfterPlan: 800, Planned: true, FirstPlanS: 100, LatencyBrokenS: 90}
	with := func(f func(*LifeResult)) LifeResult { r := ok; f(&r); return r }
	outs := []LifeOutcome{
		{IdealSamples: 1000, LifeResult: ok}, // within: the search's 90 s are before the plan
		{IdealSamples: 1000, LifeResult: with(func(r *LifeResult) { r.LatencyBrokenAfterPlanS = 10 })},     // within (1 % of 1000 s)
		{IdealSamples: 1000, LifeResult: with(func(r *LifeResult) { r.LatencyBrokenAfterPlanS = 11 })},     // violation
		{IdealSamples: 1000, LifeResult: with(func(r *LifeResult) { r.PowerBrokenAfterPlanS = 50 })},       // violation
		{IdealSamples: 1000, LifeResult: with(func(r *LifeResult) { r.TrainAfterPlan = 9 })},               // paused after its plan
		{IdealSamples: 1000, LifeResult: with(func(r *LifeResult) { r.Planned, r.FirstPlanS = false, 0 })}, // never planned
		{IdealSamples: 1000, LifeResult: ok, Err: errTestFailed},                                           // failed
		{IdealSamples: 1000, LifeResult: with(func(r *LifeResult) { r.TrainAfterPlan = 10 })},              // within (1 %)
		{IdealSamples: 0, LifeResult: ok}, // apart
	}
	st := summariseLifetime("x", outs, durS)
	if st.WithinBudget != 3 || !near(st.WithinBudgetPct, 100*3.0/8) || !near(st.ViolationPct, 100*2.0/8) {
		t.Fatalf("within %d (%.2f %%), violations %.2f %%: want 3 (37.5 %%), 25 %%", st.WithinBudget, st.WithinBudgetPct, st.ViolationPct)
	}
}
