package search

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/fulcrum-edge/fulcrum/fulcrum/gp"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// LearnModel runs an ALS campaign for the pair of p (p.Budgets are not used) and
// returns the learned model. The campaign: set up (free known profiles first), seed
// with a space-filling design, then profile the most uncertain candidate until a
// stopping rule holds, and fit the surrogates one last time for the stored model.
func (a *ALS) LearnModel(ctx context.Context, p Problem, prof Profiler) (*ALSModel, error) {
	c, err := newALSCampaign(ctx, a.opts, p, prof)
	if err != nil {
		return nil, err
	}
	if err := c.seed(); err != nil {
		return nil, err
	}
	if err := c.acquireUntilStopped(); err != nil {
		return nil, err
	}
	if err := c.finalFit(); err != nil {
		return nil, err
	}
	c.o.Logger.Debug("als campaign done", "profiles", len(c.m.campaign), "stop", c.m.stop, "pareto", len(c.m.front))
	return c.m, nil
}

// alsCampaign is the state of one LearnModel run, shared by its steps: the model being
// learned, what has been measured, the surrogates and their last hyper-parameters, the
// random stream (drawn from in a fixed order, so a seed gives one campaign) and the
// stopping rule's memory.
type alsCampaign struct {
	ctx          context.Context
	o            ALSOptions
	p            Problem
	prof         Profiler
	batches      []int
	budget       int     // profiles the campaign may pay for
	gpNoiseFloor float64 // lower bound on the GPs' noise
	rng          *rand.Rand
	m            *ALSModel
	xs           [][]float64 // every member's inputs
	measured     map[powermode.Mode]bool
	ys           [][]float64 // outputs of m.profiles, in order
	gps          [numGroups]*gp.GP
	prevHyper    [numGroups]*gp.Hyper // warm starts for the next fit
	lastFit      int                  // len(m.profiles) at the last full fit; 0 before any
	stable       int                  // rounds the predicted front has not changed
	prevFront    []int
}

// newALSCampaign checks p, sizes the budget and takes in the profiles the profiler
// already knows, which cost nothing.
func newALSCampaign(ctx context.Context, o ALSOptions, p Problem, prof Profiler) (*alsCampaign, error) {
	batches, err := checkProblem(p)
	if err != nil {
		return nil, err
	}
	total := p.MaxProfiles
	if total <= 0 {
		total = o.MaxProfiles
	}
	c := &alsCampaign{ctx: ctx, o: o, p: p, prof: prof, batches: batches,
		// The campaign leaves Confirm profiles to each answer, but always takes the two a
		// surrogate needs.
		budget: max(total-o.Confirm, min(total, 2)),
		rng:    rand.New(rand.NewPCG(p.Seed^o.Seed, 0x616c73)),
		// A profiler that knows its noise (Problem.NoiseRel) bounds the GPs' noise by it.
		gpNoiseFloor: max(o.NoiseFloor, p.NoiseRel),
		measured:     map[powermode.Mode]bool{},
	}
	c.m = &ALSModel{opts: o, space: p.Space, train: p.Train, infer: p.Infer, trainBatch: p.TrainBatch, batches: batches,
		rules: p.Rules, noiseRel: max(p.NoiseRel, p.Rules.NoiseRel), maxProfiles: total}
	c.m.index()
	c.xs = c.m.allInputs()
	for _, mp := range prof.Known() {
		c.add(mp) // free: profiles someone already paid for
	}
	return c, nil
}

// add records mp if it is a new mode of the space with usable outputs, and reports
// whether it did.
func (c *alsCampaign) add(mp plan.ModeProfile) bool {
	if c.measured[mp.Mode] || !c.p.Space.Contains(mp.Mode) {
		return false
	}
	y, ok := outputsOf(mp, c.batches)
	if !ok {
		return false
	}
	c.measured[mp.Mode] = true
	c.m.profiles = append(c.m.profiles, mp.Clone())
	c.ys = append(c.ys, y)
	return true
}

// profile pays for a profile of md (why is logged and put in errors) and records it.
func (c *alsCampaign) profile(md powermode.Mode, why string) error {
	mp, err := c.prof.Profile(c.ctx, md)
	if err != nil {
		return fmt.Errorf("als: profiling mode %s (%s): %w", md, why, err)
	}
	mp.Mode = md
	if !c.add(mp) {
		return fmt.Errorf("als: the profile of mode %s lacks a batch size of %v or has a non-positive time or power: fix the profiler", md, c.batches)
	}
	c.m.campaign = append(c.m.campaign, md)
	c.o.Logger.Debug("als profiled", "mode", md.String(), "why", why, "count", len(c.m.campaign))
	return nil
}

// seed profiles a space-filling design over the members, both extremes first, so the
// surrogates start from data spread over the space; known profiles count towards it.
func (c *alsCampaign) seed() error {
	m := c.m
	nSeed := min(c.o.SeedModes, c.budget, len(m.modes))
	for _, i := range seedDesign(c.xs, m.modes, c.measured, nSeed-min(len(m.profiles), nSeed), c.rng) {
		if err := c.profile(m.modes[i], "seed"); err != nil {
			return err
		}
	}
	if len(m.profiles) < 2 {
		return fmt.Errorf("als: %d usable profiles after seeding: the space has too few modes or the budget (%d) is too small; allow at least 2", len(m.profiles), c.budget)
	}
	return nil
}

// fit fits every group's surrogate to the data, warm-started from the previous
// hyper-parameters (restarts < 0: the warm start only).
func (c *alsCampaign) fit(restarts int) error {
	for g := range numGroups {
		x := c.m.dataInputs()
		y := groupOutputs(c.ys, g, len(c.batches))
		model, err := gp.Fit(c.ctx, x, y, gp.FitOptions{Restarts: restarts, Init: c.prevHyper[g], Rand: c.rng, MinNoiseSD: c.gpNoiseFloor})
		if err != nil {
			return fmt.Errorf("als: fitting the %s surrogate: %w", groupName(g), err)
		}
		c.gps[g] = model
		h := model.Hyper()
		c.prevHyper[g] = &h
	}
	return nil
}

// update brings the surrogates up to the data. Hyper-parameters are refit often while
// data are few, then every ~12% growth; in between, warm starts keep the cost to one
// short L-BFGS run per group, and otherwise the GPs are only reconditioned.
func (c *alsCampaign) update() error {
	n := len(c.m.profiles)
	if c.lastFit == 0 || n-c.lastFit >= max(1, c.lastFit/8) {
		restarts := -1 // warm start only
		if c.lastFit == 0 {
			restarts = c.o.Restarts
		}
		if err := c.fit(restarts); err != nil {
			return err
		}
		c.lastFit = n
		return nil
	}
	return c.m.recondition(c.gps[:], c.ys)
}

// acquireUntilStopped is the acquisition loop: update the surrogates and predictions,
// then profile the most uncertain candidate, until the budget is spent or a stopping
// rule holds. m.stop says which.
func (c *alsCampaign) acquireUntilStopped() error {
	m := c.m
	m.stop = "budget"
	for {
		if err := c.update(); err != nil {
			return err
		}
		m.predict(c.gps[:], c.xs)
		if len(m.campaign) >= c.budget {
			return nil
		}
		next, width, front := m.acquire(c.measured)
		if c.stopped(next, width, front) {
			return nil
		}
		if err := c.ctx.Err(); err != nil {
			return fmt.Errorf("als: %w", err)
		}
		if err := c.profile(m.modes[next], fmt.Sprintf("uncertainty %.3f", width)); err != nil {
			return err
		}
	}
}

// stopped is the stopping rule, given the acquisition's answer (next < 0: no candidate
// left; width: its uncertainty; front: the predicted Pareto set). It reports whether the
// campaign is resolved or stable, and sets m.stop to why.
func (c *alsCampaign) stopped(next int, width float64, front []int) bool {
	o := c.o
	if next < 0 {
		c.m.stop = "resolved: every mode is profiled or ruled out"
		return true
	}
	if width < o.StopSigma {
		c.m.stop = fmt.Sprintf("resolved: largest candidate uncertainty %.3f < %.3f", width, o.StopSigma)
		return true
	}
	if slices.Equal(front, c.prevFront) {
		c.stable++
	} else {
		c.stable = 0
	}
	c.prevFront = front
	if o.StableRounds > 0 && c.stable >= o.StableRounds && width < 2*o.StopSigma {
		c.m.stop = fmt.Sprintf("stable: predicted Pareto set unchanged for %d profiles", c.stable)
		return true
	}
	return false
}

// finalFit refits with restarts (the stored model deserves the best hyper-parameters),
// and stores the hyper-parameters, data and derived answers in the model.
func (c *alsCampaign) finalFit() error {
	m := c.m
	if len(m.profiles) > c.lastFit || c.o.Restarts > 0 {
		if err := c.fit(c.o.Restarts); err != nil {
			return err
		}
		m.predict(c.gps[:], c.xs)
	}
	for g := range numGroups {
		m.hyper[g] = c.gps[g].Hyper()
	}
	m.xData, m.yData = m.dataInputs(), c.ys
	m.finish(c.gps[:])
	return nil
}

func (m *ALSModel) index() {
	m.modes = m.space.Modes()
	m.pos = make(map[powermode.Mode]int, len(m.modes))
	for i, md := range m.modes {
		m.pos[md] = i
	}
	m.in = newInputs(m.space)
}

// allInputs returns the GP inputs of every mode of the space.
func (m *ALSModel) allInputs() [][]float64 {
	xs := make([][]float64, len(m.modes))
	for i, md := range m.modes {
		idx, _ := m.space.Index(md)
		xs[i] = m.in.at(idx)
	}
	return xs
}

// dataInputs returns the GP inputs of the profiles, in order.
func (m *ALSModel) dataInputs() [][]float64 {
	x := make([][]float64, len(m.profiles))
	for i, mp := range m.profiles {
		idx, _ := m.space.Index(mp.Mode)
		x[i] = m.in.at(idx)
	}
	return x
}

// groupOutputs extracts group g's columns from the per-profile outputs.
func groupOutputs(ys [][]float64, g, nb int) [][]float64 {
	out := make([][]float64, len(ys))
	for i, y := range ys {
		switch g {
		case grpTrainTime:
			out[i] = []float64{y[0]}
		case grpTrainPower:
			out[i] = []float64{y[1]}
		case grpInferTime:
			out[i] = slices.Clone(y[2 : 2+nb])
		default:
			out[i] = slices.Clone(y[2+nb:])
		}
	}
	return out
}

// recondition refits the GPs to all data at their current hyper-parameters.
func (m *ALSModel) recondition(gps []*gp.GP, ys [][]float64) error {
	x := m.dataInputs()
	for g := range numGroups {
		gp, err := gp.New(x, groupOutputs(ys, g, len(m.batches)), gps[g].Hyper())
		if err != nil {
			return fmt.Errorf("als: %s surrogate: %w", groupName(g), err)
		}
		gps[g] = gp
	}
	return nil
}

// predict fills mu and sd for every mode.
func (m *ALSModel) predict(gps []*gp.GP, xs [][]float64) {
	nb, no := len(m.batches), m.nOut()
	if len(m.mu) != len(m.modes)*no {
		m.mu, m.sd = make([]float64, len(m.modes)*no), make([]float64, len(m.modes)*no)
	}
	var sc gp.Scratch
	buf := make([]float64, nb)
	for i, x := range xs {
		mu, sd := m.mu[i*no:(i+1)*no], m.sd[i*no:(i+1)*no]
		for g := range numGroups {
			gp := gps[g]
			off, cnt := groupSlot(g, nb)
			s := gp.Predict(x, buf[:cnt], &sc)
			for o := range cnt {
				mu[off+o] = buf[o]
				sd[off+o] = s * gp.Scale(o)
			}
		}
	}
}

// groupSlot is where group g's outputs sit in a mode's output vector.
func groupSlot(g, nb int) (off, cnt int) {
	switch g {
	case grpTrainTime:
		return 0, 1
	case grpTrainPower:
		return 1, 1
	case grpInferTime:
		return 2, nb
	default:
		return 2 + nb, nb
	}
}

// objectivePairs lists the (time, power) output pairs whose Pareto sets ALS learns:
// training, and inference at each batch size.
func (m *ALSModel) objectivePairs() [][2]int {
	nb := len(m.batches)
	pairs := [][2]int{{0, 1}}
	for j := range nb {
		pairs = append(pairs, [2]int{2 + j, 2 + nb + j})
	}
	return pairs
}

// acquire applies the ε-PAL rule per objective pair and returns the unprofiled
// candidate with the largest uncertainty (training weighted as much as all inference
// batch sizes together), that uncertainty (Kappa·σ, both objectives combined, largest
// over pairs), and the predicted front (sorted mode positions) for the stability test.
func (m *ALSModel) acquire(measured map[powermode.Mode]bool) (next int, width float64, front []int) {
	o, no, n := m.opts, m.nOut(), len(m.modes)
	pairs := m.objectivePairs()
	score := make([]float64, n)
	wmax := make([]float64, n)
	loX, loY, hiX, hiY := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	mx, my := make([]float64, n), make([]float64, n)
	inFront := make([]bool, n)
	for pi, pr := range pairs {
		weight := 1.0
		if pi > 0 {
			weight = 1 / float64(len(pairs)-1)
		}
		for i := range n {
			a, b := i*no+pr[0], i*no+pr[1]
			mx[i], my[i] = m.mu[a], m.mu[b]
			loX[i], hiX[i] = m.mu[a]-o.Kappa*m.sd[a], m.mu[a]+o.Kappa*m.sd[a]
			loY[i], hiY[i] = m.mu[b]-o.Kappa*m.sd[b], m.mu[b]+o.Kappa*m.sd[b]
		}
		keep := plan.ParetoCandidates(loX, loY, hiX, hiY, o.Epsilon)
		for i := range n {
			if !keep[i] || measured[m.modes[i]] {
				continue
			}
			w := o.Kappa * math.Hypot(m.sd[i*no+pr[0]], m.sd[i*no+pr[1]])
			score[i] += weight * w
			wmax[i] = max(wmax[i], w)
		}
		for _, i := range plan.ParetoFront(mx, my) {
			inFront[i] = true
		}
	}
	next = -1
	for i := range n {
		if score[i] > 0 && (next < 0 || score[i] > score[next]) {
			next = i
		}
		if inFront[i] {
			front = append(front, i)
		}
	}
	for i := range n {
		if score[i] > 0 {
			width = max(width, wmax[i])
		}
	}
	return next, width, front
}

// finish computes what answers need from the final predictions: the noise levels and
// the predicted Pareto set.
func (m *ALSModel) finish(gps []*gp.GP) {
	nb := len(m.batches)
	m.noise = make([]float64, m.nOut())
	for g := range numGroups {
		off, cnt := groupSlot(g, nb)
		for o := range cnt {
			// Log outputs: the noise sd is the relative noise.
			m.noise[off+o] = gps[g].NoiseSD(o)
		}
	}
	no := m.nOut()
	inFront := make([]bool, len(m.modes))
	mx, my := make([]float64, len(m.modes)), make([]float64, len(m.modes))
	for _, pr := range m.objectivePairs() {
		for i := range m.modes {
			mx[i], my[i] = m.mu[i*no+pr[0]], m.mu[i*no+pr[1]]
		}
		for _, i := range plan.ParetoFront(mx, my) {
			inFront[i] = true
		}
	}
	m.front = nil
	for i, in := range inFront {
		if in {
			m.front = append(m.front, m.modes[i])
		}
	}
}

// seedDesign picks k members greedily: first the two extreme corners (lowest and
// highest levels, snapped into the space), then each time the mode farthest from those
// chosen (maximin), with a bonus for levels not used yet on each knob, as a Latin
// hypercube would. Modes already measured count as chosen.
func seedDesign(xs [][]float64, modes []powermode.Mode, measured map[powermode.Mode]bool, k int, rng *rand.Rand) []int {
	if k <= 0 {
		return nil
	}
	n := len(xs)
	dmin := make([]float64, n)   // squared distance to the nearest chosen
	proj := make([][]float64, n) // per knob: distance to the nearest chosen level
	for i := range n {
		dmin[i] = math.Inf(1)
		proj[i] = []float64{1, 1, 1, 1}
	}
	chosen := make([]bool, n)
	take := func(j int) {
		chosen[j] = true
		for i := range n {
			var d2 float64
			for d := range xs[i] {
				dd := xs[i][d] - xs[j][d]
				d2 += dd * dd
				proj[i][d] = min(proj[i][d], math.Abs(dd))
			}
			dmin[i] = min(dmin[i], d2)
		}
	}
	for i, md := range modes {
		if measured[md] {
			take(i)
		}
	}
	var out []int
	pick := func(j int) {
		if j >= 0 && !chosen[j] && len(out) < k {
			take(j)
			out = append(out, j)
		}
	}
	corner := func(sign float64) int {
		best, bestV := -1, math.Inf(-1)
		for i, x := range xs {
			var v float64
			for _, c := range x {
				v += sign * c
			}
			if v > bestV {
				best, bestV = i, v
			}
		}
		return best
	}
	pick(corner(-1))
	pick(corner(1))
	for len(out) < k {
		best, bestV := -1, math.Inf(-1)
		for i := range n {
			if chosen[i] {
				continue
			}
			var p float64
			for _, v := range proj[i] {
				p += v
			}
			// Tiny random tie-break so equal scores do not always favour low ordinals.
			v := math.Sqrt(dmin[i]) + p/float64(len(proj[i])) + 1e-9*rng.Float64()
			if v > bestV {
				best, bestV = i, v
			}
		}
		if best < 0 {
			break
		}
		pick(best)
	}
	return out
}
