package bench

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/benchgen"
	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/truthprof"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// streamsTable is the small synthetic board with two more inference workloads: a
// classifier heavier per request than the detector (net-infer), and a light segmenter.
func streamsTable(t *testing.T) *truth.Table {
	t.Helper()
	v := benchgen.Small()
	v.Workloads = append(v.Workloads,
		benchgen.Workload{Name: "cls-infer", Role: truth.Infer, Batches: []int{1, 2, 4, 8}, BaseMS: 14, BatchSlope: 0.5, GPU: 0.7, EMC: 0.2, CPU: 0.1, NeedCores: 2, Activity: 0.85},
		benchgen.Workload{Name: "seg-infer", Role: truth.Infer, Batches: []int{1, 2, 4, 8}, BaseMS: 4, BatchSlope: 0.3, GPU: 0.5, EMC: 0.3, CPU: 0.1, NeedCores: 2, Activity: 0.7})
	tab, err := benchgen.Table(v)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// With one training job and one stream the multi-workload oracle is the pair oracle.
func TestMultiOracleIsPairOracle(t *testing.T) {
	tab := streamsTable(t)
	pt, err := truthprof.NewPairTruth(tab, "net-train", "net-infer", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	mt, err := truthprof.NewMultiTruth(tab, []string{"net-train"}, []string{"net-infer"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if mt.Len() != pt.Len() {
		t.Fatalf("multi truth has %d modes, the pair %d", mt.Len(), pt.Len())
	}
	kinds := map[bool]int{}
	for _, rate := range []float64{2, 20, 80} {
		for _, l := range []float64{40, 120, 300} {
			for _, pw := range []float64{9000, 16000, 26000, 40000} {
				b := plan.Budgets{RateRPS: rate, LatencyMS: l, PowerMW: pw}
				want, err := Oracle(pt, b)
				if err != nil {
					t.Fatal(err)
				}
				got, err := MultiOracle(mt, plan.MultiBudgets{Streams: []plan.StreamBudget{{Name: "net-infer", RateRPS: rate, LatencyMS: l}}, PowerMW: pw})
				if err != nil {
					t.Fatal(err)
				}
				if got.Feasible != want.Feasible || got.Best.Mode != want.Choice.Mode || got.Best.Streams[0].Batch != want.Choice.Batch || got.Best.ObjectiveSPS != want.Choice.ThroughputSPS {
					t.Errorf("%+v: multi %v %s b%v Θ %.3f, pair %v %s b%d θ %.3f", b, got.Feasible, got.Best.Mode, got.Best.Batches(), got.Best.ObjectiveSPS, want.Feasible, want.Choice.Mode, want.Choice.Batch, want.Choice.ThroughputSPS)
				}
				kinds[want.Feasible]++
			}
		}
	}
	if kinds[true] == 0 || kinds[false] == 0 {
		t.Errorf("feasible/infeasible %d/%d: the sweep should have both", kinds[true], kinds[false])
	}
}

// Two streams: the oracle is the best of every mode and batch pair (brute force over the
// table's rows), and planning for the first stream alone overstates what training gets.
func TestMultiOracleTwoStreams(t *testing.T) {
	tab := streamsTable(t)
	mt, err := truthprof.NewMultiTruth(tab, []string{"net-train"}, []string{"net-infer", "cls-infer"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := truthprof.NewPairTruth(tab, "net-train", "net-infer", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	const detMS = 150
	overstated := 0.0
	for _, rates := range [][2]float64{{10, 5}, {30, 20}, {60, 40}} {
		for _, pw := range []float64{16000, 26000, 40000} {
			b := plan.MultiBudgets{Streams: []plan.StreamBudget{{Name: "det", RateRPS: rates[0], LatencyMS: detMS}, {Name: "cls", RateRPS: rates[1], LatencyMS: 300}}, PowerMW: pw}
			got, err := MultiOracle(mt, b)
			if err != nil {
				t.Fatal(err)
			}
			m, _ := plan.NewMultiModel(b, mt.AllBatches())
			var best plan.MultiEval
			n := 0
			for _, p := range mt.Profiles() {
				for _, b1 := range mt.Batches[0] {
					for _, b2 := range mt.Batches[1] {
						e, err := m.Evaluate(p, []int{b1, b2})
						if err != nil {
							t.Fatal(err)
						}
						if n == 0 || e.Better(best) {
							best = e
						}
						n++
					}
				}
			}
			if got.Feasible != best.Feasible || got.Best.Mode != best.Mode || got.Best.ObjectiveSPS != best.ObjectiveSPS || got.Best.PowerMW != best.PowerMW {
				t.Errorf("%v streams, %v mW: oracle %v %s %v Θ %.3f, brute force %v %s %v Θ %.3f", rates, pw, got.Feasible, got.Best.Mode, got.Best.Batches(), got.Best.ObjectiveSPS, best.Feasible, best.Mode, best.Batches(), best.ObjectiveSPS)
			}
			// The first stream alone, planned as a pair (what the controller's pairOf does
			// today): its plan promises training throughput the board does not have once
			// the second stream takes its share of the GPU.
			alone, err := Oracle(pt, plan.Budgets{RateRPS: rates[0], LatencyMS: detMS, PowerMW: pw})
			if err != nil {
				t.Fatal(err)
			}
			if alone.Feasible && got.Feasible {
				if got.Best.ObjectiveSPS > alone.Choice.ThroughputSPS {
					t.Errorf("%v streams, %v mW: two streams train faster (%.1f) than the first alone (%.1f)", rates, pw, got.Best.ObjectiveSPS, alone.Choice.ThroughputSPS)
				}
				overstated = max(overstated, alone.Choice.ThroughputSPS/got.Best.ObjectiveSPS)
			}
		}
	}
	t.Logf("the first stream's pair plan overstates training throughput by up to %.2f×", overstated)
	if overstated < 1.3 {
		t.Errorf("the pair plan overstated training by at most %.2f×: the budgets should show the second stream's load", overstated)
	}
}

// Three streams, every batch vector, and batch sizes restricted as asked; bad input is
// refused.
func TestMultiOracleThreeStreams(t *testing.T) {
	tab := streamsTable(t)
	infers := []string{"net-infer", "cls-infer", "seg-infer"}
	mt, err := truthprof.NewMultiTruth(tab, []string{"net-train"}, infers, []int{1, 2, 4})
	if err != nil {
		t.Fatal(err)
	}
	for i, bs := range mt.Batches {
		if !slices.Equal(bs, []int{1, 2, 4}) {
			t.Fatalf("stream %d batches %v: want the table's sizes restricted to 1, 2, 4", i, bs)
		}
	}
	b := plan.MultiBudgets{Streams: []plan.StreamBudget{{Name: "det", RateRPS: 10, LatencyMS: 200}, {Name: "cls", RateRPS: 5, LatencyMS: 400}, {Name: "seg", RateRPS: 20, LatencyMS: 150}}, PowerMW: 30000}
	t0 := time.Now()
	got, err := MultiOracle(mt, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d modes × 27 batch vectors in %v: %v %s %v", mt.Len(), time.Since(t0), got.Feasible, got.Best.Mode, got.Best.Batches())
	if !got.Feasible || len(got.Best.Streams) != 3 {
		t.Fatalf("three streams with room: %+v, want a feasible plan for all three", got)
	}
	for i, s := range got.Best.Streams {
		if s.LatencyMS > b.Streams[i].LatencyMS {
			t.Errorf("stream %s: latency %.1f ms over its %v ms budget in a plan called feasible", s.Name, s.LatencyMS, b.Streams[i].LatencyMS)
		}
	}
	// Bad input: one budget for three streams, an unknown workload, a workload twice.
	if _, err := MultiOracle(mt, plan.MultiBudgets{Streams: b.Streams[:1], PowerMW: 30000}); err == nil {
		t.Error("one stream budget for three streams accepted")
	}
	if _, err := truthprof.NewMultiTruth(tab, []string{"net-train"}, []string{"nope"}, nil); err == nil {
		t.Error("unknown inference workload accepted")
	}
	if _, err := truthprof.NewMultiTruth(tab, []string{"net-train"}, []string{"cls-infer", "cls-infer"}, nil); err == nil {
		t.Error("a stream listed twice accepted")
	}
}

// The several-stream sweep: its layout, a baseline that profiles every mode of the space
// without noise decides exactly as the oracle, the answers do not depend on the workers,
// and the searchers that plan one stream are refused.
func TestMultiBench(t *testing.T) {
	tab := streamsTable(t)
	spec := BenchSpec{Truth: tab, Streams: 2, RatesRPS: []float64{5, 20}, LatenciesMS: []float64{150, 400}, PowersMW: []float64{16000, 30000},
		Searchers: []string{"oracle", "random-432", "preset", "random-5"}, Seed: 3, Parallel: 1,
		Presets: []powermode.Mode{{Cores: 4, CPUKHz: 1200000, GPUHz: 700000000, EMCHz: 2133000000}, {Cores: 8, CPUKHz: 2200000, GPUHz: 1300000000, EMCHz: 3199000000}}}
	rep, err := RunBench(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	// One trainer × the three pairs of three inference workloads × 2 × 2 × 2.
	if rep.Pairs != 3 || rep.Streams != 2 || rep.ConfigsTotal != 24 || len(rep.Searchers) != 4 {
		t.Fatalf("sets %d, streams %d, configs %d, rows %d; want 3, 2, 24, 4", rep.Pairs, rep.Streams, rep.ConfigsTotal, len(rep.Searchers))
	}
	if rep.ConfigsOracleInfeasible == 0 || rep.ConfigsOracleInfeasible == rep.ConfigsTotal {
		t.Fatalf("%d of %d configurations unsatisfiable: the sweep should have both kinds", rep.ConfigsOracleInfeasible, rep.ConfigsTotal)
	}
	all := rep.Searchers[1]
	if all.WithinBudgetPct != 100 || math.Abs(all.MeanOptRatio-1) > 1e-12 || all.MaxProfiles != 432 || all.FalseClaimPct != 0 {
		t.Errorf("random-432 without noise: %+v, want every satisfiable configuration at the oracle's optimum", all)
	}
	for _, o := range rep.Outcomes[3] {
		if o.Ratio > 1+1e-12 || (o.Status == "within") != (o.Ratio > 0) {
			t.Errorf("random-5: status %s with ratio %v", o.Status, o.Ratio)
		}
	}
	spec.Noise, spec.Rules = 0.03, plan.Rules{NoiseRel: 0.03, Confidence: 0.99, Admission: plan.Admission{MarginMS: 5, DevRel: 0.06}}
	one, err := RunBench(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	spec.Parallel = 4
	four, err := RunBench(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	for s := range one.Outcomes {
		for c := range one.Outcomes[s] {
			if a, b := one.Outcomes[s][c], four.Outcomes[s][c]; a.Status != b.Status || a.Ratio != b.Ratio {
				t.Fatalf("searcher %d config %d: %s %v with one worker, %s %v with four", s, c, a.Status, a.Ratio, b.Status, b.Ratio)
			}
		}
	}
	// The margin oracles keep the admission room, so even oracle-m0 may lose
	// configurations to it; oracle-m3 claims no more than oracle-m0, and neither
	// violates. Without the room oracle-m0 is the oracle itself.
	spec.Searchers, spec.Parallel = []string{"oracle-m0", "oracle-m3"}, 2
	mo, err := RunBench(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	m0, m3 := mo.Searchers[0], mo.Searchers[1]
	if m3.WithinBudgetPct > m0.WithinBudgetPct || m3.MeanOptRatio > m0.MeanOptRatio || m0.ViolationPct != 0 || m3.ViolationPct != 0 || m0.MeanOptRatio > 1 {
		t.Errorf("margin oracles: m0 %+v, m3 %+v; want m3 ≤ m0 ≤ the oracle, no violations", m0, m3)
	}
	spec.Rules = plan.Rules{}
	exact, err := RunBench(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if e := exact.Searchers[0]; e.WithinBudgetPct != 100 || math.Abs(e.MeanOptRatio-1) > 1e-12 {
		t.Errorf("oracle-m0 without the admission room: %+v, want the oracle itself", e)
	}
	if exact.Searchers[1].WithinBudgetPct < m3.WithinBudgetPct {
		t.Errorf("oracle-m3 without the room (%.1f%%) claims less than with it (%.1f%%)", exact.Searchers[1].WithinBudgetPct, m3.WithinBudgetPct)
	}
	spec.Searchers = []string{"nope"}
	if _, err := RunBench(context.Background(), spec); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("an unknown searcher with two streams: err %v", err)
	}
}

// GMD and ALS with several streams run as fulcrumd runs them: the search walks the pooled
// pair while every workload is measured at each mode, then the joint decision. Their
// answers are the decision's (never above the oracle; within exactly when scored so),
// each mode costs one profile per workload beyond the pair, and the results do not depend
// on the workers.
func TestMultiBenchGMDALS(t *testing.T) {
	tab := streamsTable(t)
	spec := BenchSpec{Truth: tab, Streams: 2, RatesRPS: []float64{5, 20}, LatenciesMS: []float64{150, 400}, PowersMW: []float64{16000, 30000},
		Searchers: []string{"oracle", "gmd", "als", "random-432"}, Seed: 3, Parallel: 1, Noise: 0.03,
		Rules:   plan.Rules{NoiseRel: 0.03, Confidence: 0.99, Admission: plan.Admission{MarginMS: 5, DevRel: 0.06}},
		Presets: []powermode.Mode{{Cores: 4, CPUKHz: 1200000, GPUHz: 700000000, EMCHz: 2133000000}, {Cores: 8, CPUKHz: 2200000, GPUHz: 1300000000, EMCHz: 3199000000}}}
	one, err := RunBench(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	for si, name := range []string{"gmd", "als"} {
		st := one.Searchers[si+1]
		if st.Name != name || st.WithinBudgetPct == 0 {
			t.Errorf("%s with two streams: %+v, want answers within the budgets", name, st)
		}
		for _, o := range one.Outcomes[si+1] {
			if o.Ratio > 1+1e-12 || (o.Status == "within") != (o.Ratio > 0) {
				t.Errorf("%s: status %s with ratio %v", name, o.Status, o.Ratio)
			}
			if o.Err != nil {
				t.Errorf("%s: %v", name, o.Err)
			}
		}
	}
	// GMD asks for ≤ 15 modes (repeats included), each measured for both streams.
	for _, o := range one.Outcomes[1] {
		if o.Profiles < 2 || o.Profiles > 30 || o.Profiles%2 != 0 {
			t.Errorf("gmd with two streams counted %d profiles, want 2 per mode asked for, ≤ 15 modes", o.Profiles)
		}
	}
	spec.Parallel = 4
	four, err := RunBench(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	for s := range one.Outcomes {
		for c := range one.Outcomes[s] {
			if a, b := one.Outcomes[s][c], four.Outcomes[s][c]; a.Status != b.Status || a.Ratio != b.Ratio || a.Profiles != b.Profiles {
				t.Fatalf("searcher %d config %d: %s %v %d with one worker, %s %v %d with four", s, c, a.Status, a.Ratio, a.Profiles, b.Status, b.Ratio, b.Profiles)
			}
		}
	}
}

// Two training jobs sharing the training time with two streams: GMD (over the pooled
// pair, every workload measured) and a baseline that profiles every mode without noise,
// against the oracle.
func TestMultiBenchJobs(t *testing.T) {
	v := benchgen.Small()
	v.Workloads = append(v.Workloads, benchgen.Workload{Name: "lm-train", Role: truth.Train, Batches: []int{16}, BaseMS: 60, BatchSlope: 1, GPU: 0.6, EMC: 0.3, CPU: 0.1, NeedCores: 2, Activity: 0.9},
		benchgen.Workload{Name: "cls-infer", Role: truth.Infer, Batches: []int{1, 2, 4, 8}, BaseMS: 14, BatchSlope: 0.5, GPU: 0.7, EMC: 0.2, CPU: 0.1, NeedCores: 2, Activity: 0.85})
	tab, err := benchgen.Table(v)
	if err != nil {
		t.Fatal(err)
	}
	spec := BenchSpec{Truth: tab, Streams: 2, Jobs: 2, RatesRPS: []float64{5, 20}, LatenciesMS: []float64{150, 400}, PowersMW: []float64{16000, 30000},
		Searchers: []string{"oracle", "random-432", "gmd"}, Seed: 3, Parallel: 2}
	rep, err := RunBench(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Pairs != 1 || rep.Jobs != 2 || rep.Streams != 2 || rep.ConfigsTotal != 8 {
		t.Fatalf("sets %d, jobs %d, streams %d, configs %d; want 1, 2, 2, 8", rep.Pairs, rep.Jobs, rep.Streams, rep.ConfigsTotal)
	}
	if all := rep.Searchers[1]; all.WithinBudgetPct != 100 || math.Abs(all.MeanOptRatio-1) > 1e-12 {
		t.Errorf("random-432 without noise: %+v, want the oracle", all)
	}
	for _, o := range rep.Outcomes[2] {
		if o.Ratio > 1+1e-12 || (o.Status == "within") != (o.Ratio > 0) || o.Err != nil {
			t.Errorf("gmd: status %s ratio %v err %v", o.Status, o.Ratio, o.Err)
		}
	}
	if _, err := RunBench(context.Background(), BenchSpec{Truth: tab, Jobs: 3, RatesRPS: []float64{5}, LatenciesMS: []float64{150}, PowersMW: []float64{16000}, Searchers: []string{"oracle"}}); err == nil || !strings.Contains(err.Error(), "3 training jobs") {
		t.Errorf("3 jobs from a table with 2: %v", err)
	}
}
