package plan

import (
	"slices"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// Measured is one measured point of a workload at a mode: a ground-truth row (a stored
// profile gives one with store.Profile.Row, its time and power means) and how many
// measurements its values pool (0 or 1: one).
//
// plan does not import the profile store (it would link bbolt into every user of the
// model); truth is the leaf both the store and the ground-truth tables speak.
type Measured struct {
	truth.Row
	Repeats int
}

// Wanted is a workload a profile is assembled for: a training job with its one
// minibatch size, or an inference stream with the batch sizes it may serve.
type Wanted struct {
	Workload string
	Batches  []int
	// Micro (a training job) are the micro-batch sizes its worker accepts (issue 32):
	// the job's points at those sizes (truth.Row.MicroBatch) become MultiProfile.Micro,
	// and a mode is complete only with every one of them (unless Shape.MicroOptional),
	// so that a searcher measures them where they are missing. Empty: whole minibatches
	// only, and micro-batch points are left out.
	Micro []int
}

// Shape is what Assemble puts together: the training jobs and the inference streams,
// in the order of MultiProfile.Train and MultiProfile.Infer.
type Shape struct {
	Train, Infer []Wanted
	// EveryBatch: a mode is complete only with every batch size of every stream (a
	// ground-truth table has them all); otherwise one or more per stream is enough (a
	// store, where a mode may have been measured at some sizes only).
	EveryBatch bool
	// MicroOptional: a mode is complete without its training jobs' micro-batch points
	// (Wanted.Micro), using those it has — the daemon's planning over a store filled
	// before the worker declared micro-batches, where such a mode still offers whole
	// minibatches.
	MicroOptional bool
}

// PairShape is the Shape of one training job (batch trainBatch) and one stream.
func PairShape(train string, trainBatch int, infer string, batches []int) Shape {
	return Shape{Train: []Wanted{{Workload: train, Batches: []int{trainBatch}}}, Infer: []Wanted{{Workload: infer, Batches: batches}}}
}

// Assemble is the one place measured points become profiles (the daemon's from its
// store, the benchmark's from a ground-truth table): one MultiProfile per mode that is
// complete for sh — every training job has its point at its batch, every stream at
// one or more (sh.EveryBatch: all) of its batches. Each stream's points are ascending
// by batch; Repeats is the least of the points' (the decision sizes one σ per mode).
// Points of other workloads, roles or batch sizes (or micro-batch sizes a job does not
// want) are left out. Modes come in the order of their first point in pts.
func Assemble(sh Shape, pts []Measured) []MultiProfile {
	byMode := map[powermode.Mode][]Measured{}
	var order []powermode.Mode
	for _, x := range pts {
		if !sh.wants(x.Row) {
			continue
		}
		if _, seen := byMode[x.Mode]; !seen {
			order = append(order, x.Mode)
		}
		byMode[x.Mode] = append(byMode[x.Mode], x)
	}
	var out []MultiProfile
	for _, m := range order {
		if mp, ok := AssembleMode(sh, m, byMode[m]); ok {
			out = append(out, mp)
		}
	}
	return out
}

// AssembleMode is Assemble of one mode m's points (points at other modes are left
// out). ok is false when the profile is not complete; it then holds what there is
// (missing training points zero, streams without points empty).
func AssembleMode(sh Shape, m powermode.Mode, pts []Measured) (mp MultiProfile, ok bool) {
	mp = MultiProfile{Mode: m, Train: make([]TrainPoint, len(sh.Train)), Infer: make([][]InferPoint, len(sh.Infer))}
	if slices.ContainsFunc(sh.Train, func(w Wanted) bool { return len(w.Micro) > 0 }) {
		mp.Micro = make([][]TrainPoint, len(sh.Train))
	}
	for _, x := range pts {
		if x.Mode != m || !sh.wants(x.Row) {
			continue
		}
		used := false
		for j, w := range sh.Train {
			if x.Role != truth.Train || x.Workload != w.Workload || !slices.Contains(w.Batches, x.Batch) {
				continue
			}
			switch {
			case x.MicroBatch == 0 && mp.Train[j].Batch == 0:
				mp.Train[j] = TrainPoint{Batch: x.Batch, TimeMS: x.TimeMS, PowerMW: x.PowerMW}
				used = true
			case x.MicroBatch > 0 && slices.Contains(w.Micro, x.MicroBatch) &&
				!slices.ContainsFunc(mp.Micro[j], func(t TrainPoint) bool { return t.Batch == x.MicroBatch }):
				mp.Micro[j] = append(mp.Micro[j], TrainPoint{Batch: x.MicroBatch, TimeMS: x.TimeMS, PowerMW: x.PowerMW, Minibatch: x.Batch})
				used = true
			}
		}
		for i, w := range sh.Infer {
			if x.Role == truth.Infer && x.Workload == w.Workload && slices.Contains(w.Batches, x.Batch) &&
				!slices.ContainsFunc(mp.Infer[i], func(p InferPoint) bool { return p.Batch == x.Batch }) {
				mp.Infer[i] = append(mp.Infer[i], InferPoint{Batch: x.Batch, TimeMS: x.TimeMS, PowerMW: x.PowerMW})
				used = true
			}
		}
		if r := max(x.Repeats, 1); used && (mp.Repeats == 0 || r < mp.Repeats) {
			mp.Repeats = r
		}
	}
	ok = true
	for j, t := range mp.Train {
		ok = ok && t.Batch != 0
		if mp.Micro != nil {
			// Largest first, as the benchmark's truth gives them (truthprof).
			slices.SortFunc(mp.Micro[j], func(a, b TrainPoint) int { return b.Batch - a.Batch })
			ok = ok && (sh.MicroOptional || len(mp.Micro[j]) == len(sh.Train[j].Micro))
		}
	}
	for i, pts := range mp.Infer {
		slices.SortFunc(pts, func(a, b InferPoint) int { return a.Batch - b.Batch })
		ok = ok && len(pts) > 0 && (!sh.EveryBatch || len(pts) == len(sh.Infer[i].Batches))
	}
	return mp, ok
}

func (sh Shape) wants(r truth.Row) bool {
	ws := sh.Infer
	if r.Role == truth.Train {
		ws = sh.Train
	}
	return slices.ContainsFunc(ws, func(w Wanted) bool {
		return w.Workload == r.Workload && slices.Contains(w.Batches, r.Batch) && (r.MicroBatch == 0 || slices.Contains(w.Micro, r.MicroBatch))
	})
}

// PairOf is the pair (the first training job and the first stream) of a profile for
// several workloads.
func PairOf(mp MultiProfile) ModeProfile {
	p := ModeProfile{Mode: mp.Mode, Repeats: mp.Repeats}
	if len(mp.Train) > 0 {
		p.Train = mp.Train[0]
	}
	if len(mp.Micro) > 0 && len(mp.Micro[0]) > 0 {
		p.Micro = mp.Micro[0] // the job's micro-batch turns (issue 32)
	}
	if len(mp.Infer) > 0 {
		p.Infer = mp.Infer[0]
	}
	return p
}

// MultiOf is a pair's profile as a profile of one training job and one stream.
func MultiOf(p ModeProfile) MultiProfile {
	out := MultiProfile{Mode: p.Mode, Train: []TrainPoint{p.Train}, Infer: [][]InferPoint{p.Infer}, Repeats: p.Repeats}
	if len(p.Micro) > 0 {
		out.Micro = [][]TrainPoint{p.Micro} // the job's micro-batch turns (issue 32)
	}
	return out
}

// CommonMicro keeps, in each training job's micro-batch turns of ps (assembled with
// Shape.MicroOptional), only the sizes of sizes[j] that every profile has, and returns
// them per job in the order of sizes[j] (largest first, as Assemble orders the turns):
// what a ground-truth table offers (the
// benchmark's truth), where a size missing at one mode is left out rather than the
// mode. When no job keeps a size, every profile's Micro is set to nil and the answer is
// nil.
func CommonMicro(ps []MultiProfile, sizes [][]int) [][]int {
	out := make([][]int, len(sizes))
	kept := false
	for j, s := range sizes {
		out[j] = slices.DeleteFunc(slices.Clone(s), func(mb int) bool {
			return slices.ContainsFunc(ps, func(p MultiProfile) bool {
				return j >= len(p.Micro) || !slices.ContainsFunc(p.Micro[j], func(t TrainPoint) bool { return t.Batch == mb })
			})
		})
		kept = kept || len(out[j]) > 0
	}
	for i := range ps {
		p := &ps[i]
		if !kept {
			p.Micro = nil
			continue
		}
		for j := range p.Micro {
			if j >= len(out) || len(out[j]) == 0 {
				p.Micro[j] = nil
				continue
			}
			p.Micro[j] = slices.DeleteFunc(p.Micro[j], func(t TrainPoint) bool { return !slices.Contains(out[j], t.Batch) })
		}
	}
	if !kept {
		return nil
	}
	return out
}
