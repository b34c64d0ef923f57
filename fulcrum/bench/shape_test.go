package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/search"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// runShape is RunBench with the shape forced: the pair sweep, or the several-workload
// sweep at spec.Streams and spec.Jobs (which RunBench takes only from 2 on).
func runShape(t *testing.T, spec BenchSpec, multi bool) *BenchReport {
	t.Helper()
	r, err := newRoster(spec)
	if err != nil {
		t.Fatal(err)
	}
	var sh shape
	if multi {
		sh, err = newMultiShape(spec, r)
	} else {
		sh, err = newPairShape(spec, r)
	}
	if err != nil {
		t.Fatal(err)
	}
	rep, err := run(context.Background(), spec, sh, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// The pair is the one-trainer, one-stream case of the several-workload bench: on the
// same truth, sweep and seed, the pair path and the multi path at k = m = 1 score every
// searcher the same, configuration by configuration (without profiling noise, which the
// two replay through different profilers, and without micro-batch rows, which the multi
// truth does not read). The decision keeps fulcrumd's rules: the admission room and the
// confidence (at 3% assumed noise), so the margin oracles and the decision's refusals
// are compared too.
func TestPairIsOneStreamOneJob(t *testing.T) {
	tab := streamsTable(t)
	spec := BenchSpec{Truth: tab, Streams: 1, Jobs: 1, RatesRPS: []float64{2, 20, 80}, LatenciesMS: []float64{40, 150, 400}, PowersMW: []float64{9000, 16000, 30000},
		Searchers: []string{"oracle", "oracle-m0", "oracle-m3", "preset", "maxn", "random-5", "random-40", "gmd", "als"}, Seed: 3, Parallel: 2,
		Rules:   plan.Rules{NoiseRel: 0.03, Confidence: 0.99, Admission: plan.Admission{MarginMS: 5, DevRel: 0.06}},
		Presets: []powermode.Mode{{Cores: 4, CPUKHz: 1200000, GPUHz: 700000000, EMCHz: 2133000000}, {Cores: 8, CPUKHz: 2200000, GPUHz: 1300000000, EMCHz: 3199000000}}}
	pair, multi := runShape(t, spec, false), runShape(t, spec, true)
	if pair.ConfigsTotal != multi.ConfigsTotal || pair.ConfigsOracleInfeasible != multi.ConfigsOracleInfeasible || pair.Pairs != multi.Pairs {
		t.Fatalf("pair: %d configurations (%d unsatisfiable) over %d pairs; multi: %d (%d) over %d sets",
			pair.ConfigsTotal, pair.ConfigsOracleInfeasible, pair.Pairs, multi.ConfigsTotal, multi.ConfigsOracleInfeasible, multi.Pairs)
	}
	if pair.ConfigsOracleInfeasible == 0 || pair.ConfigsOracleInfeasible == pair.ConfigsTotal {
		t.Fatalf("%d of %d configurations unsatisfiable: the sweep should have both kinds", pair.ConfigsOracleInfeasible, pair.ConfigsTotal)
	}
	for s, name := range spec.Searchers {
		p, m := pair.Searchers[s], multi.Searchers[s]
		p.WallS, m.WallS = 0, 0
		if p != m {
			t.Errorf("%s:\n pair  %+v\n multi %+v", name, p, m)
		}
		if name == "oracle" {
			continue
		}
		for c := range pair.Outcomes[s] {
			po, mo := pair.Outcomes[s][c], multi.Outcomes[s][c]
			if po.Status != mo.Status || po.Ratio != mo.Ratio || po.Profiles != mo.Profiles || po.Campaign != mo.Campaign {
				t.Errorf("%s, configuration %d (%+v): pair %s ratio %v profiles %d+%d (%v); multi %s ratio %v profiles %d+%d (%v)",
					name, c, po.Budgets, po.Status, po.Ratio, po.Campaign, po.Profiles, po.Err, mo.Status, mo.Ratio, mo.Campaign, mo.Profiles, mo.Err)
			}
		}
	}
}

// failingLearner is a pair learner whose campaign fails after one profile.
type failingLearner struct{}

func (failingLearner) Name() string { return "als" }
func (failingLearner) Search(context.Context, search.Problem, search.Profiler) (search.Result, error) {
	return search.Result{}, errors.New("failingLearner: Search is not used")
}
func (failingLearner) Learn(ctx context.Context, p search.Problem, prof search.Profiler) (search.Answerer, error) {
	if _, err := prof.Profile(ctx, p.Space.Modes()[0]); err != nil {
		return nil, err
	}
	return nil, errors.New("campaign failed")
}

// A failed campaign is scored alike whatever the shape: no answer where the oracle can
// satisfy the budgets, oracle_infeasible where it cannot (before, several streams counted
// every configuration of a failed campaign as no answer, unsatisfiable ones included,
// which moved the within and no-answer percentages' base).
func TestFailedCampaignScoredAlike(t *testing.T) {
	build := func(name string) (search.Searcher, error) {
		if name == "als" {
			return failingLearner{}, nil
		}
		return nil, fmt.Errorf("no %s", name)
	}
	spec := BenchSpec{Truth: streamsTable(t), Streams: 2, RatesRPS: []float64{5, 20}, LatenciesMS: []float64{40, 400}, PowersMW: []float64{9000, 30000},
		Searchers: []string{"als"}, Seed: 3, Parallel: 2, Build: build}
	rep, err := RunBench(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ConfigsOracleInfeasible == 0 || rep.ConfigsOracleInfeasible == rep.ConfigsTotal {
		t.Fatalf("%d of %d configurations unsatisfiable: the sweep should have both kinds", rep.ConfigsOracleInfeasible, rep.ConfigsTotal)
	}
	unsat := 0
	for c, o := range rep.Outcomes[0] {
		if o.Status == "oracle_infeasible" {
			unsat++
		} else if o.Status != "no_answer" {
			t.Errorf("configuration %d: status %s after a failed campaign, want no_answer or oracle_infeasible", c, o.Status)
		}
		if o.Err == nil || o.Campaign == 0 || o.Profiles != 0 {
			t.Errorf("configuration %d: err %v, campaign %d, profiles %d; want the campaign's error, its profile and none after", c, o.Err, o.Campaign, o.Profiles)
		}
	}
	if unsat != rep.ConfigsOracleInfeasible {
		t.Errorf("%d outcomes oracle_infeasible, the oracle cannot satisfy %d", unsat, rep.ConfigsOracleInfeasible)
	}
	if st := rep.Searchers[0]; st.NoAnswerPct != 100 || st.Errors != rep.ConfigsTotal {
		t.Errorf("row %+v: want 100%% no answer over the satisfiable configurations and an error each", st)
	}
	spec.Streams, spec.Jobs = 1, 1
	pair, multi := runShape(t, spec, false), runShape(t, spec, true)
	for c := range pair.Outcomes[0] {
		if p, m := pair.Outcomes[0][c], multi.Outcomes[0][c]; p.Status != m.Status || p.Campaign != m.Campaign || p.Profiles != m.Profiles {
			t.Errorf("configuration %d: pair %s %d+%d, multi %s %d+%d", c, p.Status, p.Campaign, p.Profiles, m.Status, m.Campaign, m.Profiles)
		}
	}
}
