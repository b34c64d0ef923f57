package search

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// ALSOptions tune the ALS searcher. Zero values take the defaults in brackets.
type ALSOptions struct {
	// MaxProfiles caps the campaign's profiles [50]; Problem.MaxProfiles overrides it.
	MaxProfiles int `json:"max_profiles"`
	// SeedModes is the size of the space-filling initial design [10].
	SeedModes int `json:"seed_modes"`
	// Confirm is how many modes an answer may profile to confirm its choice [2].
	Confirm int `json:"confirm"`
	// Kappa widens the GP confidence boxes (mean ± Kappa·σ) that decide which modes may
	// still be Pareto-optimal during the campaign [2].
	Kappa float64 `json:"kappa"`
	// Epsilon is the ε of ε-PAL, in log units (relative): differences below it do not
	// keep a mode in play [0.01].
	Epsilon float64 `json:"epsilon"`
	// StopSigma ends the campaign when every candidate's Kappa·σ (log units, both
	// objectives combined) is below it: the model is as good as a measurement [0.03].
	StopSigma float64 `json:"stop_sigma"`
	// StableRounds ends the campaign when the predicted Pareto set has not changed for
	// this many profiles and candidates' Kappa·σ is below 2·StopSigma [6]; <0 disables.
	StableRounds int `json:"stable_rounds"`
	// MarginSigmas (k) derates an unprofiled mode's predicted times and powers to
	// exp(μ + k·σ) when ranking which mode to confirm [1.5].
	MarginSigmas float64 `json:"margin_sigmas"`
	// SafetySigmas (z) derates a profiled mode's posterior times and powers to
	// exp(μ + z·σ) (σ ≥ NoiseFloor): the answer must meet the budgets there, so that it
	// stays within budget when its measurement was lucky [1.75].
	SafetySigmas float64 `json:"safety_sigmas"`
	// FallbackSigmas are the smaller safety margins tried, in order, when nothing
	// profiled meets the budgets at SafetySigmas [0.75]; say []float64{-1} for none
	// (negative entries are skipped). On the AGX benchmark adding 0 (the posterior
	// mean) turned no-answers into violations about as often as into answers.
	FallbackSigmas []float64 `json:"fallback_sigmas"`
	// NoiseFloor is the least relative measurement noise assumed [0.02]: the GPs'
	// fitted noise sd (log units) is bounded below by it (or by Problem.NoiseRel when
	// larger), and σ at a profiled mode by it. Without it a GP with ~50 points in 4-D can interpolate the noise and then
	// trust a lucky measurement.
	NoiseFloor float64 `json:"noise_floor"`
	// Restarts are the random L-BFGS restarts of the first and last GP fits [2]
	// (fits in between warm-start from the previous hyper-parameters).
	Restarts int `json:"restarts"`
	// KeepLeftover stops an answer from spending a confirm left over (after the choice
	// was confirmed) on the unprofiled mode that would beat the choice if its profile
	// matched the prediction. Spending it was slightly better on every benchmark metric
	// for ~0.4 more profiles per answer.
	KeepLeftover bool `json:"keep_leftover"`
	// Seed is mixed with Problem.Seed to seed the initial design and GP restarts.
	Seed uint64 `json:"seed"`
	// Logger receives progress at debug level; nil discards.
	Logger *slog.Logger `json:"-"`
}

func (o ALSOptions) withDefaults() ALSOptions {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	deff := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.MaxProfiles, 50)
	def(&o.SeedModes, 10)
	def(&o.Confirm, 2)
	def(&o.StableRounds, 6)
	def(&o.Restarts, 2)
	deff(&o.Kappa, 2)
	deff(&o.Epsilon, 0.01)
	deff(&o.StopSigma, 0.03)
	deff(&o.MarginSigmas, 1.5)
	deff(&o.SafetySigmas, 1.75)
	deff(&o.NoiseFloor, 0.02)
	if o.FallbackSigmas == nil {
		o.FallbackSigmas = []float64{0.75}
	}
	o.FallbackSigmas = slices.DeleteFunc(slices.Clone(o.FallbackSigmas), func(z float64) bool { return z < 0 })
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// ALS is the active-learning searcher of DESIGN §3: Gaussian-process surrogates of
// log time and log power of both workloads over the mode space, a space-filling seed,
// then ε-PAL sampling of the (time, power) Pareto sets until they are resolved or the
// budget is spent. The learned model (ALSModel) answers any budgets with at most
// Confirm new profiles. ALS itself holds only options and is safe for concurrent use.
type ALS struct{ opts ALSOptions }

// NewALS returns an ALS searcher.
func NewALS(opts ALSOptions) *ALS { return &ALS{opts: opts.withDefaults()} }

// Name implements Searcher and PairLearner.
func (a *ALS) Name() string { return "als" }

// Search implements Searcher: a campaign sized so that campaign plus confirmation stay
// within the problem's profile budget, then an answer for p.Budgets.
func (a *ALS) Search(ctx context.Context, p Problem, prof Profiler) (Result, error) {
	budget := p.MaxProfiles
	if budget == 0 {
		budget = a.opts.MaxProfiles
	}
	lp := p
	lp.MaxProfiles = max(budget-a.opts.Confirm, 1)
	m, err := a.LearnModel(ctx, lp, prof)
	if err != nil {
		return Result{}, err
	}
	res, err := m.Answer(ctx, p.Budgets, prof)
	if err != nil {
		return Result{}, err
	}
	res.Profiled = append(m.CampaignModes(), res.Profiled...)
	return res, nil
}

// Learn implements PairLearner.
func (a *ALS) Learn(ctx context.Context, p Problem, prof Profiler) (Answerer, error) {
	return a.LearnModel(ctx, p, prof)
}

// The four surrogate groups. Outputs of one group share a kernel.
const (
	grpTrainTime = iota
	grpTrainPower
	grpInferTime
	grpInferPower
	numGroups
)

// groupName names a surrogate group (in errors and in the stored model).
func groupName(g int) string {
	return [numGroups]string{"train_time", "train_power", "infer_time", "infer_power"}[g]
}

// ALSModel is what an ALS campaign learned about one workload pair: the profiles it
// took, the fitted GP hyper-parameters, and predictions over every mode of the space
// (computed once, so Answer costs a scan of the space). It is immutable and safe for
// concurrent Answer calls. JSON (MarshalJSON / UnmarshalALSModel) stores the profiles
// and hyper-parameters; predictions are recomputed bit for bit on load.
type ALSModel struct {
	opts       ALSOptions
	space      *powermode.Space
	train      string
	infer      string
	trainBatch int
	batches    []int
	profiles   []ModeProfile // the campaign's, in the order used as GP data
	hyper      [numGroups]GPHyper
	front      []powermode.Mode
	stop       string
	campaign   []powermode.Mode // modes this campaign profiled (not inherited ones)

	modes  []powermode.Mode
	pos    map[powermode.Mode]int
	mu, sd []float64 // per mode, nOut values: log τ_T, log π_T, log τ_I(b)…, log π_I(b)…
	noise  []float64 // per output: fitted relative measurement noise (for reports)
	in     inputs
	// Derated values of every mode (as unprofiled, and as profiled where it is in the
	// campaign data), precomputed because they do not depend on budgets.
	derUnmeas, derMeas []float64
	inData             []bool
	xData              [][]float64 // GP inputs of profiles, in order
	yData              [][]float64 // log outputs of profiles, in order
}

// nOut is the number of predicted quantities per mode.
func (m *ALSModel) nOut() int { return 2 + 2*len(m.batches) }

// CampaignModes returns the modes the campaign profiled, in order.
func (m *ALSModel) CampaignModes() []powermode.Mode { return slices.Clone(m.campaign) }

// Profiles returns the campaign's profiles (inherited known ones included).
func (m *ALSModel) Profiles() []ModeProfile {
	out := make([]ModeProfile, len(m.profiles))
	for i, p := range m.profiles {
		out[i] = cloneProfile(p)
	}
	return out
}

// ParetoSet returns the predicted Pareto set: the modes on the predicted (time, power)
// front of training or of inference at any batch size.
func (m *ALSModel) ParetoSet() []powermode.Mode { return slices.Clone(m.front) }

// StopReason says why the campaign ended.
func (m *ALSModel) StopReason() string { return m.stop }

// inputs maps each level of each knob to [0,1] on a log scale: clocks act
// multiplicatively on times, so log-frequency makes the surfaces closer to linear.
type inputs struct{ norm [powermode.NumKnobs][]float64 }

func newInputs(sp *powermode.Space) inputs {
	l := sp.Levels()
	var in inputs
	vals := [powermode.NumKnobs][]float64{}
	for _, c := range l.Cores {
		vals[0] = append(vals[0], float64(c))
	}
	for k, lv := range [][]int64{l.CPUKHz, l.GPUHz, l.EMCHz} {
		for _, v := range lv {
			vals[k+1] = append(vals[k+1], float64(v))
		}
	}
	for k := range powermode.NumKnobs {
		lo, hi := math.Log(vals[k][0]), math.Log(vals[k][len(vals[k])-1])
		in.norm[k] = make([]float64, len(vals[k]))
		for i, v := range vals[k] {
			if hi > lo {
				in.norm[k][i] = (math.Log(v) - lo) / (hi - lo)
			}
		}
	}
	return in
}

func (in inputs) at(idx powermode.Index) []float64 {
	x := make([]float64, powermode.NumKnobs)
	for k := range powermode.NumKnobs {
		x[k] = in.norm[k][idx[k]]
	}
	return x
}

// checkProblem validates what ALS needs of a problem.
func checkProblem(p Problem) ([]int, error) {
	if p.Space == nil || p.Space.Size() == 0 {
		return nil, errors.New("als: the problem has no search space: give it the board's or the ground truth's modes")
	}
	if p.TrainBatch < 1 {
		return nil, fmt.Errorf("als: training batch %d: want the training workload's minibatch size (≥ 1)", p.TrainBatch)
	}
	batches := slices.Clone(p.InferBatches)
	if len(batches) == 0 {
		batches = DefaultInferBatches()
	}
	slices.Sort(batches)
	batches = slices.Compact(batches)
	if batches[0] < 1 {
		return nil, fmt.Errorf("als: inference batch sizes %v: each must be ≥ 1", p.InferBatches)
	}
	return batches, nil
}

// outputsOf returns the log quantities of a profile in model order, or false when the
// profile lacks a batch size or holds a non-positive value.
func outputsOf(mp ModeProfile, batches []int) ([]float64, bool) {
	nb := len(batches)
	out := make([]float64, 2+2*nb)
	if mp.Train.TimeMS <= 0 || mp.Train.PowerMW <= 0 {
		return nil, false
	}
	out[0], out[1] = math.Log(mp.Train.TimeMS), math.Log(mp.Train.PowerMW)
	seen := 0
	for _, ip := range mp.Infer {
		j, ok := slices.BinarySearch(batches, ip.Batch)
		if !ok {
			continue
		}
		if ip.TimeMS <= 0 || ip.PowerMW <= 0 {
			return nil, false
		}
		out[2+j], out[2+nb+j] = math.Log(ip.TimeMS), math.Log(ip.PowerMW)
		seen++
	}
	return out, seen == nb
}

// LearnModel runs an ALS campaign for the pair of p (p.Budgets are not used) and
// returns the learned model.
func (a *ALS) LearnModel(ctx context.Context, p Problem, prof Profiler) (*ALSModel, error) {
	o := a.opts
	batches, err := checkProblem(p)
	if err != nil {
		return nil, err
	}
	budget := p.MaxProfiles
	if budget <= 0 {
		budget = o.MaxProfiles
	}
	rng := rand.New(rand.NewPCG(p.Seed^o.Seed, 0x616c73))
	// A profiler that knows its noise (Problem.NoiseRel) bounds the GPs' noise by it.
	gpNoiseFloor := max(o.NoiseFloor, p.NoiseRel)
	m := &ALSModel{opts: o, space: p.Space, train: p.Train, infer: p.Infer, trainBatch: p.TrainBatch, batches: batches}
	m.index()
	xs := m.allInputs()
	measured := map[powermode.Mode]bool{}
	var ys [][]float64
	add := func(mp ModeProfile) bool {
		if measured[mp.Mode] || !p.Space.Contains(mp.Mode) {
			return false
		}
		y, ok := outputsOf(mp, batches)
		if !ok {
			return false
		}
		measured[mp.Mode] = true
		m.profiles = append(m.profiles, cloneProfile(mp))
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

	var gps [numGroups]*GP
	var prevHyper [numGroups]*GPHyper
	fit := func(restarts int) error {
		for g := range numGroups {
			x := m.dataInputs()
			y := groupOutputs(ys, g, len(batches))
			gp, err := FitGP(ctx, x, y, GPFitOptions{Restarts: restarts, Init: prevHyper[g], Rand: rng, MinNoiseSD: gpNoiseFloor})
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
func (m *ALSModel) recondition(gps []*GP, ys [][]float64) error {
	x := m.dataInputs()
	for g := range numGroups {
		gp, err := NewGP(x, groupOutputs(ys, g, len(m.batches)), gps[g].Hyper())
		if err != nil {
			return fmt.Errorf("als: %s surrogate: %w", groupName(g), err)
		}
		gps[g] = gp
	}
	return nil
}

// predict fills mu and sd for every mode.
func (m *ALSModel) predict(gps []*GP, xs [][]float64) {
	nb, no := len(m.batches), m.nOut()
	if len(m.mu) != len(m.modes)*no {
		m.mu, m.sd = make([]float64, len(m.modes)*no), make([]float64, len(m.modes)*no)
	}
	var sc GPScratch
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
		keep := ParetoCandidates(loX, loY, hiX, hiY, o.Epsilon)
		for i := range n {
			if !keep[i] || measured[m.modes[i]] {
				continue
			}
			w := o.Kappa * math.Hypot(m.sd[i*no+pr[0]], m.sd[i*no+pr[1]])
			score[i] += weight * w
			wmax[i] = max(wmax[i], w)
		}
		for _, i := range ParetoFront(mx, my) {
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
func (m *ALSModel) finish(gps []*GP) {
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
		for _, i := range ParetoFront(mx, my) {
			inFront[i] = true
		}
	}
	m.inData = make([]bool, len(m.modes))
	for _, mp := range m.profiles {
		m.inData[m.pos[mp.Mode]] = true
	}
	m.derUnmeas, m.derMeas = make([]float64, len(m.mu)), make([]float64, len(m.mu))
	for i := range m.modes {
		mu, sd := m.mu[i*no:(i+1)*no], m.sd[i*no:(i+1)*no]
		m.derate(m.derUnmeas[i*no:(i+1)*no], mu, sd, false)
		m.derate(m.derMeas[i*no:(i+1)*no], mu, sd, true)
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

// candidate is one (mode, batch) configuration scored by model v1 on derated values.
type candidate struct {
	pos      int
	batch    int
	eval     Eval // on derated values: what ranks
	measured bool
}

// posterior is the prediction at one mode: mean and sd of every log output.
type posterior struct{ mu, sd []float64 }

// Answer implements Answerer: the best configuration for b by model v1 over the
// predicted profiles of every mode, derated for their uncertainty, confirming an
// unprofiled choice by profiling it, at most Confirm times. The answer always rests on
// a profiled mode.
func (m *ALSModel) Answer(ctx context.Context, b Budgets, prof Profiler) (Result, error) {
	model, err := NewModel(b, m.batches)
	if err != nil {
		return Result{}, fmt.Errorf("als: %w", err)
	}
	measured := make(map[int]bool, len(m.profiles))
	for _, mp := range m.profiles {
		measured[m.pos[mp.Mode]] = true
	}
	// Profiles the campaign did not use (another campaign's, or confirmations kept by
	// a store) join the GP data for this answer.
	var extra []ModeProfile
	for _, mp := range prof.Known() {
		if i, ok := m.pos[mp.Mode]; ok && !measured[i] {
			if _, ok := outputsOf(mp, m.batches); ok {
				measured[i] = true
				extra = append(extra, cloneProfile(mp))
			}
		}
	}
	post, err := m.posteriors(extra)
	if err != nil {
		return Result{}, err
	}
	var res Result
	for {
		best, ok := m.bestConfig(model, measured, post, nil)
		if !ok {
			return Result{}, errors.New("als: no configuration to evaluate: the model has no modes")
		}
		// Tight budgets: when nothing is feasible with the margins, the least-violating
		// candidate is confirmed (Better ranks infeasible ones by violation). Nominating
		// the best candidate at narrower margins instead was worse on the benchmark.
		if best.measured || len(res.Profiled) >= m.opts.Confirm {
			break
		}
		md := m.modes[best.pos]
		mp, err := prof.Profile(ctx, md)
		if err != nil {
			return Result{}, fmt.Errorf("als: confirming mode %s: %w", md, err)
		}
		mp.Mode = md
		if _, ok := outputsOf(mp, m.batches); !ok {
			return Result{}, fmt.Errorf("als: the confirming profile of mode %s lacks a batch size of %v or has a non-positive value: fix the profiler", md, m.batches)
		}
		measured[best.pos] = true
		extra = append(extra, mp)
		res.Profiled = append(res.Profiled, md)
		if post, err = m.posteriors(extra); err != nil {
			return Result{}, err
		}
	}
	onlyMeasured := func(i int) bool { return measured[i] }
	best, ok := m.bestConfig(model, measured, post, onlyMeasured)
	if !ok {
		return Result{}, errors.New("als: no profiled mode to answer from")
	}
	// A confirm left over goes to the unprofiled mode that would beat the answer if
	// its profile matched the prediction (derated as a profiled mode would be).
	for len(res.Profiled) < m.opts.Confirm && !m.opts.KeepLeftover {
		c, ok := m.bestAt(model, measured, post, m.opts.SafetySigmas, 0, m.opts.SafetySigmas*m.opts.NoiseFloor, false)
		if !ok || c.measured || !c.eval.Better(best.eval) {
			break
		}
		md := m.modes[c.pos]
		mp, err := prof.Profile(ctx, md)
		if err != nil {
			return Result{}, fmt.Errorf("als: confirming mode %s: %w", md, err)
		}
		mp.Mode = md
		if _, ok := outputsOf(mp, m.batches); !ok {
			return Result{}, fmt.Errorf("als: the confirming profile of mode %s lacks a batch size of %v or has a non-positive value: fix the profiler", md, m.batches)
		}
		measured[c.pos] = true
		extra = append(extra, mp)
		res.Profiled = append(res.Profiled, md)
		if post, err = m.posteriors(extra); err != nil {
			return Result{}, err
		}
		best, _ = m.bestConfig(model, measured, post, onlyMeasured)
	}
	how := fmt.Sprintf("feasible with the safety margin (z = %g)", m.opts.SafetySigmas)
	if !best.eval.Feasible {
		// Tight budgets: narrow the margin step by step (FallbackSigmas) before giving up.
		how = "nothing profiled meets the budgets even with the reduced margins; least-violating by the margin"
		for _, z := range m.opts.FallbackSigmas {
			if c, ok := m.bestAt(model, measured, post, z, 0, 0, true); ok && c.eval.Feasible {
				best = c
				how = fmt.Sprintf("feasible only with a reduced safety margin (z = %g)", z)
				break
			}
		}
	}
	res.Found = true
	res.Feasible = best.eval.Feasible
	res.Choice = m.meanEval(model, best.pos, best.batch, post)
	res.Stop = fmt.Sprintf("als: answered from the learned model (campaign: %d profiles, %s) with %d confirming profile(s); %s", len(m.profiles), m.stop, len(res.Profiled), how)
	return res, nil
}

// posteriors conditions the GPs on the campaign's data plus extra profiles (at the
// stored hyper-parameters) and returns the posterior at the extra profiles' modes.
// Other modes keep the campaign's predictions: an answer stays a scan, not a refit.
func (m *ALSModel) posteriors(extra []ModeProfile) (map[int]posterior, error) {
	if len(extra) == 0 {
		return nil, nil
	}
	x, ys := slices.Clone(m.xData), slices.Clone(m.yData)
	for _, mp := range extra {
		idx, _ := m.space.Index(mp.Mode)
		y, _ := outputsOf(mp, m.batches)
		x, ys = append(x, m.in.at(idx)), append(ys, y)
	}
	nb, no := len(m.batches), m.nOut()
	out := make(map[int]posterior, len(extra))
	for _, mp := range extra {
		out[m.pos[mp.Mode]] = posterior{mu: make([]float64, no), sd: make([]float64, no)}
	}
	buf := make([]float64, nb)
	var sc GPScratch
	for g := range numGroups {
		gp, err := NewGP(x, groupOutputs(ys, g, nb), m.hyper[g])
		if err != nil {
			return nil, fmt.Errorf("als: %s surrogate with the confirming profiles: %w", groupName(g), err)
		}
		off, cnt := groupSlot(g, nb)
		for i, p := range out {
			idx, _ := m.space.Index(m.modes[i])
			s := gp.Predict(m.in.at(idx), buf[:cnt], &sc)
			for o := range cnt {
				p.mu[off+o], p.sd[off+o] = buf[o], s*gp.Scale(o)
			}
		}
	}
	return out, nil
}

func (m *ALSModel) at(i int, post map[int]posterior) (mu, sd []float64) {
	if p, ok := post[i]; ok {
		return p.mu, p.sd
	}
	no := m.nOut()
	return m.mu[i*no : (i+1)*no], m.sd[i*no : (i+1)*no]
}

// bestConfig ranks every (mode, batch) by model v1 on derated predictions: each time
// and power is taken at exp(μ + s·σ), with s = SafetySigmas and σ at least NoiseFloor
// for profiled modes, s = MarginSigmas for the others. A non-nil filter restricts the
// modes considered.
func (m *ALSModel) bestConfig(model *Model, measured map[int]bool, post map[int]posterior, filter func(int) bool) (candidate, bool) {
	no, nb := m.nOut(), len(m.batches)
	bud := model.Budgets()
	var best candidate
	found := false
	fill := make([]float64, nb)
	for j, b := range m.batches {
		fill[j] = FillQuantileMS(b, bud.RateRPS, bud.Quantile)
	}
	buf := make([]float64, no)
	for i := range m.modes {
		if filter != nil && !filter(i) {
			continue
		}
		isMeas := measured[i]
		vals := buf
		_, changed := post[i]
		switch {
		case !changed && isMeas && m.campaignMeasured(i):
			vals = m.derMeas[i*no : (i+1)*no]
		case !changed && !isMeas:
			vals = m.derUnmeas[i*no : (i+1)*no]
		default:
			mu, sd := m.at(i, post)
			m.derate(vals, mu, sd, isMeas)
		}
		for j, b := range m.batches {
			if found && best.eval.Feasible && lowerThroughput(bud, m.trainBatch, b, vals[0], vals[2+j], best.eval.ThroughputSPS) {
				continue // cannot beat a feasible best: skip the constraint checks
			}
			e := fastEval(bud, m.trainBatch, b, fill[j], vals[0], vals[1], vals[2+j], vals[2+nb+j])
			if !found || e.Better(best.eval) {
				best, found = candidate{pos: i, batch: b, eval: e, measured: isMeas}, true
			}
		}
	}
	if found {
		best.eval.Mode = m.modes[best.pos]
	}
	return best, found
}

// bestAt is bestConfig with explicit margins (z for profiled modes, k for the others)
// and no precomputation: the slow path for tight budgets.
func (m *ALSModel) bestAt(model *Model, measured map[int]bool, post map[int]posterior, z, k, addU float64, measuredOnly bool) (candidate, bool) {
	nb, bud := len(m.batches), model.Budgets()
	var best candidate
	found := false
	vals := make([]float64, m.nOut())
	fills := make([]float64, nb)
	for j, b := range m.batches {
		fills[j] = FillQuantileMS(b, bud.RateRPS, bud.Quantile)
	}
	for i := range m.modes {
		isMeas := measured[i]
		if measuredOnly && !isMeas {
			continue
		}
		mu, sd := m.at(i, post)
		for o := range vals {
			if isMeas {
				vals[o] = math.Exp(mu[o] + z*max(sd[o], m.opts.NoiseFloor))
			} else {
				vals[o] = math.Exp(mu[o] + k*sd[o] + addU)
			}
		}
		for j, b := range m.batches {
			if found && best.eval.Feasible && lowerThroughput(bud, m.trainBatch, b, vals[0], vals[2+j], best.eval.ThroughputSPS) {
				continue // cannot beat a feasible best: skip the constraint checks
			}
			e := fastEval(bud, m.trainBatch, b, fills[j], vals[0], vals[1], vals[2+j], vals[2+nb+j])
			if !found || e.Better(best.eval) {
				best, found = candidate{pos: i, batch: b, eval: e, measured: isMeas}, true
			}
		}
	}
	return best, found
}

// derate writes exp(μ + s·σ) per output: s = SafetySigmas (σ ≥ NoiseFloor) for a
// profiled mode, MarginSigmas for an unprofiled one.
func (m *ALSModel) derate(dst, mu, sd []float64, measured bool) {
	for o := range dst {
		if measured {
			dst[o] = math.Exp(mu[o] + m.opts.SafetySigmas*max(sd[o], m.opts.NoiseFloor))
		} else {
			dst[o] = math.Exp(mu[o] + m.opts.MarginSigmas*sd[o])
		}
	}
}

func (m *ALSModel) campaignMeasured(i int) bool { return m.inData[i] }

// meanEval is model v1 at the posterior mean (no margin): the expected outcome.
func (m *ALSModel) meanEval(model *Model, i, batch int, post map[int]posterior) Eval {
	mu, _ := m.at(i, post)
	nb := len(m.batches)
	j, _ := slices.BinarySearch(m.batches, batch)
	return model.Evaluate(m.modes[i],
		TrainPoint{Batch: m.trainBatch, TimeMS: math.Exp(mu[0]), PowerMW: math.Exp(mu[1])},
		InferPoint{Batch: batch, TimeMS: math.Exp(mu[2+j]), PowerMW: math.Exp(mu[2+nb+j])})
}

// lowerThroughput reports whether a configuration's training throughput (as fastEval
// computes it) is strictly below bestSPS.
func lowerThroughput(b Budgets, trainBatch, batch int, tT, tI, bestSPS float64) bool {
	rho := b.RateRPS * (tI / 1000) / float64(batch)
	return max(0, 1-rho)*float64(trainBatch)/(tT/1000) < bestSPS
}

// fastEval is Model.Evaluate without the map and the mode, for scanning thousands of
// modes per answer; a test checks that it agrees with Evaluate.
func fastEval(b Budgets, trainBatch, batch int, fillMS, tT, pT, tI, pI float64) Eval {
	rho := b.RateRPS * (tI / 1000) / float64(batch)
	e := Eval{Batch: batch, Rho: rho}
	e.LatencyMS = fillMS + tT + tI
	share := min(rho, 1)
	e.PowerMW = share*pI + (1-share)*pT
	e.ThroughputSPS = max(0, 1-rho) * float64(trainBatch) / (tT / 1000)
	exc := [3]float64{e.LatencyMS/b.LatencyMS - 1, e.PowerMW/b.PowerMW - 1, rho/b.RhoMax - 1}
	cons := [3]Constraint{ConstraintLatency, ConstraintPower, ConstraintRho}
	worst := math.Inf(-1)
	for c, x := range exc {
		if x > 0 {
			e.Violation += x
		}
		if x > worst {
			worst, e.Binding = x, cons[c]
		}
	}
	e.Feasible = e.Violation == 0
	return e
}

// alsSnapshot is the stored form of an ALSModel (schema version 1).
type alsSnapshot struct {
	Version      int              `json:"version"`
	Train        string           `json:"train"`
	Infer        string           `json:"infer"`
	TrainBatch   int              `json:"train_batch"`
	InferBatches []int            `json:"infer_batches"`
	Levels       powermode.Levels `json:"levels"`
	// Members is a bitmap over the grid ordinals of Levels (bit o of byte o/8); absent
	// when the space is the full grid.
	Members  []byte             `json:"members,omitempty"`
	Options  ALSOptions         `json:"options"`
	Profiles []ModeProfile      `json:"profiles"`
	Campaign []powermode.Mode   `json:"campaign"`
	Hyper    map[string]GPHyper `json:"hyper"`
	Pareto   []powermode.Mode   `json:"pareto"`
	Stop     string             `json:"stop"`
}

const alsSnapshotVersion = 1

// MarshalJSON stores the model: profiles, hyper-parameters, space and options.
func (m *ALSModel) MarshalJSON() ([]byte, error) {
	s := alsSnapshot{
		Version: alsSnapshotVersion, Train: m.train, Infer: m.infer, TrainBatch: m.trainBatch,
		InferBatches: m.batches, Levels: m.space.Levels(), Options: m.opts, Profiles: m.profiles,
		Campaign: m.campaign, Hyper: map[string]GPHyper{}, Pareto: m.front, Stop: m.stop,
	}
	if !m.space.IsGrid() {
		s.Members = make([]byte, (m.space.GridSize()+7)/8)
		for idx := range m.space.All() {
			o := m.space.Ordinal(idx)
			s.Members[o/8] |= 1 << (o % 8)
		}
	}
	for g := range numGroups {
		s.Hyper[groupName(g)] = m.hyper[g]
	}
	return json.Marshal(s)
}

// UnmarshalALSModel restores a model stored by MarshalJSON. It refits nothing: the GPs
// are rebuilt from the stored profiles and hyper-parameters, so answers are identical.
// logger may be nil.
func UnmarshalALSModel(data []byte, logger *slog.Logger) (*ALSModel, error) {
	var s alsSnapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("als model: %w: the stored model is corrupt; run the campaign again", err)
	}
	if s.Version != alsSnapshotVersion {
		return nil, fmt.Errorf("als model: schema version %d, this build reads %d: run the campaign again", s.Version, alsSnapshotVersion)
	}
	grid, err := powermode.NewSpace(s.Levels)
	if err != nil {
		return nil, fmt.Errorf("als model: %w", err)
	}
	sp := grid
	if s.Members != nil {
		if len(s.Members) != (grid.GridSize()+7)/8 {
			return nil, fmt.Errorf("als model: member bitmap of %d bytes for a grid of %d modes: the stored model is corrupt", len(s.Members), grid.GridSize())
		}
		var modes []powermode.Mode
		for o := range grid.GridSize() {
			if s.Members[o/8]&(1<<(o%8)) != 0 {
				modes = append(modes, grid.Mode(grid.FromOrdinal(o)))
			}
		}
		if sp, err = powermode.NewSubspace(modes); err != nil {
			return nil, fmt.Errorf("als model: %w", err)
		}
	}
	p := Problem{Space: sp, Train: s.Train, Infer: s.Infer, TrainBatch: s.TrainBatch, InferBatches: s.InferBatches}
	batches, err := checkProblem(p)
	if err != nil {
		return nil, fmt.Errorf("als model: %w", err)
	}
	if len(s.Profiles) < 2 {
		return nil, fmt.Errorf("als model: %d profiles: the stored model is incomplete; run the campaign again", len(s.Profiles))
	}
	s.Options.Logger = logger
	m := &ALSModel{opts: s.Options.withDefaults(), space: sp, train: s.Train, infer: s.Infer, trainBatch: s.TrainBatch,
		batches: batches, profiles: s.Profiles, campaign: s.Campaign, front: s.Pareto, stop: s.Stop}
	m.index()
	var ys [][]float64
	for _, mp := range s.Profiles {
		if !sp.Contains(mp.Mode) {
			return nil, fmt.Errorf("als model: profile of mode %s outside the stored space: the stored model is corrupt", mp.Mode)
		}
		y, ok := outputsOf(mp, batches)
		if !ok {
			return nil, fmt.Errorf("als model: profile of mode %s is incomplete: the stored model is corrupt", mp.Mode)
		}
		ys = append(ys, y)
	}
	gps := make([]*GP, numGroups)
	for g := range numGroups {
		h, ok := s.Hyper[groupName(g)]
		if !ok {
			return nil, fmt.Errorf("als model: no hyper-parameters for %s: the stored model is corrupt", groupName(g))
		}
		m.hyper[g] = h
		gp, err := NewGP(m.dataInputs(), groupOutputs(ys, g, len(batches)), h)
		if err != nil {
			return nil, fmt.Errorf("als model: %s surrogate: %w", groupName(g), err)
		}
		gps[g] = gp
	}
	m.xData, m.yData = m.dataInputs(), ys
	m.predict(gps, m.allInputs())
	m.finish(gps)
	return m, nil
}
