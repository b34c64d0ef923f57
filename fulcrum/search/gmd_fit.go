package search

import (
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// smooth combines every profiled value with the prediction of a local model fitted to
// the other profiles (leave-one-out), weighting each by the inverse of its variance:
// sigma² for a measurement, and for a prediction what the leave-one-out residuals show
// beyond the measurement noise (model misfit included). A mode whose neighbours predict
// it well is then known better than one measurement, and needs a smaller margin; where
// the model fits badly the weight goes back to the measurement and the full margin.
// It returns the combined profiles and, per profile, the margins (DefaultGMDMarginSigmas
// standard deviations) for times and for powers.
func (w *walk) smooth(sigma float64) ([]plan.ModeProfile, []float64, []float64) {
	n := len(w.known)
	out := make([]plan.ModeProfile, n)
	mT, mP := make([]float64, n), make([]float64, n)
	preds := make([]*plan.ModeProfile, n)
	var rT, rP float64
	var nT, nP int
	var step powermode.Index
	for k, d := range w.sp.Dims() {
		step[k] = max(1, (d+2)/4)
	}
	s2 := sigma * sigma
	for i, mp := range w.known {
		out[i] = mp.Clone()
		n := float64(w.repeats(mp.Mode))
		mT[i], mP[i] = DefaultGMDMarginSigmas*sigma/math.Sqrt(n), DefaultGMDMarginSigmas*sigma/math.Sqrt(n)
		idx, ok := w.sp.Index(mp.Mode)
		if !ok {
			continue
		}
		f, ok := w.fitAround(idx, step, mp, true)
		if !ok {
			continue
		}
		pr := f.predict(mp.Mode, mp)
		preds[i] = &pr
		// Residuals beyond what the (averaged) measurement's own noise explains.
		ex := s2 / n
		d := math.Log(mp.Train.TimeMS / pr.Train.TimeMS)
		rT, nT = rT+d*d-ex, nT+1
		d = mp.Train.PowerMW/pr.Train.PowerMW - 1
		rP, nP = rP+d*d-ex, nP+1
		for j, ip := range mp.Infer {
			d = math.Log(ip.TimeMS / pr.Infer[j].TimeMS)
			rT, nT = rT+d*d-ex, nT+1
			d = ip.PowerMW/pr.Infer[j].PowerMW - 1
			rP, nP = rP+d*d-ex, nP+1
		}
		for c, t := range mp.Micro {
			d = math.Log(t.TimeMS / pr.Micro[c].TimeMS)
			rT, nT = rT+d*d-ex, nT+1
			d = t.PowerMW/pr.Micro[c].PowerMW - 1
			rP, nP = rP+d*d-ex, nP+1
		}
	}
	if nT < 2*nFeat {
		return out, mT, mP
	}
	// What the residuals show beyond the measurement noise, at least a quarter of it:
	// the residual estimate itself is noisy.
	predT := math.Max(rT/float64(nT), s2/4)
	predP := math.Max(rP/float64(nP), s2/4)
	wt, wp := 1/predT, 1/predP
	for i, pr := range preds {
		if pr == nil {
			continue
		}
		// An average of n measurements weighs n times one.
		wm := float64(w.repeats(out[i].Mode)) / s2
		ct, cp := 1/math.Sqrt(wm+wt), 1/math.Sqrt(wm+wp)
		// The blend may raise a value, never lower it below its measurement: a
		// prediction below the measurement may be the model's bias (its misfit is not
		// zero-mean), and a measurement above the truth is already on the safe side.
		blendT := func(meas, pred float64) float64 {
			return math.Max(meas, math.Exp((wm*math.Log(meas)+wt*math.Log(pred))/(wm+wt)))
		}
		blendP := func(meas, pred float64) float64 { return math.Max(meas, (wm*meas+wp*pred)/(wm+wp)) }
		o := &out[i]
		o.Train.TimeMS, o.Train.PowerMW = blendT(o.Train.TimeMS, pr.Train.TimeMS), blendP(o.Train.PowerMW, pr.Train.PowerMW)
		for j := range o.Infer {
			o.Infer[j].TimeMS = blendT(o.Infer[j].TimeMS, pr.Infer[j].TimeMS)
			o.Infer[j].PowerMW = blendP(o.Infer[j].PowerMW, pr.Infer[j].PowerMW)
		}
		for c := range o.Micro {
			o.Micro[c].TimeMS = blendT(o.Micro[c].TimeMS, pr.Micro[c].TimeMS)
			o.Micro[c].PowerMW = blendP(o.Micro[c].PowerMW, pr.Micro[c].PowerMW)
		}
		mT[i], mP[i] = DefaultGMDMarginSigmas*ct, DefaultGMDMarginSigmas*cp
	}
	return out, mT, mP
}

// Regression features of a mode. Times scale roughly as 1/clock, so log time is fitted
// against the log of each knob; board power is a sum of per-component terms, so power
// is fitted linearly against the online cores and the square of each clock relative to
// its top level: dynamic power goes as f·V² and DVFS raises V with f, so power is convex
// in the clock (between f at the voltage floor and f³ at the top; a line through low
// clocks underestimates the high ones, TestGMDPowerModelIsConvex).
func (w *walk) timeFeatures(m powermode.Mode) [powermode.NumKnobs]float64 {
	return [powermode.NumKnobs]float64{math.Log(float64(m.Cores)), math.Log(float64(m.CPUKHz)), math.Log(float64(m.GPUHz)), math.Log(float64(m.EMCHz))}
}
func (w *walk) powerFeatures(m powermode.Mode) [powermode.NumKnobs]float64 {
	sq := func(x float64) float64 { return x * x }
	return [powermode.NumKnobs]float64{float64(m.Cores) / w.top.Cores, sq(float64(m.CPUKHz) / w.top.CPUKHz), sq(float64(m.GPUHz) / w.top.GPUHz), sq(float64(m.EMCHz) / w.top.EMCHz)}
}

// localFit is a weighted least-squares fit, around one mode, of every profiled
// quantity: log times and powers, each affine in its features.
type localFit struct {
	w          *walk
	tc, pc     [powermode.NumKnobs]float64 // feature centres (the current mode)
	time, powr [][]float64                 // per quantity: intercept then one slope per knob
	nb         int
	// nm is the number of training micro-batch sizes fitted (issue 32): quantities
	// 1+nb … nb+nm, after the training minibatch (0) and the inference batches.
	nm int
}

// wls solves the ridge-regularised weighted least squares of ys on xs (rows with a
// leading 1), one coefficient vector per target.
func wls(xs [][nFeat]float64, ys [][]float64, wts []float64) ([][]float64, bool) {
	var ata [nFeat][nFeat]float64
	nq := len(ys[0])
	atb := make([][nFeat]float64, nq)
	for r, x := range xs {
		for i := range nFeat {
			for j := range nFeat {
				ata[i][j] += wts[r] * x[i] * x[j]
			}
			for q := range nq {
				atb[q][i] += wts[r] * x[i] * ys[r][q]
			}
		}
	}
	// A small ridge keeps a knob that has not moved yet (slope unidentified) at zero.
	for i := 1; i < nFeat; i++ {
		ata[i][i] += 1e-4
	}
	a := mat.NewSymDense(nFeat, nil)
	for i := range nFeat {
		for j := i; j < nFeat; j++ {
			a.SetSym(i, j, ata[i][j])
		}
	}
	var ch mat.Cholesky
	if !ch.Factorize(a) {
		return nil, false
	}
	out := make([][]float64, nq)
	for q := range nq {
		var beta mat.VecDense
		if err := ch.SolveVecTo(&beta, mat.NewVecDense(nFeat, atb[q][:])); err != nil {
			return nil, false
		}
		out[q] = slices.Clone(beta.RawVector().Data)
	}
	return out, true
}

// fit builds the local model around cur. Points are weighted by their distance from cur
// in units of the current steps, so the gradient is local but uses every profile.
func (w *walk) fit(cur powermode.Index, step powermode.Index, curP plan.ModeProfile) (*localFit, bool) {
	return w.fitAround(cur, step, curP, false)
}

// fitAround is fit; loo leaves the centre's own profile out and does not anchor the
// model there (a leave-one-out prediction of it).
func (w *walk) fitAround(cur powermode.Index, step powermode.Index, curP plan.ModeProfile, loo bool) (*localFit, bool) {
	f := &localFit{w: w, tc: w.timeFeatures(curP.Mode), pc: w.powerFeatures(curP.Mode), nb: len(curP.Infer), nm: len(curP.Micro)}
	var xt, xp [][nFeat]float64
	var yt, yp [][]float64
	var wts []float64
	for _, mp := range w.known {
		// An estimated profile (a mode abandoned over the power budget) has borrowed
		// times: fitted, it would tell the model the knob it raised buys nothing.
		if mp.Estimated || len(mp.Infer) != f.nb || len(mp.Micro) != f.nm || (loo && mp.Mode == curP.Mode) {
			continue
		}
		idx, ok := w.sp.Index(mp.Mode)
		if !ok {
			continue
		}
		d := 0.0
		for k := range powermode.NumKnobs {
			d += math.Abs(float64(idx[k]-cur[k])) / float64(step[k])
		}
		wts = append(wts, 1/(1+(d/gmdFitScale)*(d/gmdFitScale)))
		t, p := w.timeFeatures(mp.Mode), w.powerFeatures(mp.Mode)
		rt, rp := [nFeat]float64{1}, [nFeat]float64{1}
		for k := range powermode.NumKnobs {
			rt[k+1], rp[k+1] = t[k]-f.tc[k], p[k]-f.pc[k]
		}
		xt, xp = append(xt, rt), append(xp, rp)
		qt := []float64{math.Log(mp.Train.TimeMS)}
		qp := []float64{mp.Train.PowerMW}
		for _, ip := range mp.Infer {
			qt, qp = append(qt, math.Log(ip.TimeMS)), append(qp, ip.PowerMW)
		}
		// Each training micro-batch size is one more quantity, fitted like the others:
		// the walk then predicts where a micro-batch fits at modes not profiled yet.
		for _, t := range mp.Micro {
			qt, qp = append(qt, math.Log(t.TimeMS)), append(qp, t.PowerMW)
		}
		yt, yp = append(yt, qt), append(yp, qp)
	}
	if len(wts) < 2 || (loo && len(wts) < nFeat+1) {
		return nil, false
	}
	var ok1, ok2 bool
	f.time, ok1 = wls(xt, yt, wts)
	f.powr, ok2 = wls(xp, yp, wts)
	if !ok1 || !ok2 {
		return nil, false
	}
	if loo {
		return f, true
	}
	// Anchor the model at the current mode's measurement (a Taylor expansion around
	// it): the regression estimates the gradient, not the value where we stand, so a
	// small predicted improvement is not lost in the fit's residual there.
	f.time[0][0], f.powr[0][0] = math.Log(curP.Train.TimeMS), curP.Train.PowerMW
	for j, ip := range curP.Infer {
		f.time[1+j][0], f.powr[1+j][0] = math.Log(ip.TimeMS), ip.PowerMW
	}
	for c, t := range curP.Micro {
		f.time[1+f.nb+c][0], f.powr[1+f.nb+c][0] = math.Log(t.TimeMS), t.PowerMW
	}
	return f, true
}

// lin evaluates one fitted quantity (coefficients c) at features x.
func (f *localFit) lin(c []float64, x, ctr [powermode.NumKnobs]float64) float64 {
	v := c[0]
	for k := range powermode.NumKnobs {
		v += c[k+1] * (x[k] - ctr[k])
	}
	return v
}

// predict returns the profile the local model expects at mode m, with the batch and
// micro-batch sizes of tmpl (a profile the model was fitted on).
func (f *localFit) predict(m powermode.Mode, tmpl plan.ModeProfile) plan.ModeProfile {
	t, p := f.w.timeFeatures(m), f.w.powerFeatures(m)
	lin := f.lin
	// Power cannot fall below a small floor however far the line is extrapolated.
	pw := func(q int) float64 { return math.Max(lin(f.powr[q], p, f.pc), 100) }
	out := plan.ModeProfile{Mode: m, Train: plan.TrainPoint{Batch: tmpl.Train.Batch, TimeMS: math.Exp(lin(f.time[0], t, f.tc)), PowerMW: pw(0)}, Infer: make([]plan.InferPoint, f.nb)}
	for j := range f.nb {
		out.Infer[j] = plan.InferPoint{Batch: tmpl.Infer[j].Batch, TimeMS: math.Exp(lin(f.time[1+j], t, f.tc)), PowerMW: pw(1 + j)}
	}
	if f.nm > 0 {
		out.Micro = make([]plan.TrainPoint, f.nm)
		for c := range f.nm {
			q := 1 + f.nb + c
			out.Micro[c] = plan.TrainPoint{Batch: tmpl.Micro[c].Batch, Minibatch: tmpl.Micro[c].Minibatch, TimeMS: math.Exp(lin(f.time[q], t, f.tc)), PowerMW: pw(q)}
		}
	}
	return out
}

// predictBest returns the unprofiled mode of the trust region around cur whose predicted
// objective is highest, if it beats floor.
func (w *walk) predictBest(cur, step powermode.Index, floor float64) (powermode.Index, bool) {
	return w.predictBestBy(cur, step, floor, w.predObjectives)
}

// predictBestBy is predictBest with another objective, scoring every candidate's
// prediction at once (one decision over them all).
func (w *walk) predictBestBy(cur, step powermode.Index, floor float64, objective func([]plan.ModeProfile) []float64) (powermode.Index, bool) {
	curP, err := w.profileAt(cur)
	if err != nil {
		return cur, false
	}
	f, ok := w.fit(cur, step, curP)
	if !ok {
		return cur, false
	}
	dims := w.sp.Dims()
	best, bestS, found := cur, floor, false
	seen := map[powermode.Index]bool{}
	var cands []powermode.Index
	var off powermode.Index
	var rec func(k int)
	rec = func(k int) {
		if k < powermode.NumKnobs {
			for _, c := range predictSteps {
				if dims[k] < 2 && c != 0 {
					continue
				}
				off[k] = c
				rec(k + 1)
			}
			return
		}
		// Two steps only along one knob: a far jump in several knobs at once lands
		// where the local model knows least, and confounds the next fit.
		far, moved := false, 0
		for j := range powermode.NumKnobs {
			far = far || off[j] < -1 || off[j] > 1
			if off[j] != 0 {
				moved++
			}
		}
		if far && moved > 1 {
			return
		}
		idx := cur
		for j := range powermode.NumKnobs {
			idx[j] = min(max(cur[j]+off[j]*step[j], 0), dims[j]-1)
		}
		if seen[idx] || !w.sp.ContainsIndex(idx) {
			return
		}
		seen[idx] = true
		if _, known := w.score[idx]; known || w.isKnown(idx) {
			return
		}
		cands = append(cands, idx)
	}
	rec(0)
	cands = append(cands, w.edgeMoves(f, cur, curP, step, seen)...)
	preds := make([]plan.ModeProfile, len(cands))
	for i, idx := range cands {
		preds[i] = f.predict(w.sp.Mode(idx), curP)
	}
	for i, s := range objective(preds) {
		if s > bestS {
			best, bestS, found = cands[i], s, true
		}
	}
	return best, found
}

// edgeMoves are the trades along the power edge: one knob up by one or two of its
// steps and another knob down to the level at which the predicted training power
// comes back closest to the current mode's (e.g. GPU clock bought with cores or EMC).
// The trust region's ± steps rarely land on the budget edge itself; these do. seen
// holds the trust region's candidates and is extended.
func (w *walk) edgeMoves(f *localFit, cur powermode.Index, curP plan.ModeProfile, step powermode.Index, seen map[powermode.Index]bool) []powermode.Index {
	dims := w.sp.Dims()
	pw := func(idx powermode.Index) float64 { return f.lin(f.powr[0], w.powerFeatures(w.sp.Mode(idx)), f.pc) }
	target := pw(cur)
	var out []powermode.Index
	for up := range powermode.NumKnobs {
		for _, mult := range [...]int{1, 2} {
			hi := cur
			hi[up] = min(cur[up]+mult*step[up], dims[up]-1)
			if hi[up] == cur[up] {
				continue
			}
			for down := range powermode.NumKnobs {
				if down == up {
					continue
				}
				pick, gap := hi, math.Inf(1)
				for v := cur[down] - 1; v >= 0; v-- {
					c := hi
					c[down] = v
					if d := math.Abs(pw(c) - target); d < gap {
						pick, gap = c, d
					}
				}
				if pick == hi || seen[pick] || !w.sp.ContainsIndex(pick) {
					continue
				}
				seen[pick] = true
				if _, known := w.score[pick]; known || w.isKnown(pick) {
					continue
				}
				out = append(out, pick)
			}
		}
	}
	return out
}

const nFeat = powermode.NumKnobs + 1

// gmdFitScale is the distance, in steps summed over knobs, at which a profile's weight
// in the local fit halves.
const gmdFitScale = 2.0

// predictSteps are the multiples of each knob's step in the trust region.
var predictSteps = [...]int{-2, -1, 0, 1, 2}
