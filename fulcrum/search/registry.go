package search

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
)

// The registry is the one place that knows the searchers' names: the benchmark
// (fulcrumctl bench), the controller's live searches and fulcrumd's configuration all
// go through Parse and New, so a new searcher or variant is added here only.

// Kind is the family a searcher name belongs to.
type Kind int

// The searcher families.
const (
	KindGMD    Kind = iota + 1 // gmd and its variants gmd-m<percent>-p<penalty>-…
	KindALS                    // als
	KindPreset                 // preset
	KindMaxN                   // maxn
	KindRandom                 // random-<K>
	// KindOracle is the exhaustive optimum over the noise-free truth: not a profiling
	// searcher, the benchmark computes its row itself.
	KindOracle
	// KindMarginOracle is the oracle with a safety margin (oracle-m<percent>). It needs
	// the noise-free truth, which only the benchmark has: bench.NewMarginOracle builds it.
	KindMarginOracle
)

// Spec is a searcher name, parsed.
type Spec struct {
	Name string
	Kind Kind
	// GMD holds a GMD variant's options (KindGMD; zero for plain gmd).
	GMD GMDOptions
	// RandomK is the number of random modes (KindRandom).
	RandomK int
	// MarginRel is the margin oracle's relative margin (KindMarginOracle; 0.03 = 3%).
	MarginRel float64
}

// Names is the help text listing every searcher name.
const Names = "gmd, gmd-m<percent> (and the other GMD variants), als, preset, maxn, random-<K>, oracle or oracle-m<percent>"

// Parse reads a searcher name: gmd, gmd-m<percent> (GMD with that budget margin, gmd-m0
// for none; also -p<penalty>, -b<profile budget>, -c, -f, -s0: see ParseGMDName), maxn,
// preset, random-<K>, als, oracle, oracle-m<percent> (the truth with a margin).
func Parse(name string) (Spec, error) {
	sp := Spec{Name: name}
	switch {
	case name == "gmd":
		sp.Kind = KindGMD
	case strings.HasPrefix(name, "gmd-"):
		o, err := ParseGMDName(name)
		if err != nil {
			return Spec{}, err
		}
		sp.Kind, sp.GMD = KindGMD, o
	case name == "maxn":
		sp.Kind = KindMaxN
	case name == "preset":
		sp.Kind = KindPreset
	case strings.HasPrefix(name, "random-"):
		k, err := strconv.Atoi(strings.TrimPrefix(name, "random-"))
		if err != nil || k < 1 {
			return Spec{}, fmt.Errorf("searcher %q: want random-<K> with K ≥ 1, e.g. random-15", name)
		}
		sp.Kind, sp.RandomK = KindRandom, k
	case name == "als":
		sp.Kind = KindALS
	case strings.HasPrefix(name, "oracle-m"):
		pct, err := strconv.ParseFloat(strings.TrimPrefix(name, "oracle-m"), 64)
		if err != nil || pct < 0 || pct >= 100 {
			return Spec{}, fmt.Errorf("searcher %q: want oracle-m<margin percent>, e.g. oracle-m6", name)
		}
		sp.Kind, sp.MarginRel = KindMarginOracle, pct/100
	case name == "oracle":
		sp.Kind = KindOracle
	default:
		return Spec{}, fmt.Errorf("unknown searcher %q: want %s", name, Names)
	}
	return sp, nil
}

// Env is what a searcher may need from where it runs.
type Env struct {
	// Logger receives a searcher's progress (ALS); nil discards it.
	Logger *slog.Logger
}

// New builds a profiling searcher by name (see Parse). ALS is also a PairLearner, which
// the benchmark uses to learn a pair once. The oracles are not built here: "oracle" is
// computed by the benchmark, and oracle-m<percent> needs the noise-free truth
// (bench.NewMarginOracle).
func New(name string, env Env) (Searcher, error) {
	sp, err := Parse(name)
	if err != nil {
		return nil, err
	}
	return sp.New(env)
}

// New builds the searcher sp names.
func (sp Spec) New(env Env) (Searcher, error) {
	switch sp.Kind {
	case KindGMD:
		if sp.Name == "gmd" {
			return NewGMD(sp.GMD), nil
		}
		return namedSearcher{NewGMD(sp.GMD), sp.Name}, nil
	case KindMaxN:
		return MaxNSearcher{}, nil
	case KindPreset:
		return PresetSearcher{}, nil
	case KindRandom:
		return RandomSearcher{K: sp.RandomK}, nil
	case KindALS:
		return NewALS(ALSOptions{Logger: env.Logger}), nil
	case KindOracle:
		return nil, errors.New("oracle is not a profiling searcher: the benchmark computes it from the noise-free truth (list it in the searchers to get its row)")
	case KindMarginOracle:
		return nil, fmt.Errorf("%s needs the noise-free truth; run it in fulcrumctl bench", sp.Name)
	}
	return nil, fmt.Errorf("searcher %q: no kind (use Parse)", sp.Name)
}

// CheckLive says whether the daemon can run a searcher live, through the board (the
// controller's searches, fulcrumd's controller.searcher): gmd and als.
func CheckLive(name string) error {
	if name != "gmd" && name != "als" {
		return fmt.Errorf(`searcher must be "gmd" or "als", got %q`, name)
	}
	return nil
}

// namedSearcher renames a searcher (gmd-m2 is GMD under another name in the report).
type namedSearcher struct {
	Searcher
	name string
}

func (n namedSearcher) Name() string { return n.name }
