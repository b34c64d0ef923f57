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
// returns the learned model.
func (a *ALS) LearnModel(ctx context.Context, p Problem, prof Profiler) (*ALSModel, error) {
	o := a.opts
	batches, err := checkProblem(p)
	if err != nil {
		return nil, err
	}
	total := p.MaxProfiles
	if total <= 0 {
		total = o.MaxProfiles
	}
	// The campaign leaves Confirm profiles to each answer, but always takes the two a
	// surrogate needs.
	budget := max(total-o.Confirm, min(total, 2))
	rng := rand.New(rand.NewPCG(p.Seed^o.Seed, 0x616c73))
	// A profiler that knows its noise (Problem.NoiseRel) bounds the GPs' noise by it.
	gpNoiseFloor := max(o.NoiseFloor, p.NoiseRel)
	m := &ALSModel{opts: o, space: p.Space, train: p.Train, infer: p.Infer, trainBatch: p.TrainBatch, batches: batches,
		rules: p.Rules, noiseRel: max(p.NoiseRel, p.Rules.NoiseRel), maxProfiles: total}
	m.index()
	xs := m.allInputs()
	measured := map[powermode.Mode]bool{}
	var ys [][]float64
	add := func(mp plan.ModeProfile) bool {
		if measured[mp.Mode] || !p.Space.Contains(mp.Mode) {
			return false
		}
		y, ok := outputsOf(mp, batches)
		if !ok {
			return false
		}
		measured[mp.Mode] = true
		m.profiles = append(m.profiles, mp.Clone())
		ys = append(ys, y)
		return true
	}
	for _, mp := range prof.Known() {
		add(mp) // free: profiles someone already paid for
	}
	profile := func(md powermode.Mode, why string) error {
		mp, err := prof.Profile(ctx, md)
		if err != nil {
			return fmt.Errorf("als: profiling mode %s (%s): %w", md, why, err)
		}
		mp.Mode = md
		if !add(mp) {
			return fmt.Errorf("als: the profile of mode %s lacks a batch size of %v or has a non-positive time or power: fix the profiler", md, batches)
		}
		m.campaign = append(m.campaign, md)
		o.Logger.Debug("als profiled", "mode", md.String(), "why", why, "count", len(m.campaign))
		return nil
	}

	// Seed: a space-filling design over the members, both extremes first.
	nSeed := min(o.SeedModes, budget, len(m.modes))
	for _, i := range seedDesign(xs, m.modes, measured, nSeed-min(len(m.profiles), nSeed), rng) {
		if err := profile(m.modes[i], "seed"); err != nil {
			return nil, err
		}
	}
	if len(m.profiles) < 2 {
		return nil, fmt.Errorf("als: %d usable profiles after seeding: the space has too few modes or the budget (%d) is too small; allow at least 2", len(m.profiles), budget)
	}

	var gps [numGroups]*gp.GP
	var prevHyper [numGroups]*gp.Hyper
	fit := func(restarts int) error {
		for g := range numGroups {
			x := m.dataInputs()
			y := groupOutputs(ys, g, len(batches))
			gp, err := gp.Fit(ctx, x, y, gp.FitOptions{Restarts: restarts, Init: prevHyper[g], Rand: rng, MinNoiseSD: gpNoiseFloor})
			if err != nil {
				return fmt.Errorf("als: fitting the %s surrogate: %w", groupName(g), err)
			}
			gps[g] = gp
			h := gp.Hyper()
			prevHyper[g] = &h
		}
		return nil
	}
	lastFit := 0
	stable, prevFront := 0, []int(nil)
	m.stop = "budget"
	for {
		n := len(m.profiles)
		// Refit hyper-parameters often while data are few, then every ~12% growth;
		// in between, warm starts keep the cost to one short L-BFGS run per group.
		if lastFit == 0 || n-lastFit >= max(1, lastFit/8) {
			restarts := -1 // warm start only
			if lastFit == 0 {
				restarts = o.Restarts
			}
			if err := fit(restarts); err != nil {
				return nil, err
			}
			lastFit = n
		} else if err := m.recondition(gps[:], ys); err != nil {
			return nil, err
		}
		m.predict(gps[:], xs)
		if len(m.campaign) >= budget {
			break
		}
		next, width, front := m.acquire(measured)
		if next < 0 {
			m.stop = "resolved: every mode is profiled or ruled out"
			break
		}
		if width < o.StopSigma {
			m.stop = fmt.Sprintf("resolved: largest candidate uncertainty %.3f < %.3f", width, o.StopSigma)
			break
		}
		if slices.Equal(front, prevFront) {
			stable++
		} else {
			stable = 0
		}
		prevFront = front
		if o.StableRounds > 0 && stable >= o.StableRounds && width < 2*o.StopSigma {
			m.stop = fmt.Sprintf("stable: predicted Pareto set unchanged for %d profiles", stable)
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("als: %w", err)
		}
		if err := profile(m.modes[next], fmt.Sprintf("uncertainty %.3f", width)); err != nil {
			return nil, err
		}
	}
	// Final fit with restarts: the stored model deserves the best hyper-parameters.
	if len(m.profiles) > lastFit || o.Restarts > 0 {
		if err := fit(o.Restarts); err != nil {
			return nil, err
		}
		m.predict(gps[:], xs)
	}
	for g := range numGroups {
		m.hyper[g] = gps[g].Hyper()
	}
	m.xData, m.yData = m.dataInputs(), ys
	m.finish(gps[:])
	o.Logger.Debug("als campaign done", "profiles", len(m.campaign), "stop", m.stop, "pareto", len(m.front))
	return m, nil
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
