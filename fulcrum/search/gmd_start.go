package search

import (
	"math"
	"regexp"
	"slices"
	"strconv"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

var presetWatts = regexp.MustCompile(`(?i)(\d+(?:\.\d+)?)\s*W\b`)

// gmdStart picks GMD's first mode: among the presets other than MAXN (the top of
// every knob), the one with the highest nominal power (read from its nvpmodel name,
// MODE_30W → 30 W) within the power budget, else the lowest-power one. Without
// readable names it ranks presets by their mean relative level and takes the median.
// Without presets it starts in the middle of every knob.
func gmdStart(p Problem) powermode.Index {
	sp := p.Space
	dims := sp.Dims()
	top := powermode.Index{dims[0] - 1, dims[1] - 1, dims[2] - 1, dims[3] - 1}
	type cand struct {
		idx   powermode.Index
		watts float64 // NaN when unknown
		rank  float64
	}
	var cs []cand
	for i, m := range p.Presets {
		idx, ok := sp.Index(sp.Snap(m))
		if !ok || idx == top {
			continue
		}
		c := cand{idx: idx, watts: math.NaN()}
		for k := range powermode.NumKnobs {
			if dims[k] > 1 {
				c.rank += float64(idx[k]) / float64(dims[k]-1)
			}
		}
		if i < len(p.PresetNames) {
			if sm := presetWatts.FindStringSubmatch(p.PresetNames[i]); sm != nil {
				c.watts, _ = strconv.ParseFloat(sm[1], 64)
			}
		}
		cs = append(cs, c)
	}
	if len(cs) == 0 {
		mid := sp.Mode(powermode.Index{dims[0] / 2, dims[1] / 2, dims[2] / 2, dims[3] / 2})
		idx, _ := sp.Index(sp.Snap(mid))
		return idx
	}
	named := slices.DeleteFunc(slices.Clone(cs), func(c cand) bool { return math.IsNaN(c.watts) })
	if len(named) > 0 {
		slices.SortStableFunc(named, func(a, b cand) int { return cmpF(a.watts, b.watts) })
		pick := named[0]
		for _, c := range named {
			if c.watts*1000 <= p.Budgets.PowerMW {
				pick = c
			}
		}
		return pick.idx
	}
	slices.SortStableFunc(cs, func(a, b cand) int { return cmpF(a.rank, b.rank) })
	return cs[(len(cs)-1)/2].idx
}
