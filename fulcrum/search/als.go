package search

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"

	"github.com/fulcrum-edge/fulcrum/fulcrum/gp"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// ALSOptions tune the ALS searcher. Zero values take the defaults in brackets.
type ALSOptions struct {
	// MaxProfiles caps the profiles of a pair [50], campaign and one answer's
	// confirming profiles together: the campaign takes at most MaxProfiles − Confirm.
	// Problem.MaxProfiles overrides it.
	MaxProfiles int `json:"max_profiles"`
	// SeedModes is the size of the space-filling initial design [10].
	SeedModes int `json:"seed_modes"`
	// Confirm is how many profiles (first profiles of modes and repeats) one answer may
	// take to let the decision claim a better configuration [4].
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
	// NoiseFloor is the least relative measurement noise assumed [0.02]: the GPs'
	// fitted noise sd (log units) is bounded below by it (or by Problem.NoiseRel when
	// larger). Without it a GP with ~50 points in 4-D can interpolate the noise and then
	// trust a lucky measurement.
	NoiseFloor float64 `json:"noise_floor"`
	// Restarts are the random L-BFGS restarts of the first and last GP fits [2]
	// (fits in between warm-start from the previous hyper-parameters).
	Restarts int `json:"restarts"`
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
	def(&o.Confirm, 4)
	def(&o.StableRounds, 6)
	def(&o.Restarts, 2)
	deff(&o.Kappa, 2)
	deff(&o.Epsilon, 0.01)
	deff(&o.StopSigma, 0.03)
	deff(&o.NoiseFloor, 0.02)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// ALS is the active-learning searcher of docs/design.md §3: Gaussian-process surrogates of
// log time and log power of both workloads over the mode space, a space-filling seed,
// then ε-PAL sampling of the (time, power) Pareto sets until they are resolved or the
// budget is spent. The learned model (ALSModel) answers any budgets with at most
// Confirm new profiles, decided by the problem's Rules. ALS itself holds only options and is safe for concurrent use.
type ALS struct{ opts ALSOptions }

// NewALS returns an ALS searcher.
func NewALS(opts ALSOptions) *ALS { return &ALS{opts: opts.withDefaults()} }

// Name implements Searcher and PairLearner.
func (a *ALS) Name() string { return "als" }

// Search implements Searcher: a campaign, then an answer for p.Budgets; campaign and
// confirmation stay within the problem's profile budget together.
func (a *ALS) Search(ctx context.Context, p Problem, prof Profiler) (Result, error) {
	m, err := a.LearnModel(ctx, p, prof)
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
	profiles   []plan.ModeProfile // the campaign's, in the order used as GP data
	hyper      [numGroups]gp.Hyper
	front      []powermode.Mode
	stop       string
	campaign   []powermode.Mode // modes this campaign profiled (not inherited ones)
	// rules decide every answer (plan.Decider); noiseRel is the relative noise of one
	// measurement that answers predict repeats with; maxProfiles caps campaign plus one
	// answer's confirmations.
	rules       plan.Rules
	noiseRel    float64
	maxProfiles int

	modes  []powermode.Mode
	pos    map[powermode.Mode]int
	mu, sd []float64 // per mode, nOut values: log τ_T, log π_T, log τ_I(b)…, log π_I(b)…
	noise  []float64 // per output: fitted relative measurement noise (for reports)
	in     inputs
	xData  [][]float64 // GP inputs of profiles, in order
	yData  [][]float64 // log outputs of profiles, in order
}

// nOut is the number of predicted quantities per mode.
func (m *ALSModel) nOut() int { return 2 + 2*len(m.batches) }

// CampaignModes returns the modes the campaign profiled, in order.
func (m *ALSModel) CampaignModes() []powermode.Mode { return slices.Clone(m.campaign) }

// Profiles returns the campaign's profiles (inherited known ones included).
func (m *ALSModel) Profiles() []plan.ModeProfile {
	out := make([]plan.ModeProfile, len(m.profiles))
	for i, p := range m.profiles {
		out[i] = p.Clone()
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
		batches = plan.DefaultInferBatches()
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
func outputsOf(mp plan.ModeProfile, batches []int) ([]float64, bool) {
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
