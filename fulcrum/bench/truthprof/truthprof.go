// Package truthprof replays a ground-truth table (truth) as a noisy profiler:
// PairTruth is one training × inference pair of the table laid out for fast scans, and
// TruthProfiler answers a searcher's profile requests from it with seeded noise. The
// benchmark (fulcrum/bench) and the searchers' tests use it.
package truthprof

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// PairTruth is the noise-free ground truth of one training × inference pair, laid out
// as slices indexed by a dense mode number so that the benchmark's hot loops (the
// oracle over thousands of modes, scoring every answer) never touch a map. It is
// immutable after construction and safe for concurrent use.
type PairTruth struct {
	Train      string
	Infer      string
	TrainBatch int
	Batches    []int // inference batch sizes, ascending
	// Space is the pair's search space: the table's modes at which the training batch
	// and every inference batch have a row.
	Space *powermode.Space
	// MicroBatches are the training micro-batch sizes the table has at every mode of
	// the space (issue 32), descending; none for a table without micro-batch rows or a
	// pair made WithoutMicro.
	MicroBatches []int

	dense []int32           // Space grid ordinal -> dense number, -1 when not a member
	modes []powermode.Mode  // dense number -> mode
	train []plan.TrainPoint // dense number -> training point
	infer []plan.InferPoint // dense*len(Batches)+j -> inference point at Batches[j]
	micro []plan.TrainPoint // dense*len(MicroBatches)+c -> training turn at MicroBatches[c]
}

// NewPairTruth extracts a pair from a table. trainBatch 0 takes the training
// workload's only batch size (an error when the table has several); nil inferBatches
// takes every batch size the table has for the inference workload.
func NewPairTruth(tab *truth.Table, train, infer string, trainBatch int, inferBatches []int) (*PairTruth, error) {
	if !slices.Contains(tab.Workloads(truth.Train), train) {
		return nil, fmt.Errorf("ground truth has no training workload %q: it has %v", train, tab.Workloads(truth.Train))
	}
	if !slices.Contains(tab.Workloads(truth.Infer), infer) {
		return nil, fmt.Errorf("ground truth has no inference workload %q: it has %v", infer, tab.Workloads(truth.Infer))
	}
	if trainBatch == 0 {
		bs := tab.Batches(train, truth.Train)
		if len(bs) != 1 {
			return nil, fmt.Errorf("training workload %q has batch sizes %v in the ground truth: say which one", train, bs)
		}
		trainBatch = bs[0]
	}
	if inferBatches == nil {
		inferBatches = tab.Batches(infer, truth.Infer)
	}
	batches := slices.Clone(inferBatches)
	slices.Sort(batches)
	batches = slices.Compact(batches)
	if len(batches) == 0 || batches[0] < 1 {
		return nil, fmt.Errorf("inference batch sizes %v: want at least one, each ≥ 1", inferBatches)
	}
	sh := plan.PairShape(train, trainBatch, infer, batches)
	sh.EveryBatch = true
	// The training workload's micro-batch turns (issue 32): the sizes every mode has (a
	// size missing at one mode is left out, not the mode), largest first.
	micros := tab.MicroBatches(train, trainBatch)
	slices.Reverse(micros)
	sh.Train[0].Micro, sh.MicroOptional = micros, true
	ps := plan.Assemble(sh, rowsOf(tab, sh))
	if len(ps) == 0 {
		return nil, fmt.Errorf("ground truth has no mode with both %s (train, batch %d) and %s (infer, batches %v)", train, trainBatch, infer, batches)
	}
	if common := plan.CommonMicro(ps, [][]int{micros}); common != nil {
		micros = common[0]
	} else {
		micros = nil
	}
	byMode := make(map[powermode.Mode]plan.MultiProfile, len(ps))
	modes := make([]powermode.Mode, 0, len(ps))
	for _, mp := range ps {
		byMode[mp.Mode] = mp
		modes = append(modes, mp.Mode)
	}
	sp, err := powermode.NewSubspace(modes)
	if err != nil {
		return nil, fmt.Errorf("pair %s:%s: %w", train, infer, err)
	}
	pt := &PairTruth{Train: train, Infer: infer, TrainBatch: trainBatch, Batches: batches, Space: sp, MicroBatches: micros}
	pt.dense = make([]int32, sp.GridSize())
	for i := range pt.dense {
		pt.dense[i] = -1
	}
	for idx, m := range sp.All() {
		pt.dense[sp.Ordinal(idx)] = int32(len(pt.modes))
		pt.modes = append(pt.modes, m)
		mp := byMode[m]
		pt.train = append(pt.train, mp.Train[0])
		pt.infer = append(pt.infer, mp.Infer[0]...)
		if len(micros) > 0 {
			pt.micro = append(pt.micro, mp.Micro[0]...)
		}
	}
	return pt, nil
}

// WithoutMicro returns the pair without its micro-batch rows: every training turn a
// whole minibatch (k = 1), as before issue 32. It shares the rest with pt.
func (pt *PairTruth) WithoutMicro() *PairTruth {
	out := *pt
	out.MicroBatches, out.micro = nil, nil
	return &out
}

// TrainChoices is the number of training turns a mode offers: the whole minibatch and
// each micro-batch size (TrainAt's c ranges over them).
func (pt *PairTruth) TrainChoices() int { return 1 + len(pt.MicroBatches) }

// TrainAt returns dense mode i's noise-free training turn c: 0 the whole minibatch, c ≥ 1
// the micro-batch MicroBatches[c-1].
func (pt *PairTruth) TrainAt(i, c int) plan.TrainPoint {
	if c == 0 {
		return pt.train[i]
	}
	return pt.micro[i*len(pt.MicroBatches)+c-1]
}

// Micro returns the noise-free micro-batch turns of dense mode i, one per MicroBatches
// entry (Minibatch set). The slice is the truth itself: read it, never write it.
func (pt *PairTruth) Micro(i int) []plan.TrainPoint {
	nm := len(pt.MicroBatches)
	return pt.micro[i*nm : (i+1)*nm : (i+1)*nm]
}

// rowsOf is the table's rows of the workloads sh names, as the points plan.Assemble
// puts together (a ground-truth row is one measurement).
func rowsOf(tab *truth.Table, sh plan.Shape) []plan.Measured {
	var out []plan.Measured
	for _, r := range tab.Rows {
		ws := sh.Infer
		if r.Role == truth.Train {
			ws = sh.Train
		}
		if slices.ContainsFunc(ws, func(w plan.Wanted) bool { return w.Workload == r.Workload }) {
			out = append(out, plan.Measured{Row: r})
		}
	}
	return out
}

// Len is the number of modes of the pair.
func (pt *PairTruth) Len() int { return len(pt.modes) }

// ModeAt returns the mode with dense number i.
func (pt *PairTruth) ModeAt(i int) powermode.Mode { return pt.modes[i] }

// DenseOf returns the dense number of m and whether m is in the pair's space.
func (pt *PairTruth) DenseOf(m powermode.Mode) (int, bool) {
	idx, ok := pt.Space.Index(m)
	if !ok {
		return 0, false
	}
	return int(pt.dense[pt.Space.Ordinal(idx)]), true
}

// ProfileAt returns the noise-free profile of dense mode i.
func (pt *PairTruth) ProfileAt(i int) plan.ModeProfile {
	nb := len(pt.Batches)
	mp := plan.ModeProfile{Mode: pt.modes[i], Train: pt.train[i], Infer: slices.Clone(pt.infer[i*nb : (i+1)*nb])}
	if len(pt.MicroBatches) > 0 {
		mp.Micro = slices.Clone(pt.Micro(i))
	}
	return mp
}

// Score re-evaluates a configuration (mode, inference batch, training micro-batch: 0
// the whole minibatch) on the noise-free truth with model. ok is false when the mode,
// batch or micro-batch is not in the truth.
func (pt *PairTruth) Score(model *plan.Model, m powermode.Mode, batch, micro int) (e plan.Eval, ok bool) {
	i, ok := pt.DenseOf(m)
	if !ok {
		return plan.Eval{}, false
	}
	j, ok := slices.BinarySearch(pt.Batches, batch)
	if !ok {
		return plan.Eval{}, false
	}
	t := pt.train[i]
	if micro != 0 {
		c := slices.Index(pt.MicroBatches, micro)
		if c < 0 {
			return plan.Eval{}, false
		}
		t = pt.Micro(i)[c]
	}
	return model.Evaluate(m, t, pt.infer[i*len(pt.Batches)+j]), true
}

// Points returns the noise-free training point of dense mode i and its inference
// points (one per Batches entry). The slice is the truth itself, not a copy: read it,
// never write it (the oracles scan every mode and must not copy per mode).
func (pt *PairTruth) Points(i int) (plan.TrainPoint, []plan.InferPoint) {
	nb := len(pt.Batches)
	return pt.train[i], pt.infer[i*nb : (i+1)*nb : (i+1)*nb]
}

// TruthProfiler is a Profiler that answers from a ground-truth table with
// multiplicative Gaussian noise: every time and power is multiplied by
// (1 + noise·N(0,1)), clamped to stay positive. Each distinct mode is measured (and
// counted) once by Profile; asking again returns the same noisy profile at no cost.
// Remeasure takes (and counts) a new measurement. It is not safe
// for concurrent use: one searcher at a time drives it.
type TruthProfiler struct {
	pt    *PairTruth
	noise float64
	// base seeds the noise. The noise of the r-th measurement of a mode depends only
	// on (base, mode, r), not on the order modes are asked for: two searchers given
	// profilers with the same base see the same measurement of the same mode (common
	// random numbers), so the benchmark compares them on equal luck.
	base  uint64
	reps  map[int]uint64 // dense mode -> measurements taken
	known map[powermode.Mode]plan.ModeProfile
	// sums holds, per remeasured mode, the sum of this profiler's repeats (Repeats:
	// how many); known then holds their mean.
	sums  map[powermode.Mode]plan.ModeProfile
	order []powermode.Mode
	count int
}

// NewTruthProfiler builds a noisy profiler for one pair of a table (see NewPairTruth for
// trainBatch and inferBatches). noise is the relative standard deviation (0.03 = 3%).
func NewTruthProfiler(tab *truth.Table, train, infer string, trainBatch int, inferBatches []int, noise float64, rng *rand.Rand) (*TruthProfiler, error) {
	pt, err := NewPairTruth(tab, train, infer, trainBatch, inferBatches)
	if err != nil {
		return nil, err
	}
	return NewPairProfiler(pt, noise, rng)
}

// NewPairProfiler is NewTruthProfiler over an already extracted pair (the benchmark
// builds each pair once and gives every configuration its own profiler).
func NewPairProfiler(pt *PairTruth, noise float64, rng *rand.Rand) (*TruthProfiler, error) {
	if math.IsNaN(noise) || noise < 0 || noise > 0.5 {
		return nil, fmt.Errorf("profiling noise %v: want a relative standard deviation from 0 to 0.5 (e.g. 0.03)", noise)
	}
	if rng == nil && noise > 0 {
		return nil, fmt.Errorf("profiling noise %v needs a random source", noise)
	}
	p := &TruthProfiler{pt: pt, noise: noise, reps: map[int]uint64{}, known: map[powermode.Mode]plan.ModeProfile{}}
	if rng != nil {
		p.base = rng.Uint64()
	}
	return p, nil
}

// Profile implements Profiler.
func (p *TruthProfiler) Profile(ctx context.Context, m powermode.Mode) (plan.ModeProfile, error) {
	if err := ctx.Err(); err != nil {
		return plan.ModeProfile{}, err
	}
	if mp, ok := p.known[m]; ok {
		return mp.Clone(), nil
	}
	i, ok := p.pt.DenseOf(m)
	if !ok {
		return plan.ModeProfile{}, fmt.Errorf("profile mode %s: not in the ground truth of pair %s:%s; pick a mode of the problem's space", m, p.pt.Train, p.pt.Infer)
	}
	mp := p.measure(i)
	p.known[m] = mp
	p.order = append(p.order, m)
	p.count++
	return mp.Clone(), nil
}

// Remeasure implements Remeasurer: a new measurement of m with fresh noise, counted like
// a profile, returned alone. Afterwards Profile and Known answer with the mean of the
// repeats this profiler has taken (Repeats set), replacing the first measurement, as the
// daemon's live profiler stores them (control.LiveProfiler.Remeasure): the first
// measurement was what made the mode worth confirming, so it keeps its optimism.
func (p *TruthProfiler) Remeasure(ctx context.Context, m powermode.Mode) (plan.ModeProfile, error) {
	if err := ctx.Err(); err != nil {
		return plan.ModeProfile{}, err
	}
	i, ok := p.pt.DenseOf(m)
	if !ok {
		return plan.ModeProfile{}, fmt.Errorf("remeasure mode %s: not in the ground truth of pair %s:%s; pick a mode of the problem's space", m, p.pt.Train, p.pt.Infer)
	}
	mp := p.measure(i)
	p.count++
	if p.sums == nil {
		p.sums = map[powermode.Mode]plan.ModeProfile{}
	}
	sum := p.sums[m]
	plan.AddRepeat(&sum, mp)
	p.sums[m] = sum
	mean := plan.RepeatMean(sum)
	if _, had := p.known[m]; !had {
		p.order = append(p.order, m)
	}
	p.known[m] = mean
	return mp, nil
}

// measure returns a new measurement of dense mode i: its profile with every time and
// power jittered by the noise of (base, i, repeat number).
func (p *TruthProfiler) measure(i int) plan.ModeProfile {
	mp := p.pt.ProfileAt(i)
	if p.noise == 0 {
		return mp
	}
	r := p.reps[i]
	p.reps[i] = r + 1
	rng := rand.New(rand.NewPCG(p.base^(uint64(i)*0x9e3779b97f4a7c15), r))
	jitter := func(v float64) float64 {
		// Clamp at 1% of the true value: a 0.5 noise could otherwise make a time negative.
		return v * max(1+p.noise*rng.NormFloat64(), 0.01)
	}
	mp.Train.TimeMS = jitter(mp.Train.TimeMS)
	mp.Train.PowerMW = jitter(mp.Train.PowerMW)
	for j := range mp.Infer {
		mp.Infer[j].TimeMS = jitter(mp.Infer[j].TimeMS)
		mp.Infer[j].PowerMW = jitter(mp.Infer[j].PowerMW)
	}
	// The micro-batch turns are drawn after everything else, so a table without them
	// gives every other value the noise it had before issue 32.
	for c := range mp.Micro {
		mp.Micro[c].TimeMS = jitter(mp.Micro[c].TimeMS)
		mp.Micro[c].PowerMW = jitter(mp.Micro[c].PowerMW)
	}
	return mp
}

// Known implements Profiler: every profile measured so far (or inherited by Fork), in
// the order measured.
func (p *TruthProfiler) Known() []plan.ModeProfile {
	out := make([]plan.ModeProfile, 0, len(p.order))
	for _, m := range p.order {
		out = append(out, p.known[m].Clone())
	}
	return out
}

// Count is the number of distinct modes this profiler has measured (inherited
// profiles not included).
func (p *TruthProfiler) Count() int { return p.count }

// Fork returns a profiler that already knows every profile p knows (free to use, not
// counted) and measures new modes with its own random source. The benchmark gives each
// budget configuration a fork of a pair-learner's campaign profiler, so confirming
// profiles are counted per configuration and results do not depend on scheduling.
func (p *TruthProfiler) Fork(rng *rand.Rand) *TruthProfiler {
	f := &TruthProfiler{pt: p.pt, noise: p.noise, reps: map[int]uint64{}, known: make(map[powermode.Mode]plan.ModeProfile, len(p.known)), order: slices.Clone(p.order)}
	if rng != nil {
		f.base = rng.Uint64()
	}
	for m, mp := range p.known {
		f.known[m] = mp
	}
	return f
}
