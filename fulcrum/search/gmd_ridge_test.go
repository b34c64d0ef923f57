package search

import (
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// ridgeWalk is a walk over an AGX-like space (2–12 cores, 3 CPU, 4 GPU and 3 EMC levels)
// at 10 req/s within 200 ms and 20 W, with the decision's rules, knowing nothing yet.
func ridgeWalk(t *testing.T) *walk {
	t.Helper()
	sp, err := powermode.NewSpace(powermode.Levels{Cores: []int{2, 4, 6, 8, 10, 12}, CPUKHz: []int64{729600, 1497600, 2201600},
		GPUHz: []int64{612e6, 714e6, 816e6, 918e6}, EMCHz: []int64{665600000, 2133000000, 3199000000}})
	if err != nil {
		t.Fatal(err)
	}
	p := Problem{Space: sp, Train: "t", Infer: "i", TrainBatch: 32, InferBatches: []int{1},
		Budgets: plan.Budgets{RateRPS: 10, LatencyMS: 200, PowerMW: 20000}, NoiseRel: 0.03, Rules: benchRules()}
	return NewGMD(GMDOptions{}).newWalkForTest(t, p)
}

// profileAtIdx is a profile of the mode at idx: a training turn of trainMS drawing
// trainW watts beside a 5 ms inference batch drawing 12 W.
func profileAtIdx(w *walk, idx powermode.Index, trainMS, trainW float64) plan.ModeProfile {
	return plan.ModeProfile{Mode: w.sp.Mode(idx), Train: plan.TrainPoint{Batch: 32, TimeMS: trainMS, PowerMW: trainW * 1000},
		Infer: []plan.InferPoint{{Batch: 1, TimeMS: 5, PowerMW: 12000}}}
}

// TestFreePowerStep: where latency binds through the training turn (220 ms) and the power
// budget caps the GPU clock (the mode a GPU level up, every other knob the same or lower,
// draws 24 W with training), GMD's next candidates are the GPU clock one level up with
// half the cores and the EMC level below, then with half the cores, then with half the
// cores and half the CPU clock, then with the EMC level below — each once. Without the
// power cap, or where latency does not bind, the rule does not fire; having moved by it,
// it fires again without new evidence of the cap.
func TestFreePowerStep(t *testing.T) {
	w := ridgeWalk(t)
	cur := powermode.Index{5, 2, 1, 2} // 12 cores, 2201.6 MHz, GPU 714 MHz, EMC 3199 MHz
	w.known = append(w.known, profileAtIdx(w, cur, 220, 15))
	if c, ok := w.freePowerStep(cur, false); ok {
		t.Fatalf("no mode known over power at a higher GPU clock, yet the rule proposed %s", w.sp.Mode(c).Human())
	}
	// Over power one GPU level up with fewer cores and a lower CPU clock: the cap holds
	// at cur's cores and clock too.
	w.known = append(w.known, profileAtIdx(w, powermode.Index{4, 1, 2, 2}, 180, 24))
	want := []powermode.Index{{2, 2, 2, 1}, {2, 2, 2, 2}, {2, 0, 2, 2}, {5, 2, 2, 1}}
	for i, x := range want {
		c, ok := w.freePowerStep(cur, false)
		if !ok || c != x {
			t.Fatalf("candidate %d: %v %v, want %s", i+1, w.sp.Mode(c).Human(), ok, w.sp.Mode(x).Human())
		}
		w.known = append(w.known, profileAtIdx(w, c, 230, 18))
	}
	if c, ok := w.freePowerStep(cur, false); ok {
		t.Fatalf("every candidate known, yet the rule proposed %s", w.sp.Mode(c).Human())
	}
	// Where latency does not bind (a 100 ms turn), the rule does not fire.
	w2 := ridgeWalk(t)
	w2.known = append(w2.known, profileAtIdx(w2, cur, 100, 15), profileAtIdx(w2, powermode.Index{5, 2, 2, 2}, 90, 24))
	if c, ok := w2.freePowerStep(cur, false); ok {
		t.Fatalf("latency does not bind, yet the rule proposed %s", w2.sp.Mode(c).Human())
	}
	// Reached by the rule: it goes on (GPU one more level, cores halved again) without
	// new evidence of the cap.
	w3 := ridgeWalk(t)
	at := powermode.Index{2, 2, 2, 1} // 6 cores, GPU 816 MHz, EMC 2133 MHz
	w3.known = append(w3.known, profileAtIdx(w3, at, 210, 17))
	if c, ok := w3.freePowerStep(at, true); !ok || c != (powermode.Index{0, 2, 3, 0}) {
		t.Fatalf("after a ridge move: %s %v, want 2c at GPU 918 MHz, EMC 665.6 MHz", w3.sp.Mode(c).Human(), ok)
	}
}

// TestKnownStart: a walk that inherits profiles starts at the known mode the decision
// ranks best — the claimable one with the most throughput over a faster one it cannot
// claim — and with nothing claimable at the least excess over the room.
func TestKnownStart(t *testing.T) {
	w := ridgeWalk(t)
	if _, ok := w.knownStart(); ok {
		t.Fatal("a start from no known profile")
	}
	slow, fast, fits := powermode.Index{1, 0, 0, 0}, powermode.Index{5, 2, 3, 2}, powermode.Index{0, 2, 2, 0}
	w.known = append(w.known, profileAtIdx(w, slow, 260, 10), profileAtIdx(w, fast, 120, 30))
	if s, ok := w.knownStart(); !ok || s != slow {
		t.Fatalf("nothing claimable: start %s, want the least excess %s", w.sp.Mode(s).Human(), w.sp.Mode(slow).Human())
	}
	w.known = append(w.known, profileAtIdx(w, fits, 150, 14))
	if s, ok := w.knownStart(); !ok || s != fits {
		t.Fatalf("start %s, want the claimable %s", w.sp.Mode(s).Human(), w.sp.Mode(fits).Human())
	}
}
