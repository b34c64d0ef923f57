package search

import (
	"slices"
	"strings"
	"testing"
)

func TestRegistryNames(t *testing.T) {
	for _, n := range []string{"gmd", "gmd-m0", "gmd-m4-p8-b20", "maxn", "preset", "random-15", "als"} {
		s, err := New(n, Env{})
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		if s.Name() != n {
			t.Errorf("%s: got %T named %s", n, s, s.Name())
		}
	}
	if s, _ := New("als", Env{}); s != nil {
		if _, ok := s.(PairLearner); !ok {
			t.Errorf("als: %T is not a PairLearner", s)
		}
	}
	for name, want := range map[string]GMDOptions{
		"gmd-c0-f0":  {Confirm: -1, FallbackSigmas: []float64{}},
		"gmd-c4-f5":  {Confirm: 4, FallbackSigmas: []float64{0.5}},
		"gmd-s0-f10": {NoSmooth: true, FallbackSigmas: []float64{1}},
	} {
		got, err := ParseGMDName(name)
		if err != nil || got.Confirm != want.Confirm || got.NoSmooth != want.NoSmooth || !slices.Equal(got.FallbackSigmas, want.FallbackSigmas) || (got.FallbackSigmas == nil) != (want.FallbackSigmas == nil) {
			t.Errorf("%s: %+v (%v), want %+v", name, got, err, want)
		}
	}
	for name, want := range map[string]Spec{
		"oracle":     {Name: "oracle", Kind: KindOracle},
		"oracle-m3":  {Name: "oracle-m3", Kind: KindMarginOracle, MarginRel: 0.03},
		"random-7":   {Name: "random-7", Kind: KindRandom, RandomK: 7},
		"gmd-m6-b20": {Name: "gmd-m6-b20", Kind: KindGMD, GMD: GMDOptions{Margin: 0.06, MaxProfiles: 20}},
	} {
		if got, err := Parse(name); err != nil || got.Name != want.Name || got.Kind != want.Kind || got.MarginRel != want.MarginRel || got.RandomK != want.RandomK || got.GMD.Margin != want.GMD.Margin || got.GMD.MaxProfiles != want.GMD.MaxProfiles {
			t.Errorf("Parse(%s) = %+v, %v; want %+v", name, got, err, want)
		}
	}
	for name, want := range map[string]string{
		"gmd-x3":      "-f<fallback margin",
		"oracle":      "noise-free truth",
		"oracle-m3":   "noise-free truth",
		"oracle-m":    "oracle-m<margin percent>",
		"random-0":    "random-<K>",
		"magic":       "unknown searcher",
		"gmd-m60":     "gmd followed by",
		"oracle-m100": "oracle-m<margin percent>",
	} {
		if _, err := New(name, Env{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New(%s): %v, want it to mention %q", name, err, want)
		}
	}
	for name, ok := range map[string]bool{"gmd": true, "als": true, "gmd-m4": false, "preset": false, "": false} {
		if err := CheckLive(name); (err == nil) != ok {
			t.Errorf("CheckLive(%q) = %v, want ok %v", name, err, ok)
		}
	}
}
