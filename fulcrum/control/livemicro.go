package control

import (
	"cmp"
	"maps"
	"slices"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/internal/stats"
	"github.com/fulcrum-edge/fulcrum/profiler/measure"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// Training sizes profiled where a claim needs them (issue 32, docs/design.md §9
// "Micro-batches profiled live"). Beside a latency budget shorter than a training turn,
// a profile batch of that turn waits up to the scheduler's profile_wait for a gap in the
// arrivals and then makes the requests that arrive during it miss their deadlines; and
// the decision never claims such a turn (its latency breaks the budget at that mode),
// nor a larger one. So, at a mode, the live profiler measures the smallest training turn,
// the inference batches, and then the other training turns from the smallest up, and:
//
//   - a micro-batch size whose turn is over the budget's admission room by the model —
//     a smaller size measured at this mode already is, or its predicted turn
//     (predictTurn: the line through the two largest sizes measured here below it;
//     with one, that size × the least ratio of the two at the stored modes), lowered by
//     microPredictSlack, is — is not measured, and neither is any larger micro-batch
//     size;
//   - the whole minibatch, which a complete profile needs, is then measured with
//     overRoomSamples batches (no warm-up, no minimum time) instead of the full rule:
//     the decision cannot claim it beside this budget, and each of its batches costs
//     deadlines.
//
// A size left unmeasured is given to the searchers at its predicted turn (microFill),
// so that their profiles keep every declared size; it is never stored, and the plan,
// made from the store, never claims it. A mode whose missing sizes are all over the room
// is known to a searcher (Known) and answered from the store (Profile) without a visit.

// microPredictSlack: a micro-batch size is judged over the room without measuring it
// only when its predicted turn, lowered by this factor, still is (the prediction's error
// across modes, docs/benchmarks.md "Profiling micro-batches where a claim needs them").
const microPredictSlack = 0.9

// overRoomSamples is how many batches measure a whole minibatch that is over the room (no
// warm-up): each of them keeps requests past their deadlines.
const overRoomSamples = 2

// roomOn says whether this profiler chooses the training sizes it measures by the room:
// asked to (ByRoom: the pair's search), it measures both the training job and the stream,
// the latency budget is known, and the trainer declared micro-batch sizes. Otherwise
// every point is measured as before.
func (p *LiveProfiler) roomOn() bool {
	return p.ByRoom && p.Only == "" && p.LatencyMS > 0 && len(p.Pair.MicroBatches) > 0
}

// overRoom says a training turn of trainMS beside an inference turn of inferMS breaks the
// latency budget's admission room by the model (no fill time: batch 1's).
func (p *LiveProfiler) overRoom(trainMS, inferMS float64) bool {
	return p.Admission.LatencyMS(p.LatencyMS, 0, trainMS, inferMS) > p.LatencyMS
}

// sizeRatio relates two training sizes' turns across the stored modes that measured
// both: the least ratio of the larger one's time to the smaller one's (the slowest growth
// seen: a conservative prediction), and the median ratio of their powers.
type sizeRatio struct{ time, power float64 }

// sizePair is a pair of training sizes, larger first.
type sizePair struct{ u, v int }

// microRatios are the sizeRatio of each pair of training sizes (the minibatch included)
// over the stored modes that measured both.
func (p *LiveProfiler) microRatios() map[sizePair]sizeRatio {
	ps, err := storedProfiles(p.Store, p.board(), p.Pair, true)
	if err != nil {
		p.logger().Warn("reading stored profiles", "err", err)
	}
	acc := map[sizePair][2][]float64{}
	for _, mp := range ps {
		pts := trainPoints(mp)
		for u, a := range pts {
			for v, b := range pts {
				if u <= v || b.TimeMS <= 0 || b.PowerMW <= 0 {
					continue
				}
				x := acc[sizePair{u, v}]
				x[0], x[1] = append(x[0], a.TimeMS/b.TimeMS), append(x[1], a.PowerMW/b.PowerMW)
				acc[sizePair{u, v}] = x
			}
		}
	}
	out := make(map[sizePair]sizeRatio, len(acc))
	for k, x := range acc {
		out[k] = sizeRatio{time: slices.Min(x[0]), power: stats.Median(x[1])}
	}
	return out
}

// trainPoints are a profile's training turns by their samples (the minibatch's too).
func trainPoints(mp plan.ModeProfile) map[int]plan.TrainPoint {
	out := map[int]plan.TrainPoint{}
	if mp.Train.Batch > 0 {
		out[mp.Train.Batch] = mp.Train
	}
	for _, t := range mp.Micro {
		out[t.Batch] = t
	}
	return out
}

// shortestInfer is the shortest inference turn of a profile (0 without one).
func shortestInfer(ps []plan.InferPoint) float64 {
	if len(ps) == 0 {
		return 0
	}
	return slices.MinFunc(ps, func(a, b plan.InferPoint) int { return cmp.Compare(a.TimeMS, b.TimeMS) }).TimeMS
}

// predictTurn predicts the turn of u samples at a mode from the training sizes measured
// there below u. With two of them, the line through the two largest, extended to u (a
// per-mode fit: turns grow with the samples at least as fast above as below — launches
// and fixed work weigh most at small sizes —, so the line errs low: on the simulated
// AGX truth it never predicts more than 1/microPredictSlack of the turn,
// docs/benchmarks.md); with one, that size × the least ratio of the two sizes seen at
// the stored modes. False: no size below u measured here, or (with one) no stored mode
// measured both.
func predictTurn(u int, pts map[int]plan.TrainPoint, ratios map[sizePair]sizeRatio) (plan.TrainPoint, bool) {
	var below []int
	for s := range pts {
		if s < u {
			below = append(below, s)
		}
	}
	slices.Sort(below)
	switch n := len(below); {
	case n >= 2:
		v1, v2 := below[n-1], below[n-2]
		a, b := pts[v1], pts[v2]
		f := float64(u-v1) / float64(v1-v2)
		return plan.TrainPoint{Batch: u, TimeMS: a.TimeMS + (a.TimeMS-b.TimeMS)*f, PowerMW: max(a.PowerMW, a.PowerMW+(a.PowerMW-b.PowerMW)*f)}, true
	case n == 1:
		v := below[0]
		r, ok := ratios[sizePair{u, v}]
		if !ok {
			return plan.TrainPoint{}, false
		}
		return plan.TrainPoint{Batch: u, TimeMS: pts[v].TimeMS * r.time, PowerMW: pts[v].PowerMW * r.power}, true
	}
	return plan.TrainPoint{}, false
}

// turnOverRoom says the training turn of u samples is over the room at a mode where the
// sizes pts were measured and the shortest inference turn is inferMS: a smaller size
// measured there is (turns grow with the samples), or its predicted turn, lowered by
// microPredictSlack, is.
func (p *LiveProfiler) turnOverRoom(u int, pts map[int]plan.TrainPoint, inferMS float64, ratios map[sizePair]sizeRatio) bool {
	for s, t := range pts {
		if s < u && p.overRoom(t.TimeMS, inferMS) {
			return true
		}
	}
	pred, ok := predictTurn(u, pts, ratios)
	return ok && p.overRoom(microPredictSlack*pred.TimeMS, inferMS)
}

// microFill completes mp's micro-batch turns with every declared size it lacks, at the
// size's predicted turn (clamped between the largest smaller size measured and the
// minibatch), when each of them is over the room there; ok is false when one is not (or
// cannot be judged): a searcher must then have the mode measured.
func (p *LiveProfiler) microFill(mp plan.ModeProfile, ratios map[sizePair]sizeRatio) (plan.ModeProfile, bool) {
	if len(mp.Micro) >= len(p.Pair.MicroBatches) {
		return mp, true
	}
	if mp.Train.Batch == 0 {
		return mp, false
	}
	pts := trainPoints(mp)
	inferMS := shortestInfer(mp.Infer)
	micro := slices.Clone(mp.Micro)
	for _, u := range p.Pair.MicroBatches { // ascending
		if slices.ContainsFunc(micro, func(t plan.TrainPoint) bool { return t.Batch == u }) {
			continue
		}
		measured := map[int]plan.TrainPoint{}
		for s, t := range pts {
			if s < u {
				measured[s] = t
			}
		}
		if len(measured) == 0 || !p.turnOverRoom(u, measured, inferMS, ratios) {
			return mp, false
		}
		v := slices.Max(slices.Collect(maps.Keys(measured)))
		t, ok := predictTurn(u, measured, ratios)
		if !ok {
			// Turns grow with the samples no faster than in proportion (a smaller turn
			// never costs less per sample): the proportional turn bounds it above.
			t = plan.TrainPoint{Batch: u, TimeMS: measured[v].TimeMS * float64(u) / float64(v), PowerMW: measured[v].PowerMW}
		}
		t.TimeMS = min(max(t.TimeMS, measured[v].TimeMS), mp.Train.TimeMS)
		t.Minibatch = p.Pair.TrainBatch
		micro = append(micro, t)
	}
	slices.SortFunc(micro, func(a, b plan.TrainPoint) int { return b.Batch - a.Batch }) // largest first, as Assemble
	mp.Micro = micro
	return mp, true
}

// orderTodo puts a mode's points in the order roomOn measures them: the smallest training
// turn, the inference batches (the room needs their turns), then the other training turns
// ascending, the whole minibatch last. A training turn comes first, as it did before the
// room chose the sizes, so that real inference batches run at the new mode before its
// inference profile batches do. That order was a first answer to the too-fast check
// reading real batches from the previous mode (a search stepping from the slowest mode to
// a fast one failed that way); the check now takes its reference at the mode being
// measured (decline.go, discardRef), so the order no longer guards it, and it is kept
// because the measured tables (docs/benchmarks.md) were taken with it.
func orderTodo(todo []store.Key) []store.Key {
	out := slices.Clone(todo)
	slices.SortStableFunc(out, func(a, b store.Key) int {
		if a.Role != b.Role {
			if a.Role == truth.Infer {
				return -1
			}
			return 1
		}
		if a.Role == truth.Train {
			return cmp.Compare(a.Turn(), b.Turn())
		}
		return 0
	})
	if i := slices.IndexFunc(out, func(k store.Key) bool { return k.Role == truth.Train }); i > 0 {
		first := out[i]
		out = slices.Insert(slices.Delete(out, i, i+1), 0, first)
	}
	return out
}

// overRoomRule is the stopping rule of a whole minibatch over the room: overRoomSamples
// batches, no warm-up, no minimum time, no precision wait.
func (o LiveOptions) overRoomRule() measure.Rule {
	r := o.rule()
	r.Warmup, r.WarmupTime, r.MinTime = 0, 0, 0
	r.MinSamples = min(r.MinSamples, overRoomSamples)
	r.MaxSamples = r.MinSamples
	return r
}
