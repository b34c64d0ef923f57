package bench

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/benchtest"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/truthprof"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
)

func TestOracleMatchesBruteForce(t *testing.T) {
	pt, _, _ := benchtest.SmallPair(t)
	infeasible := 0
	for _, rate := range []float64{2, 20, 80} {
		for _, l := range []float64{40, 120, 300} {
			for _, pw := range []float64{9000, 16000, 26000, 40000} {
				b := plan.Budgets{RateRPS: rate, LatencyMS: l, PowerMW: pw}
				want, _ := benchtest.BruteForce(t, pt, b)
				got, err := Oracle(pt, b)
				if err != nil {
					t.Fatal(err)
				}
				if got.Feasible != want.Feasible || got.Choice.Mode != want.Mode || got.Choice.Batch != want.Batch || got.Choice.ThroughputSPS != want.ThroughputSPS {
					t.Errorf("%+v: oracle %v %s b%d θ %.3f, brute force %v %s b%d θ %.3f", b, got.Feasible, got.Choice.Mode, got.Choice.Batch, got.Choice.ThroughputSPS, want.Feasible, want.Mode, want.Batch, want.ThroughputSPS)
				}
				if !got.Feasible {
					infeasible++
				}
			}
		}
	}
	if infeasible == 0 || infeasible == 36 {
		t.Errorf("%d of 36 budget sets infeasible: the sweep should have both kinds", infeasible)
	}
}

// TestMarginOracle: with no margin it is the oracle; on the edge table (the fastest
// fitting mode at 99.5% of the power budget) a 1% margin passes it over for the next
// mode down, and a margin nothing fits with is no answer. It profiles nothing and
// refuses a profiler without the truth.
func TestMarginOracle(t *testing.T) {
	ctx := context.Background()
	pt := benchtest.EdgePair(t)
	p := problemOf(pt)
	p.Budgets = plan.Budgets{RateRPS: 5, LatencyMS: 1000, PowerMW: 20000}
	want, err := Oracle(pt, p.Budgets)
	if err != nil {
		t.Fatal(err)
	}
	prof, _ := truthprof.NewPairProfiler(pt, 0.03, rand.New(rand.NewPCG(1, 1)))
	for _, tc := range []struct {
		margin  float64
		gpuHz   int64
		found   bool
		isExact bool
	}{{0, 0, true, true}, {0.01, 600000000, true, false}, {0.6, 0, false, false}} {
		res, err := NewMarginOracle(pt, tc.margin).Search(ctx, p, prof)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case res.Found != tc.found || res.Feasible != tc.found:
			t.Errorf("margin %g: found %v feasible %v, want %v", tc.margin, res.Found, res.Feasible, tc.found)
		case tc.isExact && res.Choice != want.Choice:
			t.Errorf("margin 0: %+v, oracle %+v", res.Choice, want.Choice)
		case tc.gpuHz != 0 && res.Choice.Mode.GPUHz != tc.gpuHz:
			t.Errorf("margin %g: chose %s, want the %d Hz GPU level", tc.margin, res.Choice.Mode, tc.gpuHz)
		}
	}
	if prof.Count() != 0 {
		t.Errorf("the margin oracle profiled %d modes", prof.Count())
	}
	if _, err := (&MarginOracle{MarginRel: 0.02}).Search(ctx, p, prof); err == nil || !strings.Contains(err.Error(), "no ground truth") {
		t.Errorf("without the truth: %v", err)
	}
	if o := NewMarginOracle(pt, 0.045); o.Name() != "oracle-m4.5" {
		t.Errorf("name %q, want oracle-m4.5", o.Name())
	}
}
