package control

import (
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// TestProbeTradesAKnobWhereOneLevelUpBrokePower: from a confirmed mode whose only faster
// neighbour (the GPU one level up; the CPU and memory clocks are at their top) was
// measured over the power budget, the probe is that GPU level with the memory clock one
// level down; once that is probed, with online cores one level down. Without the
// over-budget record the GPU level up itself is probed, and the trial rule takes a trade
// as a neighbour (isTrade). Before, nothing was probed from such a mode: the AGX
// lifetime sweep's 10 req/s, 150 ms, 20 W climbed the CPU clock at 4 cores, GPU 714 MHz,
// memory 2133–3199 MHz while its optimum runs GPU 918 MHz at memory 665.6 MHz.
func TestProbeTradesAKnobWhereOneLevelUpBrokePower(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	e.seed()
	c := e.controller(Config{Refine: DefaultRefineOptions()}, plan.Targets{LatencyMS: 400, PowerMW: 60000, RateRPS: 20})
	e.board.set(20000, nil)
	e.register(nil)
	e.tick(c, 300*time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pair == nil {
		t.Fatal("no pair")
	}
	sp := c.board.Space()
	from := e.modes[1] // 12 cores, CPU and memory clocks at their top, GPU 612 MHz
	idx, ok := sp.Index(from)
	if !ok {
		t.Fatalf("mode %s not in the space", from.Human())
	}
	at := func(d powermode.Index) powermode.Mode {
		n := idx
		for k := range n {
			n[k] += d[k]
		}
		return sp.Mode(n)
	}
	gpuUp := at(powermode.Index{0, 0, 1, 0})
	cs := plan.MultiScored{MultiEval: plan.MultiEval{Mode: from, PowerMW: 30000}}
	if m, ok := c.probeCandidate(cs); !ok || m != gpuUp {
		t.Fatalf("without a record over the budget: probe %s (%v), want the GPU level up %s", m.Human(), ok, gpuUp.Human())
	}
	lp := c.liveProfiler(*c.pair, 60000, 400, nil, "")
	lp.loadOver()
	lp.over[gpuUp] = OverBudget{Mode: gpuUp, PowerMW: 61000, BudgetMW: 60000, At: e.clock.Now()}
	if err := lp.saveOver(); err != nil {
		t.Fatal(err)
	}
	trade := at(powermode.Index{0, 0, 1, -1})
	if m, ok := c.probeCandidate(cs); !ok || m != trade {
		t.Fatalf("the GPU level up over the budget: probe %s (%v), want it with the memory clock one level down %s", m.Human(), ok, trade.Human())
	}
	if !isTrade(sp, from, trade) || isTrade(sp, from, gpuUp) || isTrade(sp, from, at(powermode.Index{0, 0, 2, -1})) || isTrade(sp, from, at(powermode.Index{-1, 0, 1, -1})) ||
		!isTrade(sp, from, at(powermode.Index{-1, 0, 1, 0})) || isTrade(sp, from, at(powermode.Index{0, -1, 1, 0})) || isTrade(sp, from, at(powermode.Index{0, 0, 1, -2})) {
		t.Fatal("isTrade: want the GPU clock one level up and the memory clock or online cores one level down, nothing else")
	}
	c.ref.probed = map[powermode.Mode]bool{trade: true}
	c.ref.probedMW = c.targets.PowerMW
	next := at(powermode.Index{-1, 0, 1, 0})
	if m, ok := c.probeCandidate(cs); !ok || m != next {
		t.Fatalf("that trade probed: probe %s (%v), want the GPU level up with a core level down %s", m.Human(), ok, next.Human())
	}
}
