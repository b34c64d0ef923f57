package bench

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// A budget tour starts at the configuration's own budgets, moves every BudgetsEvery, never
// keeps a pair two stretches in a row, sees every pair of the sweep once before repeating,
// and depends on the seed and the configuration alone.
func TestBudgetTour(t *testing.T) {
	spec := LifetimeSpec{LatenciesMS: []float64{25, 50, 150}, PowersMW: []float64{20000, 30000}, Duration: 8 * time.Hour, BudgetsEvery: time.Hour, Seed: 1}
	type pair struct{ lat, pow float64 }
	tour := BudgetTour(spec, 50, 30000, 3)
	if len(tour) != 7 {
		t.Fatalf("%d changes in 8 h every hour, want 7 (at 1 h … 7 h)", len(tour))
	}
	prev := pair{50, 30000}
	seen := map[pair]int{prev: 0}
	for i, c := range tour {
		if c.At != time.Duration(i+1)*time.Hour || c.RateFactor != 0 {
			t.Fatalf("change %d: %+v", i, c)
		}
		p := pair{c.LatencyMS, c.PowerMW}
		if p == prev {
			t.Fatalf("change %d keeps the budgets %+v", i, p)
		}
		if !slices.Contains(spec.LatenciesMS, p.lat) || !slices.Contains(spec.PowersMW, p.pow) {
			t.Fatalf("change %d: %+v is not a swept pair", i, p)
		}
		if i < 5 {
			if _, ok := seen[p]; ok {
				t.Fatalf("change %d repeats %+v before the 6 pairs were all seen", i, p)
			}
		}
		seen[p]++
		prev = p
	}
	if len(seen) != 6 {
		t.Fatalf("8 h saw %d of the 6 pairs", len(seen))
	}
	// The tour starts over: the 6th change is back at the start.
	if tour[5].LatencyMS != 50 || tour[5].PowerMW != 30000 {
		t.Fatalf("change 6 %+v, want the tour's start again", tour[5])
	}
	if !slices.Equal(tour, BudgetTour(spec, 50, 30000, 3)) {
		t.Fatal("the same seed and configuration drew another tour")
	}
	differ := false
	for ci := range 8 {
		differ = differ || !slices.Equal(tour, BudgetTour(spec, 50, 30000, ci))
	}
	spec.Seed = 2
	if !differ || slices.Equal(tour, BudgetTour(spec, 50, 30000, 3)) {
		t.Fatal("the tour does not depend on the configuration and the seed")
	}
}

// With the budgets moving every 10 min, every run is handed its configuration's tour, the
// denominator follows it, the held oracle breaks budgets its t = 0 choice cannot keep,
// the re-planning oracle keeps them all, and the report shows each configuration's tour.
func TestRunLifetimeBudgetsEvery(t *testing.T) {
	tab := lifeTable(t)
	s := &standIn{}
	spec := lifeSpec(tab, s.run)
	spec.Methods = []string{"gmd", "oracle-m3", "oracle-m3-replan"}
	spec.BudgetsEvery = 10 * time.Minute
	rep, err := RunLifetime(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if rep.BudgetsEveryS != 600 || len(rep.Configurations) != 16 {
		t.Fatalf("budgets every %v s, %d configurations", rep.BudgetsEveryS, len(rep.Configurations))
	}
	for _, r := range s.runs {
		if len(r.Changes) != 5 {
			t.Fatalf("run %s handed %d changes, want 5", r.Method, len(r.Changes))
		}
	}
	heldBroke := false
	for ci, row := range rep.Configurations {
		if len(row.Tour) != 5 || row.Tour[0].AtS != 600 {
			t.Fatalf("%s: tour %+v", row.Config, row.Tour)
		}
		// The denominator is the stretches' optima summed.
		c := &lifeConfig{}
		cfgs, _, _, err := lifeConfigs(spec)
		if err != nil {
			t.Fatal(err)
		}
		*c = cfgs[ci]
		want := 0.0
		for _, ph := range phasesOf(spec.Duration, c.rate, c.latMS, c.powMW, BudgetTour(spec, c.latMS, c.powMW, ci)) {
			sps, _, err := c.best(ph, 0, spec.Admission, 0.99)
			if err != nil {
				t.Fatal(err)
			}
			want += sps * ph.lenS
		}
		if !near(row.IdealSamples, want) {
			t.Fatalf("%s: ideal %v, the tour's stretches give %v", row.Config, row.IdealSamples, want)
		}
		held, replan := rep.Outcomes[1][ci], rep.Outcomes[2][ci]
		heldBroke = heldBroke || held.LatencyBrokenS+held.PowerBrokenS > 0
		if replan.LatencyBrokenS+replan.PowerBrokenS > 0 {
			t.Fatalf("%s: the re-planning oracle broke a budget (%v s latency, %v s power)", row.Config, replan.LatencyBrokenS, replan.PowerBrokenS)
		}
		// Each stretch's ratio is that stretch's samples over its optimum: weighted back
		// by the optima they give the run's samples.
		rr := row.Runs[2]
		if len(rr.PhaseRatios) != 6 {
			t.Fatalf("%s: %d phase ratios, want 6 stretches", row.Config, len(rr.PhaseRatios))
		}
		sum := 0.0
		for i, ph := range phasesOf(spec.Duration, c.rate, c.latMS, c.powMW, BudgetTour(spec, c.latMS, c.powMW, ci)) {
			sps, _, _ := c.best(ph, 0, spec.Admission, 0.99)
			if x := rr.PhaseRatios[i]; x != nil {
				sum += *x * sps * ph.lenS
			} else if sps > 0 {
				t.Fatalf("%s: stretch %d has an optimum but no ratio", row.Config, i)
			}
		}
		if !near(sum, replan.TrainSamples) {
			t.Fatalf("%s: phase ratios weigh back to %v samples, the run trained %v", row.Config, sum, replan.TrainSamples)
		}
		if row.IdealSamples > 0 && replan.TrainSamples > row.IdealSamples*(1+1e-9) {
			t.Fatalf("%s: the 3 %% oracle trained %v, above the room-keeping optimum %v", row.Config, replan.TrainSamples, row.IdealSamples)
		}
	}
	if !heldBroke {
		t.Fatal("no held t = 0 decision broke a budget the tour moved")
	}
	// By budgets: every stretch of every configuration once, under the budgets of the
	// sweep (4 pairs × 2 rates), summing back to the method's samples and the
	// configurations' optima. The stand-in runner (gmd here) reports no stretches: no
	// rows.
	for mi, st := range rep.Methods {
		if st.Source == "harness" {
			if st.ByBudgets != nil {
				t.Fatalf("%s: budget rows from runs without samples by stretch: %+v", st.Name, st.ByBudgets)
			}
			continue
		}
		if len(st.ByBudgets) != 8 {
			t.Fatalf("%s: %d budget rows, want 2 rates × 4 budget pairs: %+v", st.Name, len(st.ByBudgets), st.ByBudgets)
		}
		n, samples, ideal := 0, 0.0, 0.0
		for i, b := range st.ByBudgets {
			if !slices.Contains(spec.LatenciesMS, b.LatencyMS) || !slices.Contains(spec.PowersMW, b.PowerMW) || !slices.Contains(spec.RatesRPS, b.RateRPS) {
				t.Fatalf("%s: budget row %+v is not of the sweep", st.Name, b)
			}
			if i > 0 && st.ByBudgets[i-1].PowerMW > b.PowerMW {
				t.Fatalf("%s: budget rows not ordered by power", st.Name)
			}
			if (b.Ratio == nil) != (b.IdealSamples == 0) || (b.Ratio != nil && !near(*b.Ratio, b.TrainSamples/b.IdealSamples)) {
				t.Fatalf("%s: %+v", st.Name, b)
			}
			n += b.Stretches
			samples += b.TrainSamples
			ideal += b.IdealSamples
		}
		runSamples, runIdeal := 0.0, 0.0
		for _, o := range rep.Outcomes[mi] {
			runSamples += o.TrainSamples
			runIdeal += o.IdealSamples
		}
		if n != 16*6 || !near(samples, runSamples) || !near(ideal, runIdeal) {
			t.Fatalf("%s: %d stretches, %v samples, %v ideal by budgets; the runs: %d, %v, %v", st.Name, n, samples, ideal, 16*6, runSamples, runIdeal)
		}
	}
	js, err := json.Marshal(rep)
	if err != nil || !strings.Contains(string(js), `"tour":[{"at_s":600`) || !strings.Contains(string(js), `"budgets_every_s":600`) ||
		!strings.Contains(string(js), `"phase_ratios":[`) || !strings.Contains(string(js), `"by_budgets":[`) {
		t.Fatalf("JSON %v: %.300s", err, js)
	}

	for _, tc := range []struct {
		edit func(*LifetimeSpec)
		want string
	}{
		{func(s *LifetimeSpec) { s.BudgetsEvery = time.Hour }, "below the duration"},
		{func(s *LifetimeSpec) { s.BudgetsEvery = -time.Minute }, "below the duration"},
		{func(s *LifetimeSpec) { s.LatenciesMS, s.PowersMW = s.LatenciesMS[:1], s.PowersMW[:1] }, "two budget pairs"},
		{func(s *LifetimeSpec) { s.Methods = []string{"gmd-replan"} }, "only a margin oracle"},
	} {
		sp := lifeSpec(tab, s.run)
		sp.BudgetsEvery = 10 * time.Minute
		tc.edit(&sp)
		if _, err := RunLifetime(context.Background(), sp); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error saying %q", err, tc.want)
		}
	}
}
