package control

import (
	"cmp"
	"maps"
	"slices"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/internal/stats"
	"github.com/fulcrum-edge/fulcrum/powermode"
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
//   - the whole minibatch, which a complete profile needs, is then not run either: it
//     is stored as a bound from the largest turn measured (boundMinibatch,
//     store.Profile.Bound) — the decision cannot claim it beside this budget, and each
//     of its batches would cost deadlines (until 2026-11-27 it ran two batches, and a
//     re-search from a paused plan broke the p99 the pause was keeping at every mode it
//     measured) — and is measured for real on a visit where it fits the room.
//
// A size left unmeasured is given to the searchers at its predicted turn (microFill),
// so that their profiles keep every declared size; it is never stored, and the plan,
// made from the store, never claims it. A mode whose missing sizes are all over the room
// is known to a searcher (Known) and answered from the store (Profile) without a visit.

// microPredictSlack: a micro-batch size is judged over the room without measuring it
// only when its predicted turn, lowered by this factor, still is (the prediction's error
// across modes, docs/benchmarks.md "Profiling micro-batches where a claim needs them").
const microPredictSlack = 0.9

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
	return p.storedRatios(func(mp plan.ModeProfile) map[int][2]float64 {
		out := map[int][2]float64{}
		for s, t := range trainPoints(mp) {
			out[s] = [2]float64{t.TimeMS, t.PowerMW}
		}
		return out
	})
}

// storedRatios is the sizeRatio of each pair of sizes over the stored modes that
// measured both, the sizes' (time, power) at a mode given by points.
func (p *LiveProfiler) storedRatios(points func(plan.ModeProfile) map[int][2]float64) map[sizePair]sizeRatio {
	ps, err := storedProfiles(p.Store, p.board(), p.Pair, true)
	if err != nil {
		p.logger().Warn("reading stored profiles", "err", err)
	}
	acc := map[sizePair][2][]float64{}
	for _, mp := range ps {
		pts := points(mp)
		for u, a := range pts {
			for v, b := range pts {
				if u <= v || b[0] <= 0 || b[1] <= 0 {
					continue
				}
				x := acc[sizePair{u, v}]
				x[0], x[1] = append(x[0], a[0]/b[0]), append(x[1], a[1]/b[1])
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
	// over: a smaller size is over the room, so this one is too (the visit's overMicro).
	over := false
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
		if len(measured) == 0 || !over && !p.turnOverRoom(u, measured, inferMS, ratios) {
			// (Judged alone, a size above one over the room could not always be: with one
			// size below it measured and no stored mode holding both, there is no
			// prediction, and a visit that left out 8 and 16 beside a measured 4 gave the
			// searcher a mode without them; GMD's fits then skipped it and its first walk
			// stopped "converged" after six modes: AGX, 30 req/s, 50 ms, 30 W.)
			return mp, false
		}
		over = true
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

// boundMinibatch is the stored stand-in of whole minibatch k at a mode where it is over
// the room (store.Profile.Bound): from the largest training turn measured there, pts
// (the sizes below k, at least one measured in this visit or stored), the time scaled to
// the minibatch — an upper bound, since a bigger batch uses the GPU at least as well —
// and that turn's power raised by the stored modes' median ratio of the two sizes (and
// never below the turns read alone here, readable: a bigger batch keeps the GPU
// busier). ok is false when no size below k was measured at the mode.
func (p *LiveProfiler) boundMinibatch(k store.Key, pts map[int]plan.TrainPoint, readable map[int]float64, ratios map[sizePair]sizeRatio) (store.Profile, bool) {
	if len(pts) == 0 {
		return store.Profile{}, false
	}
	v := slices.Max(slices.Collect(maps.Keys(pts)))
	src, err := p.Store.Get(store.Key{Board: k.Board, Workload: k.Workload, Role: k.Role, Mode: k.Mode, Batch: k.Batch, MicroBatch: v})
	if err != nil {
		// Measured in this visit but not stored (a repeat): the point's own figures.
		t := pts[v]
		src = store.Profile{TimeMS: store.TimeStats{Mean: t.TimeMS, P50: t.TimeMS, P95: t.TimeMS}, PowerMW: store.PowerStats{Mean: t.PowerMW}, Samples: 1}
	}
	scale := float64(k.Batch) / float64(v)
	pw := pts[v].PowerMW * max(1, ratios[sizePair{k.Batch, v}].power)
	for _, mw := range readable {
		pw = max(pw, mw)
	}
	now := p.clock().Now().UTC()
	return store.Profile{Board: k.Board, Workload: k.Workload, Role: k.Role, Mode: k.Mode, Batch: k.Batch,
		TimeMS:  store.TimeStats{Mean: src.TimeMS.Mean * scale, P50: src.TimeMS.P50 * scale, P95: src.TimeMS.P95 * scale, Stddev: src.TimeMS.Stddev * scale},
		PowerMW: store.PowerStats{Mean: pw, Stddev: src.PowerMW.Stddev}, Samples: max(src.Samples, 1), PowerSamples: src.PowerSamples,
		StartedAt: now, FinishedAt: now, Source: store.SourceLive, Throttled: src.Throttled, Bound: true}, true
}

// boundModes are the modes where the pair's whole minibatch is stored as a bound.
func (p *LiveProfiler) boundModes() map[powermode.Mode]bool {
	ps, err := p.Store.List(store.Filter{Board: p.board(), Workload: p.Pair.Train, Role: truth.Train})
	if err != nil {
		p.logger().Warn("reading stored profiles", "err", err)
	}
	out := map[powermode.Mode]bool{}
	for _, x := range ps {
		if x.Bound && x.Batch == p.Pair.TrainBatch && x.MicroBatch == 0 {
			out[x.Mode] = true
		}
	}
	return out
}

// boundHolds says a whole minibatch stored as a bound at mp's mode is still over the
// room by the turns measured there (turnOverRoom): the room this profiler judges, and
// the sizes below the minibatch. False where the room is not judged (roomOn): the
// minibatch is then measured as any point.
func (p *LiveProfiler) boundHolds(mp plan.ModeProfile, ratios map[sizePair]sizeRatio) bool {
	if !p.roomOn() {
		return false
	}
	pts := trainPoints(mp)
	delete(pts, p.Pair.TrainBatch)
	return len(pts) > 0 && p.turnOverRoom(p.Pair.TrainBatch, pts, shortestInfer(mp.Infer), ratios)
}

// inferOverRoom says inference batch b is over the room at a mode where at was measured:
// beside the shortest training turn measured there, a smaller batch measured there is
// (batches grow with their size), or b's predicted turn (predictInfer), lowered by
// microPredictSlack, is. False when it cannot be judged (no training turn or no smaller
// batch measured there): the batch is then measured. The decision never claims such a
// batch beside this budget, and each of its profile batches makes the requests arriving
// during it late (on the Orin NX at 10 W, batches of 16 and 32 took 61 and 118 ms beside
// a 75 ms budget).
func (p *LiveProfiler) inferOverRoom(b int, at plan.ModeProfile, iratios map[sizePair]sizeRatio) bool {
	pts := trainPoints(at)
	if len(pts) == 0 {
		return false
	}
	trainMS := slices.MinFunc(slices.Collect(maps.Values(pts)), func(x, y plan.TrainPoint) int { return cmp.Compare(x.TimeMS, y.TimeMS) }).TimeMS
	for _, ip := range at.Infer {
		if ip.Batch < b && p.overRoom(trainMS, ip.TimeMS) {
			return true
		}
	}
	pred, ok := predictInfer(b, at.Infer, iratios)
	return ok && p.overRoom(trainMS, microPredictSlack*pred.TimeMS)
}

// predictInfer predicts inference batch b's turn from the two largest batches measured
// below it, along the line through them (a batch's time is flat at small sizes and then
// grows in proportion, so the line from below errs low), its power the larger one's (a
// bigger batch keeps the GPU at least as busy); with one, that batch × the least ratio
// of the two batches over the stored modes (iratios, inferRatios). False otherwise.
func predictInfer(b int, ps []plan.InferPoint, iratios map[sizePair]sizeRatio) (plan.InferPoint, bool) {
	var below []plan.InferPoint
	for _, ip := range ps {
		if ip.Batch < b {
			below = append(below, ip)
		}
	}
	slices.SortFunc(below, func(x, y plan.InferPoint) int { return x.Batch - y.Batch })
	switch {
	case len(below) == 1:
		r, ok := iratios[sizePair{b, below[0].Batch}]
		if !ok {
			return plan.InferPoint{}, false
		}
		return plan.InferPoint{Batch: b, TimeMS: below[0].TimeMS * max(r.time, 1), PowerMW: below[0].PowerMW * max(r.power, 1)}, true
	case len(below) == 0:
		return plan.InferPoint{}, false
	}
	v1, v2 := below[len(below)-1], below[len(below)-2]
	f := float64(b-v1.Batch) / float64(v1.Batch-v2.Batch)
	return plan.InferPoint{Batch: b, TimeMS: max(v1.TimeMS, v1.TimeMS+(v1.TimeMS-v2.TimeMS)*f), PowerMW: max(v1.PowerMW, v2.PowerMW)}, true
}

// aloneOn says whether this profiler leaves out the inference batches that alone take
// longer than the latency budget (inferOverBudget): the pair's search (ByRoom) with a
// latency budget, measuring the stream. It holds in a first search too, where the
// batches over the room are measured (InferByRoom unset): such a batch is over the
// budget with training paused and at any rate, so no decision claims it at this mode.
func (p *LiveProfiler) aloneOn() bool {
	return p.ByRoom && p.LatencyMS > 0 && p.Only == ""
}

// fillAbsent completes mp, read from the store, with every size a visit leaves out, at
// its predicted turn: roomFill where the room chooses the sizes, else inferFill for the
// batches over the budget alone; ok is false when a missing size is not one a visit
// leaves out (the mode must then be measured).
func (p *LiveProfiler) fillAbsent(mp plan.ModeProfile) (plan.ModeProfile, bool) {
	if p.roomOn() {
		return p.roomFill(mp, p.microRatios(), p.inferRatios())
	}
	if !p.aloneOn() {
		return mp, false
	}
	return p.inferFill(mp, p.inferRatios()) // no micro-batch sizes declared (roomOn)
}

// inferOverBudget says inference batch b alone takes longer than the latency budget at a
// mode where the batches ps were measured: a smaller batch measured there does (batches
// grow with their size), or b's predicted turn (predictInfer), lowered by
// microPredictSlack, does. Each of its requests waits at least its turn, so the batch
// cannot keep the budget there; and each of its profile batches holds the GPU from the
// real requests for longer than their budget (AGX, YOLOv8n at GPU 612 MHz beside a
// 150 ms budget: batches of 16 and 32 took 190 and 380 ms, twelve of them per mode, and
// the first search broke the p99 for 121 of its 145 s). False when it cannot be judged or
// aloneOn does not hold: the batch is then measured.
func (p *LiveProfiler) inferOverBudget(b int, ps []plan.InferPoint, iratios map[sizePair]sizeRatio) bool {
	if !p.aloneOn() {
		return false
	}
	for _, ip := range ps {
		if ip.Batch < b && ip.TimeMS > p.LatencyMS {
			return true
		}
	}
	pred, ok := predictInfer(b, ps, iratios)
	return ok && microPredictSlack*pred.TimeMS > p.LatencyMS
}

// inferFill completes mp's inference batches with every one of the pair's it lacks, at
// the batch's predicted turn, when each is over the budget alone there (inferOverBudget)
// or, with InferByRoom, over the room (inferOverRoom); ok is false when one is not (or
// cannot be judged): a searcher must then have the mode measured. As with microFill, a
// filled batch is never stored, so the plan, made from the store, never claims it.
func (p *LiveProfiler) inferFill(mp plan.ModeProfile, iratios map[sizePair]sizeRatio) (plan.ModeProfile, bool) {
	if len(mp.Infer) >= len(p.Pair.Batches) {
		return mp, true
	}
	if !p.InferByRoom && !p.aloneOn() {
		return mp, false // this search measures every batch: the mode must be visited
	}
	infer := slices.Clone(mp.Infer)
	for _, b := range slices.Sorted(slices.Values(p.Pair.Batches)) {
		if slices.ContainsFunc(infer, func(ip plan.InferPoint) bool { return ip.Batch == b }) {
			continue
		}
		at := mp
		at.Infer = infer
		if !p.inferOverBudget(b, infer, iratios) && (!p.InferByRoom || !p.roomOn() || !p.inferOverRoom(b, at, iratios)) {
			return mp, false
		}
		ip, ok := predictInfer(b, infer, iratios)
		if !ok {
			return mp, false
		}
		infer = append(infer, ip)
		slices.SortFunc(infer, func(x, y plan.InferPoint) int { return x.Batch - y.Batch })
	}
	mp.Infer = infer
	return mp, true
}

// roomFill is microFill then inferFill: a profile for the searchers with every size the
// room left out, at its predicted turn.
func (p *LiveProfiler) roomFill(mp plan.ModeProfile, ratios, iratios map[sizePair]sizeRatio) (plan.ModeProfile, bool) {
	mp, ok := p.microFill(mp, ratios)
	if !ok {
		return mp, false
	}
	return p.inferFill(mp, iratios)
}

// inferRatios relates two inference batches' turns across the stored modes that
// measured both, as microRatios does training sizes.
func (p *LiveProfiler) inferRatios() map[sizePair]sizeRatio {
	return p.storedRatios(func(mp plan.ModeProfile) map[int][2]float64 {
		out := map[int][2]float64{}
		for _, ip := range mp.Infer {
			out[ip.Batch] = [2]float64{ip.TimeMS, ip.PowerMW}
		}
		return out
	})
}
