package truthprof

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// MultiTruth is the noise-free ground truth of several training jobs and inference
// streams (model v1 for several workloads, docs/design.md §2): one plan.MultiProfile per
// mode at which every workload has its rows. It is immutable after construction and safe
// for concurrent use.
type MultiTruth struct {
	Trains []string // training jobs, in the order of MultiProfile.Train
	Infers []string // inference streams, in the order of MultiProfile.Infer
	// Batches are the inference batch sizes of each stream, ascending.
	Batches [][]int
	// MicroBatches are, per training job, the micro-batch sizes the table has for it at
	// every mode of the space (issue 32), descending; none for a table without
	// micro-batch rows or a truth made WithoutMicro. The profiles carry them as
	// plan.MultiProfile.Micro.
	MicroBatches [][]int

	profiles []plan.MultiProfile
	byMode   map[powermode.Mode]int
	space    *powermode.Space
}

// NewMultiTruth extracts the workloads from a table. Each training workload must have a
// single batch size in the table; each stream gets the batch sizes the table has for it,
// restricted to inferBatches when that is not nil. A workload may appear once. Each
// job's micro-batch rows (issue 32) at the sizes every mode has go into the profiles'
// Micro; WithoutMicro drops them.
func NewMultiTruth(tab *truth.Table, trains, infers []string, inferBatches []int) (*MultiTruth, error) {
	if len(trains) == 0 || len(infers) == 0 {
		return nil, fmt.Errorf("multi-workload truth: %d training and %d inference workloads: want at least one of each", len(trains), len(infers))
	}
	for _, list := range [][]string{trains, infers} {
		for i, w := range list {
			if slices.Contains(list[:i], w) {
				return nil, fmt.Errorf("multi-workload truth: workload %q is listed twice: list each once", w)
			}
		}
	}
	mt := &MultiTruth{Trains: slices.Clone(trains), Infers: slices.Clone(infers)}
	trainBatch := make([]int, len(trains))
	for j, w := range trains {
		if !slices.Contains(tab.Workloads(truth.Train), w) {
			return nil, fmt.Errorf("ground truth has no training workload %q: it has %v", w, tab.Workloads(truth.Train))
		}
		bs := tab.Batches(w, truth.Train)
		if len(bs) != 1 {
			return nil, fmt.Errorf("training workload %q has batch sizes %v in the ground truth: want one", w, bs)
		}
		trainBatch[j] = bs[0]
	}
	for _, w := range infers {
		if !slices.Contains(tab.Workloads(truth.Infer), w) {
			return nil, fmt.Errorf("ground truth has no inference workload %q: it has %v", w, tab.Workloads(truth.Infer))
		}
		bs := tab.Batches(w, truth.Infer)
		if inferBatches != nil {
			bs = slices.DeleteFunc(bs, func(b int) bool { return !slices.Contains(inferBatches, b) })
		}
		if len(bs) == 0 {
			return nil, fmt.Errorf("inference workload %q has no rows at the batch sizes %v", w, inferBatches)
		}
		mt.Batches = append(mt.Batches, bs)
	}
	// Each job's micro-batch turns (issue 32): the sizes every mode has (a size missing
	// at one mode is left out, not the mode), largest first.
	sh := plan.Shape{EveryBatch: true, MicroOptional: true}
	micros := make([][]int, len(trains))
	for j, w := range trains {
		micros[j] = tab.MicroBatches(w, trainBatch[j])
		slices.Reverse(micros[j])
		sh.Train = append(sh.Train, plan.Wanted{Workload: w, Batches: []int{trainBatch[j]}, Micro: micros[j]})
	}
	for i, w := range infers {
		sh.Infer = append(sh.Infer, plan.Wanted{Workload: w, Batches: mt.Batches[i]})
	}
	byMode := map[powermode.Mode]plan.MultiProfile{}
	for _, p := range plan.Assemble(sh, rowsOf(tab, sh)) {
		p.Repeats = 0 // the truth itself, not a measurement
		byMode[p.Mode] = p
	}
	for _, m := range tab.Modes() {
		if p, ok := byMode[m]; ok {
			mt.profiles = append(mt.profiles, p)
		}
	}
	if len(mt.profiles) == 0 {
		return nil, fmt.Errorf("ground truth has no mode with rows for every one of %v and %v", trains, infers)
	}
	mt.MicroBatches = plan.CommonMicro(mt.profiles, micros)
	mt.byMode = make(map[powermode.Mode]int, len(mt.profiles))
	modes := make([]powermode.Mode, len(mt.profiles))
	for i, p := range mt.profiles {
		mt.byMode[p.Mode], modes[i] = i, p.Mode
	}
	sp, err := powermode.NewSubspace(modes)
	if err != nil {
		return nil, fmt.Errorf("multi-workload truth %v %v: %w", trains, infers, err)
	}
	mt.space = sp
	return mt, nil
}

// WithoutMicro returns the truth without its micro-batch rows: every training turn a
// whole minibatch (k = 1), as before issue 32. It shares the rest with mt.
func (mt *MultiTruth) WithoutMicro() *MultiTruth {
	out := *mt
	out.MicroBatches = nil
	out.profiles = slices.Clone(mt.profiles)
	for i := range out.profiles {
		out.profiles[i].Micro = nil
	}
	return &out
}

// HasMicro reports whether some job has micro-batch turns.
func (mt *MultiTruth) HasMicro() bool { return len(mt.MicroBatches) > 0 }

// Space is the workloads' search space: the modes at which every one has its rows.
func (mt *MultiTruth) Space() *powermode.Space { return mt.space }

// Lookup returns the noise-free profile at mode m.
func (mt *MultiTruth) Lookup(m powermode.Mode) (plan.MultiProfile, bool) {
	i, ok := mt.byMode[m]
	if !ok {
		return plan.MultiProfile{}, false
	}
	return mt.profiles[i], true
}

// Measure is one noisy measurement of the profile at mode m, as TruthProfiler measures a
// pair's: every time and power multiplied by 1 + noise·N(0,1) (clamped at 1% of the
// truth), the draws depending only on (base, m), so that every searcher given the same
// base sees the same measurement of a mode (common random numbers).
func (mt *MultiTruth) Measure(m powermode.Mode, noise float64, base uint64) (plan.MultiProfile, error) {
	return mt.MeasureRep(m, noise, base, 0)
}

// MeasureRep is the r-th measurement of mode m (Measure is the 0-th): independent noise
// per repeat, the same for the same (base, m, r).
func (mt *MultiTruth) MeasureRep(m powermode.Mode, noise float64, base, r uint64) (plan.MultiProfile, error) {
	if math.IsNaN(noise) || noise < 0 || noise > 0.5 {
		return plan.MultiProfile{}, fmt.Errorf("profiling noise %v: want a relative standard deviation from 0 to 0.5 (e.g. 0.03)", noise)
	}
	i, ok := mt.byMode[m]
	if !ok {
		return plan.MultiProfile{}, fmt.Errorf("measure mode %s: not in the ground truth of %v %v; pick a mode of the space", m, mt.Trains, mt.Infers)
	}
	t := mt.profiles[i]
	p := plan.MultiProfile{Mode: m, Train: slices.Clone(t.Train), Infer: make([][]plan.InferPoint, len(t.Infer))}
	rng := rand.New(rand.NewPCG(base^(uint64(i)*0x9e3779b97f4a7c15), r))
	jitter := func(v float64) float64 {
		if noise == 0 {
			return v
		}
		return v * max(1+noise*rng.NormFloat64(), 0.01)
	}
	for j := range p.Train {
		p.Train[j].TimeMS, p.Train[j].PowerMW = jitter(p.Train[j].TimeMS), jitter(p.Train[j].PowerMW)
	}
	for k, pts := range t.Infer {
		p.Infer[k] = slices.Clone(pts)
		for j := range p.Infer[k] {
			p.Infer[k][j].TimeMS, p.Infer[k][j].PowerMW = jitter(p.Infer[k][j].TimeMS), jitter(p.Infer[k][j].PowerMW)
		}
	}
	// The micro-batch turns are drawn after everything else, so a truth without them
	// gives every other value the noise it had before issue 32.
	if t.Micro != nil {
		p.Micro = make([][]plan.TrainPoint, len(t.Micro))
		for j, pts := range t.Micro {
			p.Micro[j] = slices.Clone(pts)
			for c := range p.Micro[j] {
				p.Micro[j][c].TimeMS, p.Micro[j][c].PowerMW = jitter(p.Micro[j][c].TimeMS), jitter(p.Micro[j][c].PowerMW)
			}
		}
	}
	return p, nil
}

// Len is the number of modes at which every workload has its rows.
func (mt *MultiTruth) Len() int { return len(mt.profiles) }

// Profiles returns the noise-free profiles, one per mode. The slice is the truth itself:
// read it, never write it.
func (mt *MultiTruth) Profiles() []plan.MultiProfile { return mt.profiles }

// AllBatches is the union of every stream's batch sizes, ascending (the fill quantiles
// a plan.MultiModel caches).
func (mt *MultiTruth) AllBatches() []int {
	var out []int
	for _, bs := range mt.Batches {
		out = append(out, bs...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
