package search

import (
	"context"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/benchtest"
	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/truthprof"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// A board whose mode fulcrumd cannot change (a discrete GPU through NVML without
// clock_control) offers a space of one mode: GMD (fulcrumd's default searcher) profiles
// it and decides the batch there. ALS needs two modes to fit its surrogates and says so.
func TestSearchersOnAOneModeSpace(t *testing.T) {
	pt, names, presets := benchtest.SmallPair(t)
	at := pt.ModeAt(pt.Len() / 2)
	one, err := powermode.NewSubspace([]powermode.Mode{at})
	if err != nil {
		t.Fatal(err)
	}
	b := plan.Budgets{RateRPS: 5, LatencyMS: 300, PowerMW: 40000}
	for _, name := range []string{"gmd", "als"} {
		if name == "als" {
			prof, _ := truthprof.NewPairProfiler(pt, 0, nil)
			p := smallProblem(pt, names, presets, b)
			p.Space, p.Presets = one, []powermode.Mode{at}
			if _, err := NewALS(ALSOptions{}).Search(context.Background(), p, prof); err == nil || !strings.Contains(err.Error(), "too few modes") {
				t.Errorf("als on one mode: %v; want the error naming too few modes", err)
			}
			continue
		}
		prof, _ := truthprof.NewPairProfiler(pt, 0, nil)
		p := smallProblem(pt, names, presets, b)
		p.Space, p.Presets = one, []powermode.Mode{at}
		res, err := NewGMD(GMDOptions{}).Search(context.Background(), p, prof)
		if err != nil {
			t.Fatalf("%s on one mode: %v", name, err)
		}
		for _, m := range res.Profiled {
			if m != at {
				t.Errorf("%s profiled %s, outside the one-mode space %s", name, m.Human(), at.Human())
			}
		}
		if !res.Found || res.Choice.Mode != at {
			t.Errorf("%s on one mode: found %v, chose %s; want a choice at %s", name, res.Found, res.Choice.Mode.Human(), at.Human())
		}
	}
}
