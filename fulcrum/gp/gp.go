// Package gp is the Gaussian process ALS fits as its surrogate model (docs/design.md §3): a
// Matérn 5/2 ARD kernel with hyper-parameters fitted by maximum marginal likelihood.
package gp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize"
)

// Hyper are the hyper-parameters of a Matérn 5/2 ARD kernel, all as natural logs so
// they serialise and optimise on one scale:
//
//	k(x, x') = σ_f² (1 + √5 r + 5r²/3) exp(−√5 r),  r² = Σ_d ((x_d − x'_d) / ℓ_d)²
//
// plus σ_n² on the diagonal for the observations. They refer to standardised outputs.
type Hyper struct {
	LogLength    []float64 `json:"log_length"`
	LogSignalVar float64   `json:"log_signal_var"`
	LogNoiseVar  float64   `json:"log_noise_var"`
}

func (h Hyper) clone() Hyper {
	h.LogLength = append([]float64(nil), h.LogLength...)
	return h
}

// Bounds of the hyper-parameters (natural logs). Inputs live in [0,1] and outputs are
// standardised, so these bound the plausible: a length scale of 0.03 wiggles between
// adjacent levels of a 30-level knob, 30 is flat; the noise floor keeps K well conditioned.
const (
	gpLogLenMin    = -3.5 // ℓ ≈ 0.03
	gpLogLenMax    = 3.4  // ℓ ≈ 30
	gpLogSigMin    = -4.6 // σ_f² ≈ 0.01
	gpLogSigMax    = 3.0  // σ_f² ≈ 20
	gpLogNoiseMin  = -13.8
	gpLogNoiseMax  = 0.0
	gpJitter       = 1e-9
	gpDefaultLogL  = -0.7 // ℓ ≈ 0.5
	gpDefaultNoise = -6.9 // σ_n² ≈ 1e-3
)

// GP is Gaussian-process regression with a Matérn 5/2 ARD kernel and a constant mean,
// for one or more outputs observed at the same inputs. The outputs share the kernel
// (one Cholesky factor serves all of them) and are standardised separately, so their
// predictive variances differ only by their scale. A GP is immutable after fitting and
// safe for concurrent Predict calls.
type GP struct {
	dim, n, outs int
	noiseLo      float64   // lower bound of LogNoiseVar for fitting
	x            []float64 // n×dim, row-major
	y            [][]float64
	mean, scale  []float64 // per output: standardisation
	hyper        Hyper
	invLen       []float64
	sigVar       float64
	lower        []float64 // Cholesky factor L of K (n×n row-major, lower triangle)
	alpha        []float64 // K⁻¹ Y_std, n×outs row-major
}

// FitOptions controls hyper-parameter fitting.
type FitOptions struct {
	// Restarts is how many extra random starting points L-BFGS tries besides the
	// default (and Init when given): 0 means 2, negative means none.
	Restarts int
	// Init, when non-nil, is tried first (a warm start from an earlier fit).
	Init *Hyper
	// MaxIterations caps L-BFGS major iterations per start (default 80).
	MaxIterations int
	// Rand draws the random starts; nil means a fixed-seed source (deterministic).
	Rand *rand.Rand
	// MinNoiseSD, in output units, bounds every output's fitted noise sd from below. With few points in several dimensions the likelihood can prefer to
	// interpolate the noise; a known measurement-noise floor prevents that.
	MinNoiseSD float64
}

// Fit standardises y (n rows × outputs), fits the hyper-parameters by maximising the
// log marginal likelihood (summed over outputs) with L-BFGS from a few starts, and
// returns the conditioned GP. x holds n inputs of equal dimension, ideally in [0,1].
func Fit(ctx context.Context, x, y [][]float64, opts FitOptions) (*GP, error) {
	g, err := newGPData(x, y)
	if err != nil {
		return nil, err
	}
	if opts.Restarts == 0 {
		opts.Restarts = 2
	}
	if opts.MaxIterations <= 0 {
		opts.MaxIterations = 80
	}
	if opts.MinNoiseSD > 0 {
		// The bound is on the standardised scale, shared by the outputs: the smallest
		// output scale makes it hold for every output.
		sc := math.Inf(1)
		for _, s := range g.scale {
			sc = min(sc, s)
		}
		g.noiseLo = clamp(2*math.Log(opts.MinNoiseSD/sc), gpLogNoiseMin, gpLogNoiseMax-1)
	}
	rng := opts.Rand
	if rng == nil {
		rng = rand.New(rand.NewPCG(1, 2))
	}
	starts := []Hyper{}
	if opts.Init != nil && len(opts.Init.LogLength) == g.dim {
		starts = append(starts, clampHyper(opts.Init.clone()))
	}
	if len(starts) == 0 || opts.Restarts > 0 {
		def := Hyper{LogLength: make([]float64, g.dim), LogSignalVar: 0, LogNoiseVar: gpDefaultNoise}
		for d := range def.LogLength {
			def.LogLength[d] = gpDefaultLogL
		}
		starts = append(starts, def)
	}
	for range opts.Restarts {
		h := Hyper{LogLength: make([]float64, g.dim)}
		for d := range h.LogLength {
			h.LogLength[d] = -2 + 3*rng.Float64() // ℓ in [0.14, 2.7]
		}
		h.LogSignalVar = -1 + 2*rng.Float64()
		h.LogNoiseVar = -9 + 5*rng.Float64()
		starts = append(starts, h)
	}
	best, bestLML := Hyper{}, math.Inf(-1)
	for _, s := range starts {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("fit GP: %w", err)
		}
		h, lml := g.optimise(s, opts.MaxIterations)
		if lml > bestLML {
			best, bestLML = h, lml
		}
	}
	if math.IsInf(bestLML, -1) {
		return nil, errors.New("fit GP: the kernel matrix is not positive definite at any starting point: check the inputs for NaN or duplicates with conflicting outputs")
	}
	if err := g.condition(best); err != nil {
		return nil, err
	}
	return g, nil
}

// New conditions a GP on data with given hyper-parameters, without fitting. It is
// how a stored model is restored: same data and hyper-parameters give the same
// predictions bit for bit.
func New(x, y [][]float64, h Hyper) (*GP, error) {
	g, err := newGPData(x, y)
	if err != nil {
		return nil, err
	}
	if len(h.LogLength) != g.dim {
		return nil, fmt.Errorf("GP: %d length scales for %d input dimensions: the stored model does not match its data", len(h.LogLength), g.dim)
	}
	if err := g.condition(h.clone()); err != nil {
		return nil, err
	}
	return g, nil
}

func newGPData(x, y [][]float64) (*GP, error) {
	n := len(x)
	if n == 0 || len(y) != n {
		return nil, fmt.Errorf("GP: %d inputs and %d outputs: need the same positive number of each", n, len(y))
	}
	dim, outs := len(x[0]), len(y[0])
	if dim == 0 || outs == 0 {
		return nil, errors.New("GP: inputs and outputs need at least one dimension")
	}
	g := &GP{dim: dim, n: n, outs: outs, noiseLo: gpLogNoiseMin, x: make([]float64, 0, n*dim), mean: make([]float64, outs), scale: make([]float64, outs)}
	for i := range n {
		if len(x[i]) != dim || len(y[i]) != outs {
			return nil, fmt.Errorf("GP: row %d has %d inputs and %d outputs, want %d and %d", i, len(x[i]), len(y[i]), dim, outs)
		}
		for _, v := range x[i] {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("GP: input row %d is not finite", i)
			}
		}
		for _, v := range y[i] {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("GP: output row %d is not finite", i)
			}
		}
		g.x = append(g.x, x[i]...)
	}
	g.y = make([][]float64, outs)
	for j := range outs {
		col := make([]float64, n)
		var s float64
		for i := range n {
			col[i] = y[i][j]
			s += col[i]
		}
		mu := s / float64(n)
		var ss float64
		for _, v := range col {
			ss += (v - mu) * (v - mu)
		}
		sd := math.Sqrt(ss / float64(n))
		if sd < 1e-9 {
			sd = 1 // a constant output: nothing to scale
		}
		for i := range col {
			col[i] = (col[i] - mu) / sd
		}
		g.mean[j], g.scale[j], g.y[j] = mu, sd, col
	}
	return g, nil
}

func clampHyper(h Hyper) Hyper {
	for d := range h.LogLength {
		h.LogLength[d] = clamp(h.LogLength[d], gpLogLenMin, gpLogLenMax)
	}
	h.LogSignalVar = clamp(h.LogSignalVar, gpLogSigMin, gpLogSigMax)
	h.LogNoiseVar = clamp(h.LogNoiseVar, gpLogNoiseMin, gpLogNoiseMax)
	return h
}

func clamp(v, lo, hi float64) float64 { return math.Min(math.Max(v, lo), hi) }

// The optimiser works on unbounded u; each log-parameter is mid + half·tanh(u), a
// smooth map onto its bounds (L-BFGS needs no clamping that would break its
// curvature pairs).
func (g *GP) bounds() (lo, hi []float64) {
	p := g.dim + 2
	lo, hi = make([]float64, p), make([]float64, p)
	for d := range g.dim {
		lo[d], hi[d] = gpLogLenMin, gpLogLenMax
	}
	lo[g.dim], hi[g.dim] = gpLogSigMin, gpLogSigMax
	lo[g.dim+1], hi[g.dim+1] = g.noiseLo, gpLogNoiseMax
	return lo, hi
}

func (g *GP) optimise(start Hyper, iters int) (Hyper, float64) {
	lo, hi := g.bounds()
	p := len(lo)
	theta := func(u []float64, th, dth []float64) {
		for i := range p {
			mid, half := (lo[i]+hi[i])/2, (hi[i]-lo[i])/2
			t := math.Tanh(u[i])
			th[i] = mid + half*t
			if dth != nil {
				dth[i] = half * (1 - t*t)
			}
		}
	}
	u0 := make([]float64, p)
	sv := append(append([]float64(nil), start.LogLength...), start.LogSignalVar, start.LogNoiseVar)
	for i := range p {
		mid, half := (lo[i]+hi[i])/2, (hi[i]-lo[i])/2
		r := clamp((sv[i]-mid)/half, -0.999, 0.999)
		u0[i] = math.Atanh(r)
	}
	ws := newGPWork(g)
	// Func and Grad are asked at the same points; evaluate both once per point.
	lastU := make([]float64, p)
	lastF, lastG := math.NaN(), make([]float64, p)
	th, dth, gth := make([]float64, p), make([]float64, p), make([]float64, p)
	eval := func(u []float64) {
		if !math.IsNaN(lastF) && equalF(u, lastU) {
			return
		}
		copy(lastU, u)
		theta(u, th, dth)
		lml, ok := g.lml(ws, th, gth)
		if !ok {
			lastF = 1e10
			for i := range lastG {
				lastG[i] = 0
			}
			return
		}
		lastF = -lml
		for i := range p {
			lastG[i] = -gth[i] * dth[i]
		}
	}
	prob := optimize.Problem{
		Func: func(u []float64) float64 { eval(u); return lastF },
		Grad: func(grad, u []float64) { eval(u); copy(grad, lastG) },
	}
	settings := &optimize.Settings{
		MajorIterations:   iters,
		FuncEvaluations:   4 * iters,
		GradientThreshold: 1e-5,
		Converger:         &optimize.FunctionConverge{Absolute: 1e-6, Relative: 1e-8, Iterations: 10},
	}
	var uBest []float64
	res, err := optimize.Minimize(prob, u0, settings, &optimize.LBFGS{})
	// A line-search failure still leaves the best point found; use it.
	if res != nil && (err == nil || !math.IsNaN(res.F)) {
		uBest = res.X
	} else {
		uBest = u0
	}
	theta(uBest, th, nil)
	lml, ok := g.lml(ws, th, nil)
	if !ok {
		return start, math.Inf(-1)
	}
	h := Hyper{LogLength: append([]float64(nil), th[:g.dim]...), LogSignalVar: th[g.dim], LogNoiseVar: th[g.dim+1]}
	return h, lml
}

func equalF(a, b []float64) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// gpWork holds the scratch matrices of one likelihood evaluation.
type gpWork struct {
	k     *mat.SymDense
	chol  mat.Cholesky
	inv   mat.SymDense
	y     *mat.Dense
	alpha mat.Dense
}

func newGPWork(g *GP) *gpWork {
	y := mat.NewDense(g.n, g.outs, nil)
	for j := range g.outs {
		for i := range g.n {
			y.Set(i, j, g.y[j][i])
		}
	}
	return &gpWork{k: mat.NewSymDense(g.n, nil), y: y}
}

// maternParts returns, for scaled squared distance r², the kernel over σ_f²,
// base = (1+s+s²/3)e^{−s} with s = √5·r, and lenFactor = (5/3)(1+s)e^{−s}, which times
// σ_f²·((x_d−x'_d)/ℓ_d)² is ∂k/∂log ℓ_d.
func maternParts(r2 float64) (base, lenFactor float64) {
	s := math.Sqrt(5 * r2)
	e := math.Exp(-s)
	return (1 + s + s*s/3) * e, (5.0 / 3.0) * (1 + s) * e
}

// lml returns the log marginal likelihood summed over outputs at log-parameters th
// (lengths…, signal, noise) and, when grad is non-nil, its gradient with respect to th.
func (g *GP) lml(ws *gpWork, th []float64, grad []float64) (float64, bool) {
	n, dim := g.n, g.dim
	sig := math.Exp(th[dim])
	noise := math.Exp(th[dim+1])
	inv2 := make([]float64, dim)
	for d := range dim {
		l := math.Exp(th[d])
		inv2[d] = 1 / (l * l)
	}
	for i := range n {
		ws.k.SetSym(i, i, sig+noise+gpJitter)
		xi := g.x[i*dim : (i+1)*dim]
		for j := range i {
			xj := g.x[j*dim : (j+1)*dim]
			var r2 float64
			for d := range dim {
				dd := xi[d] - xj[d]
				r2 += dd * dd * inv2[d]
			}
			b, _ := maternParts(r2)
			ws.k.SetSym(i, j, sig*b)
		}
	}
	if !ws.chol.Factorize(ws.k) {
		return 0, false
	}
	if err := ws.chol.SolveTo(&ws.alpha, ws.y); err != nil && !isCondition(err) {
		return 0, false
	}
	var fit float64
	for j := range g.outs {
		for i := range n {
			fit += ws.y.At(i, j) * ws.alpha.At(i, j)
		}
	}
	k := float64(g.outs)
	lml := -0.5*fit - 0.5*k*ws.chol.LogDet() - 0.5*k*float64(n)*math.Log(2*math.Pi)
	if math.IsNaN(lml) || math.IsInf(lml, 0) {
		return 0, false
	}
	if grad == nil {
		return lml, true
	}
	if err := ws.chol.InverseTo(&ws.inv); err != nil && !isCondition(err) {
		return 0, false
	}
	// ∂L/∂θ = ½ tr((ααᵀ − k K⁻¹) ∂K/∂θ); W is symmetric so sum the lower triangle twice.
	for p := range grad {
		grad[p] = 0
	}
	for i := range n {
		xi := g.x[i*dim : (i+1)*dim]
		for j := 0; j <= i; j++ {
			var aa float64
			for o := range g.outs {
				aa += ws.alpha.At(i, o) * ws.alpha.At(j, o)
			}
			w := aa - k*ws.inv.At(i, j)
			if i == j {
				grad[dim] += 0.5 * w * sig
				grad[dim+1] += 0.5 * w * noise
				continue
			}
			xj := g.x[j*dim : (j+1)*dim]
			var r2 float64
			for d := range dim {
				dd := xi[d] - xj[d]
				r2 += dd * dd * inv2[d]
			}
			b, lf := maternParts(r2)
			grad[dim] += w * sig * b
			for d := range dim {
				dd := xi[d] - xj[d]
				grad[d] += w * sig * lf * dd * dd * inv2[d]
			}
		}
	}
	return lml, true
}

func isCondition(err error) bool {
	var c mat.Condition
	return errors.As(err, &c)
}

// condition factorises K at h and stores what prediction needs.
func (g *GP) condition(h Hyper) error {
	h = clampHyper(h)
	ws := newGPWork(g)
	th := append(append([]float64(nil), h.LogLength...), h.LogSignalVar, h.LogNoiseVar)
	if _, ok := g.lml(ws, th, nil); !ok {
		return errors.New("GP: kernel matrix not positive definite at the given hyper-parameters: the stored model is corrupt or the data contain NaN")
	}
	g.hyper = h
	g.sigVar = math.Exp(h.LogSignalVar)
	g.invLen = make([]float64, g.dim)
	for d := range g.dim {
		g.invLen[d] = math.Exp(-h.LogLength[d])
	}
	var l mat.TriDense
	ws.chol.LTo(&l)
	g.lower = make([]float64, g.n*g.n)
	for i := range g.n {
		for j := 0; j <= i; j++ {
			g.lower[i*g.n+j] = l.At(i, j)
		}
	}
	g.alpha = make([]float64, g.n*g.outs)
	for i := range g.n {
		for o := range g.outs {
			g.alpha[i*g.outs+o] = ws.alpha.At(i, o)
		}
	}
	return nil
}

// Hyper returns the fitted hyper-parameters.
func (g *GP) Hyper() Hyper { return g.hyper.clone() }

// NoiseSD returns the fitted observation-noise standard deviation of output o in
// output units.
func (g *GP) NoiseSD(o int) float64 { return math.Sqrt(math.Exp(g.hyper.LogNoiseVar)) * g.scale[o] }

// LogMarginalLikelihood returns the log marginal likelihood (standardised outputs,
// summed over outputs) at h: the quantity fitting maximises.
func (g *GP) LogMarginalLikelihood(h Hyper) (float64, error) {
	if len(h.LogLength) != g.dim {
		return 0, fmt.Errorf("GP: %d length scales for %d dimensions", len(h.LogLength), g.dim)
	}
	th := append(append([]float64(nil), h.LogLength...), h.LogSignalVar, h.LogNoiseVar)
	v, ok := g.lml(newGPWork(g), th, nil)
	if !ok {
		return 0, errors.New("GP: kernel matrix not positive definite at these hyper-parameters")
	}
	return v, nil
}

// Outputs is the number of outputs the GP models.
func (g *GP) Outputs() int { return g.outs }

// Scratch is per-caller scratch space for Predict, so predictions over thousands of
// points allocate nothing.
type Scratch struct{ ks, v []float64 }

// Predict writes the posterior mean of every output at x into mean (len Outputs) and
// returns the posterior standard deviation of the latent function in standardised
// units; multiply by Scale(o) for output o. scratch may be nil.
func (g *GP) Predict(x []float64, mean []float64, scratch *Scratch) float64 {
	if scratch == nil {
		scratch = &Scratch{}
	}
	if cap(scratch.ks) < g.n {
		scratch.ks, scratch.v = make([]float64, g.n), make([]float64, g.n)
	}
	ks, v := scratch.ks[:g.n], scratch.v[:g.n]
	for i := range g.n {
		xi := g.x[i*g.dim : (i+1)*g.dim]
		var r2 float64
		for d := range g.dim {
			dd := (x[d] - xi[d]) * g.invLen[d]
			r2 += dd * dd
		}
		b, _ := maternParts(r2)
		ks[i] = g.sigVar * b
	}
	for o := range g.outs {
		var s float64
		for i := range g.n {
			s += ks[i] * g.alpha[i*g.outs+o]
		}
		mean[o] = g.mean[o] + g.scale[o]*s
	}
	// v = L⁻¹ k*, variance = σ_f² − vᵀv.
	var vv float64
	for i := range g.n {
		s := ks[i]
		row := g.lower[i*g.n : i*g.n+i]
		for j, l := range row {
			s -= l * v[j]
		}
		v[i] = s / g.lower[i*g.n+i]
		vv += v[i] * v[i]
	}
	return math.Sqrt(math.Max(g.sigVar-vv, 0))
}

// Scale returns the standard deviation used to standardise output o.
func (g *GP) Scale(o int) float64 { return g.scale[o] }
