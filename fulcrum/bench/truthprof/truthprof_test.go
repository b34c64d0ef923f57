package truthprof

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/internal/stats"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench/benchgen"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

func TestTruthProfilerExactWithoutNoise(t *testing.T) {
	tab, err := benchgen.Table(benchgen.Small())
	if err != nil {
		t.Fatal(err)
	}
	prof, err := NewTruthProfiler(tab, "net-train", "net-infer", 32, []int{1, 4}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := powermode.Mode{Cores: 4, CPUKHz: 1200000, GPUHz: 700000000, EMCHz: 2133000000}
	mp, err := prof.Profile(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range mp.Infer {
		r, ok := tab.Lookup(truthKey("net-infer", "infer", m, ip.Batch))
		if !ok || r.TimeMS != ip.TimeMS || r.PowerMW != ip.PowerMW {
			t.Errorf("batch %d: got %+v, table %+v", ip.Batch, ip, r)
		}
	}
	if len(mp.Infer) != 2 || mp.Infer[0].Batch != 1 || mp.Infer[1].Batch != 4 {
		t.Errorf("inference batches %v, want [1 4]", mp.SortedBatches())
	}
	r, _ := tab.Lookup(truthKey("net-train", "train", m, 32))
	if mp.Train.TimeMS != r.TimeMS || mp.Train.PowerMW != r.PowerMW || mp.Train.Batch != 32 {
		t.Errorf("train %+v, table %+v", mp.Train, r)
	}
}

func TestTruthProfilerNoiseCountsAndForks(t *testing.T) {
	pt, _, _ := smallPair(t)
	prof, err := NewPairProfiler(pt, 0.05, rand.New(rand.NewPCG(3, 4)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var rel []float64
	for i := 0; i < pt.Len(); i += 3 {
		mp, err := prof.Profile(ctx, pt.ModeAt(i))
		if err != nil {
			t.Fatal(err)
		}
		tr := pt.ProfileAt(i)
		rel = append(rel, mp.Train.TimeMS/tr.Train.TimeMS-1, mp.Train.PowerMW/tr.Train.PowerMW-1)
		for j := range mp.Infer {
			rel = append(rel, mp.Infer[j].TimeMS/tr.Infer[j].TimeMS-1, mp.Infer[j].PowerMW/tr.Infer[j].PowerMW-1)
		}
	}
	mean, sd := stats.MeanStddev(rel)
	// 1440 draws of 0.05·N(0,1): the mean is within ±0.005 and the sd within 10%.
	if math.Abs(mean) > 0.005 || math.Abs(sd-0.05) > 0.005 {
		t.Errorf("relative noise mean %.4f sd %.4f, want ≈0 and ≈0.05", mean, sd)
	}
	n := prof.Count()
	again, _ := prof.Profile(ctx, pt.ModeAt(0))
	first := prof.Known()[0]
	if prof.Count() != n || again.Train != first.Train || again.Infer[0] != first.Infer[0] {
		t.Errorf("re-profiling a known mode changed the count (%d → %d) or the values", n, prof.Count())
	}
	if len(prof.Known()) != n {
		t.Errorf("Known has %d profiles, count %d", len(prof.Known()), n)
	}
	// A fork knows everything for free and counts only its own new modes.
	f := prof.Fork(rand.New(rand.NewPCG(5, 6)))
	if f.Count() != 0 || len(f.Known()) != n {
		t.Errorf("fork: count %d known %d, want 0 and %d", f.Count(), len(f.Known()), n)
	}
	if _, err := f.Profile(ctx, pt.ModeAt(1)); err != nil || f.Count() != 1 || prof.Count() != n {
		t.Errorf("fork profile: err %v, fork count %d, parent count %d (want 1, %d)", err, f.Count(), prof.Count(), n)
	}
	// Profiles handed out are copies: editing one does not change the store.
	k := prof.Known()[0]
	k.Infer[0].TimeMS = -1
	if prof.Known()[0].Infer[0].TimeMS < 0 {
		t.Error("Known returned shared slices")
	}
}

func TestTruthProfilerErrors(t *testing.T) {
	tab, err := benchgen.Table(benchgen.Small())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		train, infer string
		tb           int
		noise        float64
		want         string
	}{
		{"unknown train", "nope", "net-infer", 0, 0, "no training workload"},
		{"unknown infer", "net-train", "nope", 0, 0, "no inference workload"},
		{"missing batch", "net-train", "net-infer", 64, 0, "no mode with both"},
		{"bad noise", "net-train", "net-infer", 0, 0.9, "relative standard deviation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewTruthProfiler(tab, tc.train, tc.infer, tc.tb, nil, tc.noise, rand.New(rand.NewPCG(1, 1)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	prof, _ := NewTruthProfiler(tab, "net-train", "net-infer", 0, nil, 0, nil)
	if _, err := prof.Profile(context.Background(), powermode.Mode{Cores: 3, CPUKHz: 1, GPUHz: 1, EMCHz: 1}); err == nil || prof.Count() != 0 {
		t.Errorf("profile of a mode outside the table: err %v, count %d", err, prof.Count())
	}
}

// TestTruthProfilerCommonRandomNumbers: the noise of a measurement depends on the
// profiler's seed, the mode and the repeat number, not on the order modes are asked
// for, so two searchers given equal seeds see equal measurements. Remeasure gives a
// fresh, counted measurement and leaves Known alone; its average converges on the truth.
func TestTruthProfilerCommonRandomNumbers(t *testing.T) {
	pt, _, _ := smallPair(t)
	ctx := context.Background()
	a, _ := NewPairProfiler(pt, 0.03, rand.New(rand.NewPCG(9, 9)))
	b, _ := NewPairProfiler(pt, 0.03, rand.New(rand.NewPCG(9, 9)))
	modes := []powermode.Mode{pt.ModeAt(0), pt.ModeAt(5), pt.ModeAt(17), pt.ModeAt(pt.Len() - 1)}
	got := map[powermode.Mode]plan.ModeProfile{}
	for _, m := range modes {
		mp, err := a.Profile(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		got[m] = mp
	}
	for i := len(modes) - 1; i >= 0; i-- {
		mp, _ := b.Profile(ctx, modes[i])
		if mp.Train != got[modes[i]].Train || mp.Infer[0] != got[modes[i]].Infer[0] {
			t.Errorf("mode %s: order changed the measurement: %+v vs %+v", modes[i], mp.Train, got[modes[i]].Train)
		}
	}
	m := modes[1]
	first := got[m]
	n := a.Count()
	var sumT float64
	const reps = 400
	for r := range reps {
		mp, err := a.Remeasure(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if r == 0 && mp.Train == first.Train {
			t.Error("a repeat returned the first measurement again")
		}
		sumT += mp.Train.TimeMS
	}
	if a.Count() != n+reps {
		t.Errorf("count %d after %d repeats, want %d", a.Count(), reps, n+reps)
	}
	// Known now holds the mean of the repeats alone (as the live store does), not the
	// first measurement.
	if k := a.Known(); len(k) != len(modes) || k[1].Repeats != reps || math.Abs(k[1].Train.TimeMS-sumT/reps) > 1e-9*sumT {
		t.Errorf("after %d repeats Known has %d profiles, mode %s train %+v ×%d, want the repeats' mean %.4f ×%d", reps, len(k), m, k[1].Train, k[1].Repeats, sumT/reps, reps)
	}
	// 400 draws of 3%: the mean is within 0.6% (4 standard errors) of the truth.
	truthT := pt.ProfileAt(5).Train.TimeMS
	if rel := sumT/reps/truthT - 1; math.Abs(rel) > 0.006 {
		t.Errorf("mean of %d repeats is %.2f%% off the truth", reps, 100*rel)
	}
	// Repeats are numbered per mode: a fresh profiler with the same seed that profiles
	// m and then remeasures it draws what b draws for its first repeat of m.
	a2, _ := NewPairProfiler(pt, 0.03, rand.New(rand.NewPCG(9, 9)))
	a2.Profile(ctx, m)
	r1, _ := a2.Remeasure(ctx, m)
	b1, _ := b.Remeasure(ctx, m)
	if r1.Train != b1.Train || r1.Train == first.Train {
		t.Errorf("first repeat of %s: %+v and %+v, want equal and unlike the first measurement %+v", m, r1.Train, b1.Train, first.Train)
	}
	if _, err := a.Remeasure(ctx, powermode.Mode{Cores: 3, CPUKHz: 1, GPUHz: 1, EMCHz: 1}); err == nil {
		t.Error("remeasure of a mode outside the table: no error")
	}
}
