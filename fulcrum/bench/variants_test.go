package bench_test

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench"
	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/benchgen"
	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// go test ./fulcrum/bench -run TestVariantsReport -variants -v prints the robustness table
// of docs/benchmarks.md (a few minutes on 2 cores); without the flag it is skipped
// with a message saying so.
var variantsFlag = flag.Bool("variants", false, "run the synthetic-variant robustness sweep and print its table")
var variantsSearchers = flag.String("variants-searchers", "oracle,gmd,gmd-m0,gmd-m2,gmd-m6,preset,maxn,random-15", "searchers for -variants")
var variantsNoise = flag.String("variants-noise", "0.01,0.03,0.08", "noise levels for -variants")
var variantsSeed = flag.Uint64("variants-seed", 1, "seed for -variants")
var variantsConfidence = flag.Float64("variants-confidence", 0, "decision confidence for -variants (0: fulcrumd's default)")

func TestVariantsReport(t *testing.T) {
	if !*variantsFlag {
		t.Skip("robustness sweep: pass -variants to run it (prints the docs/benchmarks.md table)")
	}
	for _, v := range benchgen.Variants() {
		tab, err := benchgen.Table(v)
		if err != nil {
			t.Fatal(err)
		}
		names, presets := benchgen.Presets(v)
		for _, ns := range splitComma(*variantsNoise) {
			noise, err := strconv.ParseFloat(ns, 64)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := bench.RunBench(context.Background(), bench.BenchSpec{
				Truth: tab, RatesRPS: []float64{5, 15, 30}, LatenciesMS: []float64{50, 100, 200, 400},
				PowersMW: []float64{15000, 20000, 30000, 40000}, Searchers: splitComma(*variantsSearchers),
				Noise: noise, Seed: *variantsSeed, Parallel: 2, Presets: presets, PresetNames: names,
				Rules: daemonRules(noise),
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range rep.Searchers {
				fmt.Printf("| %s | %d | %.2f | %s | %.1f | %.1f | %.1f | %.3f | %.3f | %.1f | %d |\n", v.Name, rep.ConfigsTotal-rep.ConfigsOracleInfeasible, noise, s.Name,
					s.WithinBudgetPct, s.ViolationPct, s.NoAnswerPct, s.MeanOptRatio, s.P5OptRatio, s.MeanProfiles, s.MaxProfiles)
			}
		}
	}
}

// daemonRules are fulcrumd's decision rules with the decision assuming the sweep's noise,
// as `fulcrumctl bench` decides by default.
func daemonRules(noise float64) plan.Rules {
	r := control.DecisionRules(control.DefaultConfig(), sched.DefaultConfig())
	r.NoiseRel = noise
	if *variantsConfidence > 0 {
		r.Confidence = *variantsConfidence
	}
	return r
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}
