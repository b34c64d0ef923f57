package benchgen

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

func TestVariantsAreDeterministicAndComplete(t *testing.T) {
	for _, v := range Variants() {
		a, err := Generate(v)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Generate(v)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: two generations differ", v.Name)
		}
		tab, err := truth.NewTable(a)
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		sp, _ := powermode.NewSpace(v.Board.Levels)
		modes := len(tab.Modes())
		if v.Keep == 1 && modes != sp.Size() {
			t.Errorf("%s: %d modes, want the full grid %d", v.Name, modes, sp.Size())
		}
		if v.Keep < 1 {
			if frac := float64(modes) / float64(sp.Size()); frac < v.Keep-0.05 || frac > v.Keep+0.05 {
				t.Errorf("%s: kept %.2f of the grid, want ≈%.2f", v.Name, frac, v.Keep)
			}
		}
		if len(tab.Workloads(truth.Train)) != 2 || len(tab.Workloads(truth.Infer)) != 2 {
			t.Errorf("%s: workloads %v %v", v.Name, tab.Workloads(truth.Train), tab.Workloads(truth.Infer))
		}
		names, presets := Presets(v)
		for i, m := range presets[:3] {
			var w float64
			if _, err := fmt.Sscanf(names[i], "MODE_%gW", &w); err != nil || w <= 0 {
				t.Errorf("%s: preset %q has no wattage", v.Name, names[i])
			}
			if !sp.Contains(m) {
				t.Errorf("%s: preset %s is not on the grid", v.Name, m)
			}
		}
	}
}

// The leaky board's GPU leakage below its voltage floor makes power non-monotone in the
// GPU clock, and a GPU plateau makes time flat above it: the shapes the variants exist for.
func TestShapes(t *testing.T) {
	var v Variant
	for _, x := range Variants() {
		if x.Name == "plateau-leaky" {
			v = x
		}
	}
	v.Keep = 1
	w := v.Workloads[0] // convnet-plateau: plateau at 0.6 of the top GPU clock
	l := v.Board.Levels
	at := func(gi int) (float64, float64) {
		m := powermode.Mode{Cores: 8, CPUKHz: l.CPUKHz[20], GPUHz: l.GPUHz[gi], EMCHz: l.EMCHz[3]}
		return point(&v.Board, &w, m, 32)
	}
	t0, p0 := at(0)
	_, p2 := at(2)
	if p0 <= p2 {
		t.Errorf("power at the lowest GPU clock %.0f mW is not above the third level's %.0f mW", p0, p2)
	}
	tTop, _ := at(len(l.GPUHz) - 1)
	tHigh, _ := at(len(l.GPUHz) - 2)
	if tTop != tHigh || t0 <= tTop {
		t.Errorf("times: lowest %.1f, second-highest %.1f, top %.1f: want a plateau at the top", t0, tHigh, tTop)
	}
}
