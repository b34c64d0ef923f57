package plan

import "slices"

// A searcher measures a mode again to confirm it (search.Remeasurer); the profilers
// (the bench's truthprof, the daemon's live profiler through the store) and GMD's
// confirmation keep a running sum of the repeats and answer with their mean, every time
// and power averaged over the repeats, Repeats saying how many. AddRepeat and
// RepeatMean (AddMultiRepeat and MultiRepeatMean for several workloads) are the one
// way they do it.

// AddRepeat adds the measurement mp of a mode to the running sum of its repeats
// (sum.Repeats counts them; a zero ModeProfile is the empty sum). mp must have the
// shape (batch sizes, in order) of the first measurement added.
func AddRepeat(sum *ModeProfile, mp ModeProfile) {
	if sum.Repeats == 0 {
		*sum = ModeProfile{Mode: mp.Mode, Train: mp.Train, Infer: slices.Clone(mp.Infer), Micro: slices.Clone(mp.Micro), Repeats: 1}
		return
	}
	sum.Repeats++
	sum.Train.TimeMS += mp.Train.TimeMS
	sum.Train.PowerMW += mp.Train.PowerMW
	addInfer(sum.Infer, mp.Infer)
	// The micro-batch turns (issue 32), by position as every repeat has the same sizes.
	for c := range min(len(sum.Micro), len(mp.Micro)) {
		sum.Micro[c].TimeMS += mp.Micro[c].TimeMS
		sum.Micro[c].PowerMW += mp.Micro[c].PowerMW
	}
}

// RepeatMean is the mean of the repeats summed in sum (AddRepeat), with Repeats set.
func RepeatMean(sum ModeProfile) ModeProfile {
	out := sum.Clone()
	n := float64(max(sum.Repeats, 1))
	out.Train.TimeMS /= n
	out.Train.PowerMW /= n
	divInfer(out.Infer, n)
	for c := range out.Micro {
		out.Micro[c].TimeMS /= n
		out.Micro[c].PowerMW /= n
	}
	return out
}

// AddMultiRepeat is AddRepeat for a mode profiled for several workloads.
func AddMultiRepeat(sum *MultiProfile, mp MultiProfile) {
	if sum.Repeats == 0 {
		*sum = cloneMulti(mp)
		sum.Repeats = 1
		return
	}
	sum.Repeats++
	for j := range sum.Train {
		sum.Train[j].TimeMS += mp.Train[j].TimeMS
		sum.Train[j].PowerMW += mp.Train[j].PowerMW
	}
	for i := range sum.Infer {
		addInfer(sum.Infer[i], mp.Infer[i])
	}
	for j := range min(len(sum.Micro), len(mp.Micro)) {
		for c := range min(len(sum.Micro[j]), len(mp.Micro[j])) {
			sum.Micro[j][c].TimeMS += mp.Micro[j][c].TimeMS
			sum.Micro[j][c].PowerMW += mp.Micro[j][c].PowerMW
		}
	}
}

// MultiRepeatMean is RepeatMean for a mode profiled for several workloads.
func MultiRepeatMean(sum MultiProfile) MultiProfile {
	out := cloneMulti(sum)
	n := float64(max(sum.Repeats, 1))
	for j := range out.Train {
		out.Train[j].TimeMS /= n
		out.Train[j].PowerMW /= n
	}
	for i := range out.Infer {
		divInfer(out.Infer[i], n)
	}
	for _, pts := range out.Micro {
		for c := range pts {
			pts[c].TimeMS /= n
			pts[c].PowerMW /= n
		}
	}
	return out
}

func addInfer(dst, src []InferPoint) {
	for j := range dst {
		dst[j].TimeMS += src[j].TimeMS
		dst[j].PowerMW += src[j].PowerMW
	}
}

func divInfer(pts []InferPoint, n float64) {
	for j := range pts {
		pts[j].TimeMS /= n
		pts[j].PowerMW /= n
	}
}

func cloneMulti(mp MultiProfile) MultiProfile {
	out := MultiProfile{Mode: mp.Mode, Train: slices.Clone(mp.Train), Infer: make([][]InferPoint, len(mp.Infer)), Repeats: mp.Repeats}
	for i, pts := range mp.Infer {
		out.Infer[i] = slices.Clone(pts)
	}
	if mp.Micro != nil { // the micro-batch turns (issue 32) are pooled like the rest
		out.Micro = make([][]TrainPoint, len(mp.Micro))
		for j, pts := range mp.Micro {
			out.Micro[j] = slices.Clone(pts)
		}
	}
	return out
}
