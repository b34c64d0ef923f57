package search

import (
)

// PairLearner is a searcher that learns a workload pair once (an offline campaign, e.g.
// ALS fitting its surrogates and Pareto set) and then answers many budget
// configurations of that pair with few confirming profiles each. The benchmark calls
// Learn once per pair and Answer once per configuration of the pair.
type PairLearner interface {
	Name() string
	// Learn runs the campaign. p has no Budgets (zero value); p.MaxProfiles caps the
	// campaign's profiles (0: the learner's default); p.Seed seeds its randomness.
	Learn(ctx context.Context, p Problem, prof Profiler) (Answerer, error)
}

// Answerer answers budget configurations of the pair it was learned on.
//
// The benchmark calls Answer for the configurations of one pair sequentially, from one
// goroutine (Answerers of different pairs run concurrently). prof knows every profile
// of the campaign (free) and counts each new mode it measures as a confirming profile
// of this configuration; each configuration gets its own prof, so a confirming profile
// taken for one configuration is not visible to the next (results do not depend on
// scheduling). Result.Profiled lists the confirming profiles only.
type Answerer interface {
	Answer(ctx context.Context, b Budgets, prof Profiler) (Result, error)
}

// NewSearcher builds a searcher by its benchmark name: gmd, gmd-m<percent> (GMD with
// that budget margin, gmd-m0 for none; also -p<penalty>, -b<profile budget>), maxn,
// preset, random-<K>, als, oracle-m<percent> (the truth with a margin). The result is a
// Searcher or a PairLearner. "oracle" is not a searcher: the benchmark computes it from
// the noise-free truth.
func NewSearcher(name string) (any, error) {
	switch {
	case name == "gmd":
		return NewGMD(GMDOptions{}), nil
	case strings.HasPrefix(name, "gmd-"):
		o, err := parseGMDName(name)
		if err != nil {
			return nil, err
		}
		return namedSearcher{NewGMD(o), name}, nil
	case name == "maxn":
		return MaxNSearcher{}, nil
	case name == "preset":
		return PresetSearcher{}, nil
	case strings.HasPrefix(name, "random-"):
		k, err := strconv.Atoi(strings.TrimPrefix(name, "random-"))
		if err != nil || k < 1 {
			return nil, fmt.Errorf("searcher %q: want random-<K> with K ≥ 1, e.g. random-15", name)
		}
		return RandomSearcher{K: k}, nil
	case name == "als":
		return NewALS(ALSOptions{}), nil
	case strings.HasPrefix(name, "oracle-m"):
		pct, err := strconv.ParseFloat(strings.TrimPrefix(name, "oracle-m"), 64)
		if err != nil || pct < 0 || pct >= 100 {
			return nil, fmt.Errorf("searcher %q: want oracle-m<margin percent>, e.g. oracle-m6", name)
		}
		return namedSearcher{MarginOracle{MarginRel: pct / 100}, name}, nil
	case name == "oracle":
		return nil, errors.New("oracle is not a profiling searcher: the benchmark computes it from the noise-free truth (list it in the searchers to get its row)")
	}
	return nil, fmt.Errorf("unknown searcher %q: want gmd, gmd-m<percent>, als, preset, maxn, random-<K>, oracle or oracle-m<percent>", name)
}

// parseGMDName reads GMD variants: gmd-m<margin percent>, gmd-p<penalty>, gmd-b<profiles>,
// gmd-c<profiles kept back for repeat measurements> (gmd-c0: none), gmd-f<fallback
// margin in tenths of σ> (gmd-f10: 1σ; gmd-f0: no fallback), gmd-s0 (no smoothing),
// combinable (gmd-m6-p8, gmd-c0-f0).
func parseGMDName(name string) (GMDOptions, error) {
	var o GMDOptions
	bad := fmt.Errorf("searcher %q: want gmd followed by -m<margin percent>, -p<penalty>, -b<profile budget>, -c<profiles kept for repeats>, -f<fallback margin in tenths of σ> or -s0 (no smoothing), e.g. gmd-m4, gmd-m6-b20 or gmd-c0-f0", name)
	for _, part := range strings.Split(strings.TrimPrefix(name, "gmd-"), "-") {
		if len(part) < 2 {
			return o, bad
		}
		v, err := strconv.ParseFloat(part[1:], 64)
		if err != nil || v < 0 {
			return o, bad
		}
		switch part[0] {
		case 'm':
			if v >= 50 {
				return o, bad
			}
			o.Margin = v / 100
			if v == 0 {
				o.Margin = -1 // exact budgets
			}
		case 'p':
			o.Penalty = v
		case 'b':
			o.MaxProfiles = int(v)
		case 's':
			o.NoSmooth = v == 0
		case 'f':
			o.FallbackSigmas = []float64{v / 10} // f10: 1σ; f0: none
			if v == 0 {
				o.FallbackSigmas = []float64{}
			}
		case 'c':
			o.Confirm = int(v)
			if v == 0 {
				o.Confirm = -1 // no repeat measurements
			}
		default:
			return o, bad
		}
	}
	return o, nil
}

// namedSearcher renames a searcher (gmd-m2 is GMD under another name in the report).
type namedSearcher struct {
	Searcher
	name string
}

func (n namedSearcher) Name() string { return n.name }

