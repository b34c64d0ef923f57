package control

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/internal/stats"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Live refinement (issue 31, docs/design.md §9 "Live refinement", docs/controller.md
// "Live refinement"): while the pair runs at a planned configuration, every Window of
// live operation is one more measurement of that mode — the scheduler's expected
// training and inference turn times and the board's mixed power over the window — pooled
// with the stored (offline) profile by inverse variance, so that the decision's
// P(every budget met) at the mode tightens as evidence grows. Once the configuration in
// force is confirmed (ConfirmWindows windows and P ≥ plan_confidence with the evidence),
// the controller may try one neighbouring configuration the model ranks higher for at
// most TrialMax: the trial ends at once when the live window breaks a budget (back to
// the confirmed point, the model taught, the neighbour backed off), or is confirmed and
// kept once its own evidence claims it.

// RefineOptions tune live refinement; controller.refine.* keys. DefaultConfig turns it
// on; a zero RefineOptions (a Config built field by field) leaves it off, and its zero
// numbers take the defaults in brackets.
type RefineOptions struct {
	Enabled bool `mapstructure:"enabled"` // pool the live window into the decision [true in DefaultConfig]
	// Window is one live measurement of the configuration in force [5 s]; it closes once
	// MinTurns training minibatches and inference batches also ran in it [8].
	Window   time.Duration `mapstructure:"window_ms"`
	MinTurns int           `mapstructure:"min_turns"`
	// MaxRepeats caps the repeats the evidence may make a mode's profile count for
	// (the claim's σ never falls under noise_rel/√MaxRepeats: boards drift) [30].
	MaxRepeats int `mapstructure:"max_repeats"`
	// ConfirmWindows: windows at a configuration before it can be confirmed [3].
	ConfirmWindows int `mapstructure:"confirm_windows"`
	// Trials: try better-ranked neighbours of a confirmed configuration [true in
	// DefaultConfig].
	Trials bool `mapstructure:"trials"`
	// TrialMinP: a neighbour is tried only when the decision gives it at least this
	// P(every budget met) [0.25]; TrialGain: and at least this much more predicted
	// training throughput, relative [0.02].
	TrialMinP float64 `mapstructure:"trial_min_p"`
	TrialGain float64 `mapstructure:"trial_gain"`
	// TrialSteps: a neighbour's mode is at most this many knob levels from the
	// confirmed one (the batch is free) [1].
	TrialSteps int `mapstructure:"trial_steps"`
	// TrialMax: a trial not confirmed within this long goes back [90 s].
	TrialMax time.Duration `mapstructure:"trial_max_s"`
	// Backoff: a failed neighbour is not tried again for this long, doubled at each
	// further failure [10 min].
	Backoff time.Duration `mapstructure:"backoff_s"`
	// NearClaim: while training is paused because nothing is claimed, try a
	// configuration that fits as measured with the admission room and is claimed at
	// NearClaimP or more, under a trial's bounded exposure, so its live windows can
	// certify it [true in DefaultConfig; needs Trials]. NearClaimP [0.9].
	NearClaim  bool    `mapstructure:"near_claim"`
	NearClaimP float64 `mapstructure:"near_claim_p"`
	// Probes: when no stored neighbour of a confirmed configuration ranks higher, profile
	// one neighbour one knob level faster that was never profiled, then go back; the
	// trial rule decides on it (probe.go) [true in DefaultConfig; needs Trials]. Not
	// while the confirmed configuration's predicted power is within ProbeHeadroom of the
	// power budget [0.05].
	Probes        bool    `mapstructure:"probes"`
	ProbeHeadroom float64 `mapstructure:"probe_headroom"`
}

// DefaultRefineOptions are live refinement's defaults (on, trials on).
func DefaultRefineOptions() RefineOptions {
	return RefineOptions{Enabled: true, Trials: true, NearClaim: true, Probes: true}.withDefaults()
}

func (o RefineOptions) withDefaults() RefineOptions {
	if o.Window <= 0 {
		o.Window = 5 * time.Second
	}
	if o.MinTurns <= 0 {
		o.MinTurns = 8
	}
	if o.MaxRepeats <= 0 {
		o.MaxRepeats = 30
	}
	if o.ConfirmWindows <= 0 {
		o.ConfirmWindows = 3
	}
	if o.TrialMinP <= 0 {
		o.TrialMinP = 0.25
	}
	if o.TrialGain <= 0 {
		o.TrialGain = 0.02
	}
	if o.TrialSteps <= 0 {
		o.TrialSteps = 1
	}
	if o.TrialMax <= 0 {
		o.TrialMax = 90 * time.Second
	}
	if o.Backoff <= 0 {
		o.Backoff = 10 * time.Minute
	}
	if o.NearClaimP <= 0 {
		o.NearClaimP = 0.9
	}
	if o.ProbeHeadroom <= 0 {
		o.ProbeHeadroom = 0.05
	}
	return o
}

// liveWindow is one window of live operation at a mode, for every workload planned for
// (in the order of Controller.planned): each training job's expected turn time and each
// stream's expected batch time at its batch at the window's end (the scheduler's medians
// of the latest turns, internal/stats), each stream's measured arrival rate, and the
// board's mean power over the window.
type liveWindow struct {
	Train   []trainObs // per job
	Infer   []inferObs // per stream
	PowerMW float64    // 0: not measured
}

// trainObs is one training job's turn in a window.
type trainObs struct {
	MS    float64 // 0: not measured
	Micro int     // the turn MS is of: 0 the whole minibatch, else a micro-batch size
}

// inferObs is one stream's batch in a window.
type inferObs struct {
	MS      float64 // 0: not measured
	Batch   int
	RateRPS float64 // its measured arrival rate
}

// Pooled is what the live evidence made of a mode's profile: the ratios applied to the
// stored times and power, and the repeats the profile now counts for. TrainRatio and
// InferRatio are the first job's and the first stream's (the pair's); TrainRatios and
// InferRatios every job's and every stream's, in the order planned for.
type Pooled struct {
	Windows     int       `json:"windows"`
	TrainRatio  float64   `json:"train_ratio"`
	InferRatio  float64   `json:"infer_ratio"`
	PowerRatio  float64   `json:"power_ratio"`
	Repeats     int       `json:"repeats"`
	TrainRatios []float64 `json:"train_ratios,omitempty"`
	InferRatios []float64 `json:"infer_ratios,omitempty"`
}

// poolRatio pools k live ratio samples (each the live value over the stored one) with
// the stored profile (ratio 1, n0 repeats of relative σ noise): inverse-variance
// weights, the live samples' variance their own sample variance but never under
// noise² (one window counts at most as much as one profiled repeat). It returns the
// pooled ratio and the repeats its variance is worth (noise²/var).
func poolRatio(samples []float64, n0 int, noise float64) (ratio, repeats float64) {
	n := float64(max(n0, 1))
	if len(samples) == 0 || noise <= 0 {
		return 1, n
	}
	k := float64(len(samples))
	mean, sd := stats.MeanStddev(samples)
	s := noise
	if len(samples) > 1 {
		s = max(sd, noise)
	}
	varOff := noise * noise / n
	varLive := s * s / k
	w := varOff / (varOff + varLive)
	pooledVar := varOff * varLive / (varOff + varLive)
	return (1-w)*1 + w*mean, noise * noise / pooledVar
}

// poolEvidence refines the stored profile p of a mode, of every job and stream planned
// for, with its live windows (the rule of poolRatio for each quantity):
//   - each training job j: the ratio of its live turn time to the stored time of the
//     same turn (its minibatch or the micro-batch that ran), applied to every turn of j;
//   - each stream i: the ratio of its live batch time to the stored time at the batch
//     that ran, applied to every batch of i (the mode's speed for that workload);
//   - the power: the board reads one mixed power for all of them, which cannot be
//     split, so one ratio — the window's mean power over model v1's mix of p at the
//     window's measured rates, Σ_i ρ̂_i·π_I,i + (1 − min(Σρ, 1))·Σ_j s_j·π_T,j with
//     ρ_i = λ_i·τ_i/b_i, ρ̂_i = ρ_i scaled to sum 1 past Σρ = 1 and s_j the jobs'
//     training shares (the minibatch's power, as the model weighs it) — applied to every
//     power of p.
//
// With one job and one stream this is ρ·π_I + (1−ρ)·π_T, the pair's rule, to the bit. The
// profile counts for the fewest repeats any of the quantities is worth, within
// [p.Repeats, maxRepeats]. shares are the jobs' training shares (nil: equal); windows of
// another shape (another group) are skipped.
//
// powerFloor (0: none) bounds the pooled power ratio from below: where the mode broke
// the power budget live and carries a learned correction (rule 2), its power is already
// the measured draw at the moment it broke, and a mean that sits under the budget does
// not make the 1 s averages the budget is judged on stay under it (found on the AGX
// lifetime sweep: the pooled mean, 3 % under a 40 W budget, brought step_up back to the
// mode every few minutes and each time power broke again).
func poolEvidence(p plan.MultiProfile, ws []liveWindow, shares []float64, noise float64, maxRepeats int, powerFloor float64) (plan.MultiProfile, Pooled) {
	rt, ri := make([][]float64, len(p.Train)), make([][]float64, len(p.Infer))
	var rp []float64
	pts := make([]plan.InferPoint, len(p.Infer))
	for _, w := range ws {
		if len(w.Train) != len(p.Train) || len(w.Infer) != len(p.Infer) {
			continue
		}
		for j, t := range w.Train {
			if st := storedTurnMS(p, j, t.Micro); t.MS > 0 && st > 0 {
				rt[j] = append(rt[j], t.MS/st)
			}
		}
		all := true
		for i, x := range w.Infer {
			ip, ok := inferAt(p.Infer[i], x.Batch)
			pts[i], all = ip, all && ok
			if x.MS > 0 && ok && ip.TimeMS > 0 {
				ri[i] = append(ri[i], x.MS/ip.TimeMS)
			}
		}
		if w.PowerMW > 0 && all {
			if pred := mixedPowerMW(p, pts, w.Infer, shares); pred > 0 {
				rp = append(rp, w.PowerMW/pred)
			}
		}
	}
	n0 := max(p.Repeats, 1)
	kp, np := poolRatio(rp, n0, noise)
	kp = max(kp, powerFloor)
	least := np
	out := cloneMulti(p)
	pooled := Pooled{Windows: len(ws), PowerRatio: kp}
	for j := range out.Train {
		kt, nt := poolRatio(rt[j], n0, noise)
		least = min(least, nt)
		pooled.TrainRatios = append(pooled.TrainRatios, kt)
		out.Train[j].TimeMS *= kt
		out.Train[j].PowerMW *= kp
		if j < len(out.Micro) {
			for x := range out.Micro[j] {
				out.Micro[j][x].TimeMS *= kt
				out.Micro[j][x].PowerMW *= kp
			}
		}
	}
	for i := range out.Infer {
		ki, ni := poolRatio(ri[i], n0, noise)
		least = min(least, ni)
		pooled.InferRatios = append(pooled.InferRatios, ki)
		for x := range out.Infer[i] {
			out.Infer[i][x].TimeMS *= ki
			out.Infer[i][x].PowerMW *= kp
		}
	}
	reps := int(math.Floor(least + 1e-9))
	out.Repeats = min(max(reps, n0), max(maxRepeats, n0))
	pooled.Repeats = out.Repeats
	if len(pooled.TrainRatios) > 0 {
		pooled.TrainRatio = pooled.TrainRatios[0]
	}
	if len(pooled.InferRatios) > 0 {
		pooled.InferRatio = pooled.InferRatios[0]
	}
	return out, pooled
}

// mixedPowerMW is model v1's mixed power of p with stream i at its point pts[i] and its
// measured rate obs[i].RateRPS (poolEvidence's rule). Every sum starts from its first
// term and ρ is written as the pair's rule always wrote it, so that with one job and one
// stream it is ρ·π_I + (1−ρ)·π_T to the bit.
func mixedPowerMW(p plan.MultiProfile, pts []plan.InferPoint, obs []inferObs, shares []float64) float64 {
	rho := make([]float64, len(pts))
	var sum float64
	for i, ip := range pts {
		rho[i] = obs[i].RateRPS * ip.TimeMS / 1000 / float64(max(ip.Batch, 1))
		if i == 0 {
			sum = rho[i]
		} else {
			sum += rho[i]
		}
	}
	var inferMW, trainMW float64
	for i, ip := range pts {
		r := rho[i]
		if sum > 1 {
			r /= sum
		}
		if i == 0 {
			inferMW = r * ip.PowerMW
		} else {
			inferMW += r * ip.PowerMW
		}
	}
	for j, t := range p.Train {
		s := 1 / float64(len(p.Train))
		if j < len(shares) {
			s = shares[j]
		}
		if j == 0 {
			trainMW = s * t.PowerMW
		} else {
			trainMW += s * t.PowerMW
		}
	}
	return inferMW + (1-min(sum, 1))*trainMW
}

// trainShares are the jobs' shares of training time in mb (model v1's s_j: the weights
// normalised; nil weights: equal shares).
func trainShares(mb plan.MultiBudgets, jobs int) []float64 {
	out := make([]float64, jobs)
	var sum float64
	for _, w := range mb.TrainWeights {
		sum += w
	}
	for j := range out {
		out[j] = 1 / float64(jobs)
		if len(mb.TrainWeights) == jobs && sum > 0 {
			out[j] = mb.TrainWeights[j] / sum
		}
	}
	return out
}

// cloneMulti is p with lists of its own (poolEvidence scales them).
func cloneMulti(p plan.MultiProfile) plan.MultiProfile {
	p.Train = slices.Clone(p.Train)
	p.Infer = slices.Clone(p.Infer)
	for i := range p.Infer {
		p.Infer[i] = slices.Clone(p.Infer[i])
	}
	p.Micro = slices.Clone(p.Micro)
	for j := range p.Micro {
		p.Micro[j] = slices.Clone(p.Micro[j])
	}
	return p
}

// storedTurnMS is the stored time of job j's training turn of micro-batch size micro
// (0: the whole minibatch) at p's mode; 0 when not stored.
func storedTurnMS(p plan.MultiProfile, j, micro int) float64 {
	if micro == 0 || micro == p.Train[j].Batch {
		return p.Train[j].TimeMS
	}
	if j < len(p.Micro) {
		for _, t := range p.Micro[j] {
			if t.Batch == micro {
				return t.TimeMS
			}
		}
	}
	return 0
}

func inferAt(pts []plan.InferPoint, b int) (plan.InferPoint, bool) {
	i := slices.IndexFunc(pts, func(ip plan.InferPoint) bool { return ip.Batch == b })
	if i < 0 {
		return plan.InferPoint{}, false
	}
	return pts[i], true
}

// cfgKey names a configuration live refinement measures, confirms and tries: the mode and
// every stream's inference batch, in the order planned for. The jobs' micro-batches are
// not part of it: a key's figures are those of the claimed training turns that train
// most, else the best-P ones (scoreIn), and a trial applies the neighbour's
// micro-batches as scored (refinePoint.eval carries them); where the turns in force are
// not the key's best claimed ones, tryTurns tries those (turns.go).
type cfgKey struct {
	m       powermode.Mode
	batches string // "4"; "4,8" for two streams
}

func keyOf(m powermode.Mode, batches []int) cfgKey {
	parts := make([]string, len(batches))
	for i, b := range batches {
		parts[i] = strconv.Itoa(b)
	}
	return cfgKey{m: m, batches: strings.Join(parts, ",")}
}

// keyOfChoice is the key of a configuration applied.
func keyOfChoice(ch Choice) cfgKey {
	bs := make([]int, len(ch.Streams))
	for i, s := range ch.Streams {
		bs[i] = s.Batch
	}
	return keyOf(ch.Mode, bs)
}

// batchList is every stream's batch of the key.
func (k cfgKey) batchList() []int {
	var out []int
	for _, f := range strings.Split(k.batches, ",") {
		if b, err := strconv.Atoi(f); err == nil {
			out = append(out, b)
		}
	}
	return out
}

// first is the first stream's batch (the pair's).
func (k cfgKey) first() int {
	if bs := k.batchList(); len(bs) > 0 {
		return bs[0]
	}
	return 0
}

// refineState is live refinement's state in the controller (guarded by c.mu).
type refineState struct {
	evidence map[powermode.Mode][]liveWindow
	// The open window: the configuration and since when, the counters at its start
	// (each job's minibatches, each stream's batches served).
	win struct {
		key         cfgKey
		since       time.Time // c.cfgSince it belongs to
		start       time.Time
		minibatches []uint64
		batches     []uint64
		count       int // windows closed at key since it was applied
	}
	confirmed *refinePoint
	trial     *refineTrial
	failed    map[cfgKey]*refineFailure
	nextTrial time.Time
	// probed: the modes probed (probe.go), each once for these workloads at the power
	// budget probedMW.
	probed   map[powermode.Mode]bool
	probedMW float64
	// nearNext: the next step that may look for a near-claim (nearClaim scores every
	// stored configuration; once a window, not every control period, while paused).
	nearNext time.Time
	last     *RefineStatus // the figures at the last closed window
}

// refinePoint is a configuration of every stream and job with the decision's figures.
type refinePoint struct {
	key  cfgKey
	eval plan.MultiEval
	at   time.Time
}

type refineTrial struct {
	key      cfgKey
	from     refinePoint
	start    time.Time
	deadline time.Time
	// paused: the trial started from a plan that paused training (nearClaim); from is
	// that plan, never confirmed, and the trial gains over it whatever it trains.
	paused bool
	// turns: the trial keeps the confirmed key and runs other training turns (tryTurns);
	// from.eval is the confirmed configuration with the turns it ran.
	turns bool
}

type refineFailure struct {
	count   int
	retryAt time.Time
	why     string
}

// RefineStatus is live refinement in the controller's status.
type RefineStatus struct {
	// Mode and Batch are the configuration in force the figures are of (Batch the first
	// stream's; Streams every stream's batch); Pooled what its evidence made of its
	// profile; PFeasible the decision's P(every budget met) there with it (at the last
	// closed window).
	Mode      powermode.Mode `json:"mode"`
	Batch     int            `json:"batch"`
	Streams   []StreamBatch  `json:"streams,omitempty"`
	Pooled    Pooled         `json:"pooled"`
	PFeasible float64        `json:"p_feasible"`
	// Confirmed is the configuration confirmed (nil: none yet); Trial the neighbour
	// on trial and TrialUntil when it goes back unless confirmed.
	Confirmed  *RefineConfig `json:"confirmed,omitempty"`
	Trial      *RefineConfig `json:"trial,omitempty"`
	TrialUntil time.Time     `json:"trial_until,omitzero"`
	// Failed are the neighbours whose trials failed, and until when each is left alone.
	Failed []RefineFailure `json:"failed,omitempty"`
}

// StreamBatch is one stream's batch in a configuration live refinement names.
type StreamBatch struct {
	Workload string `json:"workload"`
	Batch    int    `json:"batch"`
}

// RefineConfig is a configuration live refinement confirmed or tries (Batch the first
// stream's, Streams every stream's).
type RefineConfig struct {
	Mode    powermode.Mode `json:"mode"`
	Batch   int            `json:"batch"`
	Streams []StreamBatch  `json:"streams,omitempty"`
}

// RefineFailure is a neighbour whose trial failed.
type RefineFailure struct {
	Mode    powermode.Mode `json:"mode"`
	Batch   int            `json:"batch"`
	Streams []StreamBatch  `json:"streams,omitempty"`
	Count   int            `json:"count"`
	RetryAt time.Time      `json:"retry_at"`
	Why     string         `json:"why"`
}

// refineReset forgets everything learned live (other workloads).
func (c *Controller) refineReset() { c.ref = refineState{} }

// refining reports that live evidence is pooled into the profiles planned from
// (plannedProfiles): refinement is on and something was measured live.
func (c *Controller) refining() bool {
	return c.cfg.Refine.Enabled && len(c.ref.evidence) > 0
}

// powerFloor is the least pooled power ratio at m: 1 where m carries a learned power
// correction (it broke the power budget live), else none.
func (c *Controller) powerFloor(m powermode.Mode) float64 {
	if c.corrP[m] > 1 {
		return 1
	}
	return 0
}

// refineDecider is the decision (plan.MultiDecider, the one plans are chosen by) for the
// workloads planned for at the streams' rates. Called with c.mu held.
func (c *Controller) refineDecider(rates []float64) plan.MultiDecider {
	return c.Rules().ForMulti(c.plannedBudgets(rates), c.cfg.InferBatches)
}

// keyOfScored is the key of a scored configuration.
func keyOfScored(s plan.MultiScored) cfgKey { return keyOf(s.Mode, s.Batches()) }

// keyWords names a key in an event's words: the pair's "mode M batch B", several
// streams' "mode M batches s1 B1, s2 B2". Called with c.mu held.
func (c *Controller) keyWords(k cfgKey) string {
	bs := k.batchList()
	g := c.planned()
	if len(bs) <= 1 || g == nil || len(g.Streams) != len(bs) {
		return fmt.Sprintf("mode %s batch %d", k.m.Human(), k.first())
	}
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = fmt.Sprintf("%s %d", g.Streams[i].Workload, b)
	}
	return fmt.Sprintf("mode %s batches %s", k.m.Human(), strings.Join(parts, ", "))
}

// streamBatches names every stream's batch of k (the order planned for). Called with c.mu
// held.
func (c *Controller) streamBatches(k cfgKey) []StreamBatch {
	g := c.planned()
	bs := k.batchList()
	if g == nil || len(g.Streams) != len(bs) {
		return nil
	}
	out := make([]StreamBatch, len(bs))
	for i, b := range bs {
		out[i] = StreamBatch{Workload: g.Streams[i].Workload, Batch: b}
	}
	return out
}

// refineStep is live refinement's part of the step, before the budget checks, for every
// stream and job planned for (rates: the streams' planning rates): it closes live
// windows, ends a trial that breaks a budget, confirms configurations and starts trials.
// It returns true when it decided this step (the rest of the step is skipped). Called
// with c.mu held.
func (c *Controller) refineStep(ctx context.Context, snap sched.Snapshot, now time.Time, rates []float64) bool {
	o := c.cfg.Refine
	if !o.Enabled || c.cur == nil || c.board == nil {
		return false
	}
	closed := c.observeWindow(snap, now)
	t := c.ref.trial
	if t != nil && (c.needPlan != "" || c.want != nil || c.held || c.ext != nil || keyOfChoice(*c.cur) != t.key) {
		c.ref.trial = nil // a plan, a step or the operator moved on: the trial is over
		t = nil
	}
	if t != nil {
		if avg, over := c.powerOver(now); over {
			if pred := c.cur.Predicted.PowerMW; pred > 0 {
				c.corrP[t.key.m] = max(c.corrP[t.key.m], avg/pred) // what the model is taught
			}
			c.violations["power"]++
			c.abandon(ctx, fmt.Sprintf("power %.1f W (1 s average) over the %.1f W budget", avg/1000, c.targets.PowerMW/1000), now, rates)
			return true
		}
		// Each stream against its own latency budget (the pair's stream too: its own
		// target where the operator set one); a stream that broke it is marked at the
		// trial's point, as rule 4 marks it.
		if broke := c.latencyBrokenOnTrial(now); len(broke) > 0 {
			var why []string
			for _, s := range broke {
				if !t.turns {
					// A turns trial broke it with its training turns, not with the batch:
					// the confirmed configuration has that batch at that mode.
					c.markBad(s.name, t.key.m, s.batch)
				}
				why = append(why, c.latencyWhy(s, len(c.cur.Streams)))
			}
			c.violations["latency"]++
			c.abandon(ctx, strings.Join(why, "; "), now, rates)
			return true
		}
		if closed && c.ref.win.count >= o.ConfirmWindows {
			s, ok := c.scoreKey(t.key, rates)
			fs, fok := c.scoreKey(t.from.key, rates)
			if t.turns {
				// The key's figures are its best claimed turns; a turns trial is judged on
				// the turns it runs against those it left.
				s, ok = c.scoreTurns(t.key, microOfChoice(*c.cur), rates)
				fs, fok = c.scoreTurns(t.from.key, t.from.eval.MicroBatches, rates)
			}
			if ok && fok && !t.paused && s.ObjectiveSPS < fs.ObjectiveSPS {
				// Its own evidence ranks it below where it came from: no gain to keep.
				c.abandon(ctx, fmt.Sprintf("with its live evidence it trains %.1f samples/s, the confirmed configuration %.1f", s.ObjectiveSPS, fs.ObjectiveSPS), now, rates)
				return true
			}
			if ok && c.refineDecider(rates).Claims(s) {
				c.ref.trial = nil
				c.ref.confirmed = &refinePoint{key: t.key, eval: s.MultiEval, at: now}
				c.ref.nextTrial = now.Add(o.Window * time.Duration(o.ConfirmWindows))
				c.events.Add(Event{Kind: KindConfirm, Reason: fmt.Sprintf("trial of %s confirmed after %s: %s", c.keyWords(t.key), now.Sub(t.start).Round(time.Second), c.refineWhy(s)),
					Mode: ptrMode(t.key.m), Batch: t.key.first(), Streams: c.streamBatches(t.key), Predicted: predPtr(s.MultiEval, rates), Measured: ptrMeasured(c.measured)})
				return true
			}
		}
		if !now.Before(t.deadline) {
			c.abandon(ctx, fmt.Sprintf("not confirmed within %s", o.TrialMax), now, rates)
			return true
		}
		// The other rules still run on trial: a drift re-plan ends it like a plan does
		// (power and latency violations ended it above, before rules 2 and 4).
		return false
	}
	if c.nearClaim(ctx, snap, now, rates) {
		return true
	}
	if !closed || c.needPlan != "" || c.want != nil || c.held || c.ext != nil {
		return false
	}
	key := keyOfChoice(*c.cur)
	cs, ok := c.scoreKey(key, rates)
	if !ok {
		return false
	}
	d := c.refineDecider(rates)
	if c.ref.confirmed == nil || c.ref.confirmed.key != key {
		if c.ref.win.count >= o.ConfirmWindows && d.Claims(cs) && !c.stepped {
			c.ref.confirmed = &refinePoint{key: key, eval: cs.MultiEval, at: now}
			c.ref.nextTrial = now.Add(o.Window)
			c.events.Add(Event{Kind: KindConfirm, Reason: fmt.Sprintf("configuration in force confirmed live after %d windows: %s", c.ref.win.count, c.refineWhy(cs)),
				Mode: ptrMode(key.m), Batch: key.first(), Streams: c.streamBatches(key), Predicted: predPtr(cs.MultiEval, rates), Measured: ptrMeasured(c.measured)})
		}
		return false
	}
	if !d.Claims(cs) {
		c.ref.confirmed = nil // the budgets or the evidence moved: confirm again
		return false
	}
	c.ref.confirmed.eval = cs.MultiEval
	in, inOK := c.scoreTurns(key, microOfChoice(*c.cur), rates)
	if inOK {
		// The turns in force, not the key's best claimed ones: a trial's abandon goes
		// back to what ran (the best claimed turns flip with P near the claim, and an
		// abandon then changed the turns in force with no trial of its own).
		c.ref.confirmed.eval = in.MultiEval
	}
	if !o.Trials || c.stepped || now.Before(c.ref.nextTrial) {
		return false
	}
	if inOK && c.tryTurns(ctx, key, cs, in, now, rates) {
		return true
	}
	cand, ok := c.trialCandidate(d, cs, now)
	if !ok {
		if m, ok := c.probeCandidate(cs); ok {
			c.startProbe(m, key, now)
			return true
		}
		return false
	}
	from := *c.ref.confirmed
	c.ref.trial = &refineTrial{key: keyOfScored(cand), from: from, start: now, deadline: now.Add(o.TrialMax)}
	reason := fmt.Sprintf("trying %s for at most %s from the confirmed %s: predicted %.1f samples/s against %.1f, P(every budget met) %.1f%% (a claim needs %g%%); back at once if a budget breaks",
		c.keyWords(keyOfScored(cand)), o.TrialMax, c.keyWords(from.key), cand.ObjectiveSPS, cs.ObjectiveSPS, 100*cand.PFeasible, 100*d.Confidence)
	c.decideRefined(ctx, KindTrial, reason, cand.MultiEval, rates)
	return true
}

// latencyBrokenOnTrial is every stream of the configuration in force whose p99 broke its
// own latency budget (streamsInForce: the operator's per-stream target, else the shared
// one), judged once the window holds only requests served since the trial was applied.
// Called with c.mu held.
func (c *Controller) latencyBrokenOnTrial(now time.Time) []streamInForce {
	if !c.latencySettled(now) {
		return nil
	}
	var out []streamInForce
	for _, s := range c.streamsInForce() {
		if s.broken {
			out = append(out, s)
		}
	}
	return out
}

// latencyWhy is a stream's broken latency budget in an event's words (the pair's as
// before: "p99 latency … over the … budget").
func (c *Controller) latencyWhy(s streamInForce, streams int) string {
	if streams <= 1 {
		return fmt.Sprintf("p99 latency %.1f ms over the %.0f ms budget", s.p99MS, s.budgetMS)
	}
	return fmt.Sprintf("stream %s: p99 latency %.1f ms over its %.0f ms budget", s.name, s.p99MS, s.budgetMS)
}

// abandon ends the trial: back to the confirmed configuration, the neighbour backed
// off (Backoff, doubled per failure). Called with c.mu held.
func (c *Controller) abandon(ctx context.Context, why string, now time.Time, rates []float64) {
	t := c.ref.trial
	c.ref.trial = nil
	if c.ref.failed == nil {
		c.ref.failed = map[cfgKey]*refineFailure{}
	}
	fk := t.key
	if t.turns {
		fk = turnsKey(t.key, microOfChoice(*c.cur)) // the key itself stays confirmed
	}
	f := c.ref.failed[fk]
	if f == nil {
		f = &refineFailure{}
		c.ref.failed[fk] = f
	}
	f.count++
	f.retryAt = now.Add(c.cfg.Refine.Backoff << min(f.count-1, 10))
	f.why = why
	c.ref.confirmed = &refinePoint{key: t.from.key, eval: t.from.eval, at: t.from.at}
	if t.paused {
		c.ref.confirmed = nil // back to the paused plan: nothing there was confirmed
	}
	c.ref.nextTrial = now.Add(c.cfg.Refine.Window * time.Duration(c.cfg.Refine.ConfirmWindows))
	c.lastStep = now
	back := "the confirmed"
	if t.paused {
		back = "the paused plan's"
	}
	what, to := c.keyWords(t.key), c.keyWords(t.from.key)
	if t.turns {
		what += " with " + turnsWords(microOfChoice(*c.cur))
		to += " with " + turnsWords(t.from.eval.MicroBatches)
	}
	reason := fmt.Sprintf("trial of %s abandoned after %s: %s; back to %s %s; not tried again before %s",
		what, now.Sub(t.start).Round(100*time.Millisecond), why, back, to, f.retryAt.Sub(now).Round(time.Second))
	c.decideRefined(ctx, KindAbandon, reason, t.from.eval, rates)
	if t.paused {
		// Back to the paused plan, often at the same mode and batch: the latency window
		// still holds the trial's turns, which are not the paused plan's. Without this the
		// latency rule judged that window at once and stepped to an unclaimed
		// configuration with training running (traced: the AGX lifetime sub-sweep, ALS,
		// 20 req/s, 20 W, latency broken 1,367 s of 1,800).
		c.configChanged(now)
	}
}

// nearClaim starts a trial from a plan that paused training (issue 31): no
// configuration is claimed at plan_confidence, but one fits as measured with the
// admission room and is claimed at NearClaimP or more. One profile of a few per cent
// noise cannot certify a few per cent of room, and a paused plan gathers no live
// evidence; the configuration's own windows can. It runs under a trial's bounded
// exposure (at most TrialMax, back to the paused plan the moment a budget breaks, backed
// off after a failure) and is kept once its evidence claims it. It reports whether it
// started one. Called with c.mu held.
func (c *Controller) nearClaim(ctx context.Context, snap sched.Snapshot, now time.Time, rates []float64) bool {
	o := c.cfg.Refine
	if !o.Trials || !o.NearClaim || c.ref.trial != nil || c.cur.Predicted.Feasible || !snap.TrainingPaused ||
		c.needPlan != "" || c.want != nil || c.held || c.ext != nil || now.Before(c.ref.nextTrial) {
		return false
	}
	if _, over := c.powerOver(now); over || c.latencyOver() {
		return false // a budget broken even while paused: the step rules act first
	}
	if now.Before(c.ref.nearNext) {
		return false
	}
	// Measured: scoring the store every 250 ms period while paused made the lifetime
	// tests under -race run past their 10 min (TestPausedTrainingSearchesAgain).
	c.ref.nearNext = now.Add(o.Window)
	d := c.refineDecider(rates)
	names := c.plannedStreams()
	best, found := c.bestCandidate(d, now, func(s plan.MultiScored) bool {
		for i, st := range s.Streams {
			if i < len(names) && c.isBad(names[i], s.Mode, st.Batch) {
				return false
			}
		}
		return !d.Claims(s) && s.ViolationAdm <= 0 && s.PFeasible >= o.NearClaimP && s.ObjectiveSPS > 0
	})
	if !found {
		return false
	}
	from := keyOfChoice(*c.cur)
	cs, ok := c.scoreKey(from, rates)
	if !ok {
		return false
	}
	back := cs.MultiEval // the paused plan, as the decision gave it: not claimed
	back.Feasible, back.Binding = false, cs.BindingAdm
	c.ref.trial = &refineTrial{key: keyOfScored(best), from: refinePoint{key: from, eval: back, at: now},
		start: now, deadline: now.Add(o.TrialMax), paused: true}
	try := best.MultiEval
	try.Feasible = true // on trial: training runs, under the trial's exposure bound
	reason := fmt.Sprintf("training is paused with nothing claimed; trying %s for at most %s: it fits as measured with the admission room, P(every budget met) %.1f%% (a claim needs %g%%), predicted %.1f samples/s; its live windows may certify it; back to the paused plan at once if a budget breaks",
		c.keyWords(keyOfScored(best)), o.TrialMax, 100*best.PFeasible, 100*d.Confidence, best.ObjectiveSPS)
	c.decideRefined(ctx, KindTrial, reason, try, rates)
	return true
}

// plannedStreams are the streams planned for, by workload, in order. Called with c.mu
// held.
func (c *Controller) plannedStreams() []string {
	g := c.planned()
	if g == nil {
		return nil
	}
	out := make([]string, len(g.Streams))
	for i, s := range g.Streams {
		out[i] = s.Workload
	}
	return out
}

// trialCandidate is the neighbour to try: among the stored configurations within
// TrialSteps knob levels of the confirmed mode (any stream's batch and any job's
// micro-batch), not backed off, that fit as measured with the admission room, with P ≥
// TrialMinP and TrialGain more predicted training objective, the one with the largest
// P × objective.
func (c *Controller) trialCandidate(d plan.MultiDecider, cur plan.MultiScored, now time.Time) (plan.MultiScored, bool) {
	o := c.cfg.Refine
	sp := c.board.Space()
	curKey := keyOfScored(cur)
	return c.bestCandidate(d, now, func(s plan.MultiScored) bool {
		// The confirmed configuration's figures are refined, a neighbour's may not be:
		// comparing like with like (the neighbour against the confirmed one as stored)
		// was measured and lost the one gain of the AGX sweep (docs/benchmarks.md "Live
		// refinement"), so the model's ranking with what it knows stands.
		return keyOfScored(s) != curKey &&
			s.Feasible && s.ViolationAdm <= 0 && s.PFeasible >= o.TrialMinP && s.ObjectiveSPS >= cur.ObjectiveSPS*(1+o.TrialGain) &&
			(modeSteps(sp, cur.Mode, s.Mode) <= o.TrialSteps || isTrade(sp, cur.Mode, s.Mode))
	})
}

// bestCandidate is the configuration to try among the stored ones under the thermal cap
// that keep accepts, not backed off after a failed trial: the one with the largest
// P × objective (trialCandidate, nearClaim).
func (c *Controller) bestCandidate(d plan.MultiDecider, now time.Time, keep func(plan.MultiScored) bool) (plan.MultiScored, bool) {
	ps, err := c.plannedProfiles()
	if err != nil {
		return plan.MultiScored{}, false
	}
	ps = underCap(c, ps, func(p plan.MultiProfile) powermode.Mode { return p.Mode })
	all, err := d.ScoreAll(ps)
	if err != nil {
		return plan.MultiScored{}, false
	}
	var best plan.MultiScored
	found := false
	for _, s := range all {
		if f := c.ref.failed[keyOfScored(s)]; f != nil && now.Before(f.retryAt) {
			continue
		}
		if !keep(s) {
			continue
		}
		if !found || s.PFeasible*s.ObjectiveSPS > best.PFeasible*best.ObjectiveSPS {
			best, found = s, true
		}
	}
	return best, found
}

// scoreIn is the configuration key scored by d over ps: among its training turns (the
// whole minibatch, each micro-batch size) those the decision claims, the one that trains
// most, as the decision itself ranks; none claimed, the best-P one. The best-P turns
// alone made a claimed trial's figures those of a smaller micro-batch that trains less
// (P 1.0 against 0.9999…): on the AGX lifetime sweep (10 req/s, 150 ms, 20 W) three trials
// that ran micro-batches of 16 were abandoned as "trains 130 samples/s against 152" with
// live evidence of ×1.04 on their turns.
func scoreIn(d plan.MultiDecider, ps []plan.MultiProfile, key cfgKey) (plan.MultiScored, bool) {
	all, ok := scoresAt(d, ps, key)
	if !ok {
		return plan.MultiScored{}, false
	}
	var best plan.MultiScored
	found := false
	for _, s := range all {
		if keyOfScored(s) != key {
			continue
		}
		claimed, bestClaimed := s.PFeasible >= d.Confidence, found && best.PFeasible >= d.Confidence
		switch {
		case !found,
			claimed && !bestClaimed,
			claimed && bestClaimed && s.ObjectiveSPS > best.ObjectiveSPS,
			!claimed && !bestClaimed && s.PFeasible > best.PFeasible:
			best, found = s, true
		}
	}
	return best, found
}

// scoresAt is every configuration of key's mode in ps scored by d (every batch and
// training turn; false when the mode is not in ps or cannot be scored).
func scoresAt(d plan.MultiDecider, ps []plan.MultiProfile, key cfgKey) ([]plan.MultiScored, bool) {
	i := slices.IndexFunc(ps, func(p plan.MultiProfile) bool { return p.Mode == key.m })
	if i < 0 {
		return nil, false
	}
	all, err := d.ScoreAll(ps[i : i+1])
	return all, err == nil
}

// modeSteps is how many knob levels apart two modes are in the board's space (0 for
// the same mode; unbounded when either is outside it or there is no space).
func modeSteps(sp *powermode.Space, a, b powermode.Mode) int {
	if a == b {
		return 0
	}
	if sp == nil {
		return math.MaxInt
	}
	ia, oka := sp.Index(a)
	ib, okb := sp.Index(b)
	if !oka || !okb {
		return math.MaxInt
	}
	n := 0
	for k := range ia {
		d := ia[k] - ib[k]
		n += max(d, -d)
	}
	return n
}

// scoreKey scores the configuration key with the refined profiles (its whole
// minibatch turns, or its best-ranked micro-batch turns) at the streams' rates.
func (c *Controller) scoreKey(key cfgKey, rates []float64) (plan.MultiScored, bool) {
	ps, err := c.plannedProfiles()
	if err != nil {
		return plan.MultiScored{}, false
	}
	i := slices.IndexFunc(ps, func(p plan.MultiProfile) bool { return p.Mode == key.m })
	best, found := scoreIn(c.refineDecider(rates), ps, key)
	if found {
		ws := c.ref.evidence[key.m]
		pooled := Pooled{Windows: len(ws), TrainRatio: 1, InferRatio: 1, PowerRatio: 1, Repeats: max(ps[i].Repeats, 1)}
		inForce := c.cur != nil && key == keyOfChoice(*c.cur)
		if len(ws) > 0 && inForce {
			// The status figures: the same pooling plannedProfiles applied, recomputed on
			// the stored profile for its ratios.
			if raw, err := c.storedAt(key.m); err == nil {
				_, pooled = poolEvidence(raw, ws, c.shares(), c.cfg.NoiseRel, c.cfg.Refine.MaxRepeats, c.powerFloor(key.m))
			}
		}
		if inForce {
			c.ref.last = &RefineStatus{Mode: key.m, Batch: key.first(), Streams: c.streamBatches(key), Pooled: pooled, PFeasible: best.PFeasible}
		}
	}
	return best, found
}

// shares are the training jobs' shares of training time planned for (model v1's s_j).
// Called with c.mu held.
func (c *Controller) shares() []float64 {
	g := c.planned()
	if g == nil {
		return nil
	}
	rates := make([]float64, len(g.Streams)) // the weights do not depend on the rates
	return trainShares(c.plannedBudgets(rates), len(g.Train))
}

// storedAt is the profile at m of every workload planned for, as plannedProfiles gives it
// before the live evidence.
func (c *Controller) storedAt(m powermode.Mode) (plan.MultiProfile, error) {
	ps, err := c.storedPlanned()
	if err != nil {
		return plan.MultiProfile{}, err
	}
	for _, p := range ps {
		if p.Mode == m {
			return p, nil
		}
	}
	return plan.MultiProfile{}, fmt.Errorf("no stored profile at %s", m.Human())
}

// measuredRate is a planned stream's measured arrival rate (its meter's EWMA; 0 before
// one). Called with c.mu held.
func (c *Controller) measuredRate(workload string) float64 {
	if m := c.meters[workload]; m != nil {
		return m.rate
	}
	return 0
}

// observeWindow keeps the live window of the configuration in force and closes it once
// Window has passed with MinTurns training minibatches of every job and inference batches
// of every stream in it; it reports whether one closed this step. A window counts only
// while training runs at a planned configuration, after the power readings settled.
// Called with c.mu held.
func (c *Controller) observeWindow(snap sched.Snapshot, now time.Time) bool {
	o := c.cfg.Refine
	w := &c.ref.win
	g := c.planned()
	key := keyOfChoice(*c.cur)
	tws := make([]sched.WorkloadStats, len(g.Train))
	iws := make([]sched.WorkloadStats, len(g.Streams))
	ok := true
	for j, job := range g.Train {
		var found bool
		tws[j], found = snap.Workload(proto.RoleTrain, job.Workload)
		ok = ok && found
	}
	for i, st := range g.Streams {
		var found bool
		iws[i], found = snap.Workload(proto.RoleInfer, st.Workload)
		ok = ok && found
	}
	if c.job || c.want != nil || c.held || c.ext != nil || snap.TrainingPaused || !ok {
		w.start = time.Time{}
		return false
	}
	if w.key != key || !w.since.Equal(c.cfgSince) {
		w.key, w.since, w.count, w.start = key, c.cfgSince, 0, time.Time{}
	}
	mark := func() {
		w.start = now
		w.minibatches, w.batches = w.minibatches[:0], w.batches[:0]
		for _, tw := range tws {
			w.minibatches = append(w.minibatches, tw.Minibatches)
		}
		for _, iw := range iws {
			w.batches = append(w.batches, iw.Served)
		}
	}
	if w.start.IsZero() || len(w.minibatches) != len(tws) || len(w.batches) != len(iws) {
		if now.Before(c.lastApply.Add(c.cfg.PowerSettle)) {
			w.start = time.Time{}
			return false
		}
		mark()
		return false
	}
	enough := now.Sub(w.start) >= o.Window
	for j, tw := range tws {
		enough = enough && tw.Minibatches >= w.minibatches[j]+uint64(o.MinTurns)
	}
	for i, iw := range iws {
		enough = enough && iw.Served >= w.batches[i]+uint64(o.MinTurns)
	}
	if !enough {
		if now.Sub(w.start) > 20*o.Window { // too slow to count: start afresh
			w.start = time.Time{}
		}
		return false
	}
	// Each job's turn: the plan's micro-batch (its own expected time), else the whole
	// minibatch; each stream's batch in force.
	var lw liveWindow
	for j, job := range g.Train {
		ob := trainObs{MS: tws[j].ExpectedTrainMS}
		if mb, _ := c.microFor(*c.cur, job.Workload); mb > 0 {
			ob = trainObs{MS: tws[j].ExpectedMicroMS[mb], Micro: mb}
		}
		lw.Train = append(lw.Train, ob)
	}
	for i, st := range g.Streams {
		ob := inferObs{Batch: c.batchFor(*c.cur, st.Workload), RateRPS: c.measuredRate(st.Workload)}
		if ms, ok := iws[i].ExpectedBatchMS[ob.Batch]; ok {
			ob.MS = ms
		}
		lw.Infer = append(lw.Infer, ob)
	}
	if avg, n := c.power.Mean(w.start, now); n > 0 {
		lw.PowerMW = avg
	}
	if c.ref.evidence == nil {
		c.ref.evidence = map[powermode.Mode][]liveWindow{}
	}
	ws := append(c.ref.evidence[key.m], lw)
	if keep := 2 * o.MaxRepeats; len(ws) > keep {
		ws = slices.Clone(ws[len(ws)-keep:])
	}
	c.ref.evidence[key.m] = ws
	w.count++
	mark()
	return true
}

// refineStatus is live refinement in the status (nil while off or before a window).
func (c *Controller) refineStatus() *RefineStatus {
	if !c.cfg.Refine.Enabled || c.ref.last == nil {
		return nil
	}
	s := *c.ref.last
	if p := c.ref.confirmed; p != nil {
		s.Confirmed = &RefineConfig{Mode: p.key.m, Batch: p.key.first(), Streams: c.streamBatches(p.key)}
	}
	if t := c.ref.trial; t != nil {
		s.Trial = &RefineConfig{Mode: t.key.m, Batch: t.key.first(), Streams: c.streamBatches(t.key)}
		s.TrialUntil = t.deadline
	}
	for k, f := range c.ref.failed {
		s.Failed = append(s.Failed, RefineFailure{Mode: k.m, Batch: k.first(), Streams: c.streamBatches(k), Count: f.count, RetryAt: f.retryAt, Why: f.why})
	}
	slices.SortFunc(s.Failed, func(a, b RefineFailure) int { return a.RetryAt.Compare(b.RetryAt) })
	return &s
}

func (c *Controller) refineWhy(s plan.MultiScored) string {
	p := c.ref.last
	why := fmt.Sprintf("P(every budget met) %.2f%%", 100*s.PFeasible)
	if p != nil && p.Mode == s.Mode && keyOf(p.Mode, batchesOf(p)) == keyOfScored(s) {
		q := p.Pooled
		if len(q.TrainRatios) <= 1 && len(q.InferRatios) <= 1 {
			why += fmt.Sprintf(" with %d live windows pooled (the profile counts %d repeats; live/stored: training time ×%.3f, inference time ×%.3f, power ×%.3f)",
				q.Windows, q.Repeats, q.TrainRatio, q.InferRatio, q.PowerRatio)
		} else {
			why += fmt.Sprintf(" with %d live windows pooled (the profile counts %d repeats; live/stored: training time %s, inference time %s, power ×%.3f)",
				q.Windows, q.Repeats, ratioWords(q.TrainRatios), ratioWords(q.InferRatios), q.PowerRatio)
		}
	}
	return why
}

// batchesOf is every stream's batch of a status (Batch alone for the pair).
func batchesOf(p *RefineStatus) []int {
	if len(p.Streams) == 0 {
		return []int{p.Batch}
	}
	out := make([]int, len(p.Streams))
	for i, s := range p.Streams {
		out[i] = s.Batch
	}
	return out
}

// ratioWords is one ratio per workload ("×1.020, ×0.990").
func ratioWords(rs []float64) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("×%.3f", r)
	}
	return strings.Join(parts, ", ")
}

func ptrMode(m powermode.Mode) *powermode.Mode { return &m }
func ptrMeasured(m Measured) *Measured         { return &m }

// predPtr is model v1's figures of e at the streams' rates as an event shows them (the
// first stream's latency and rate).
func predPtr(e plan.MultiEval, rates []float64) *Prediction {
	p := Prediction{ThroughputSPS: e.ObjectiveSPS, PowerMW: e.PowerMW, Rho: e.Rho, Feasible: e.Feasible, Binding: string(e.Binding.Constraint)}
	if len(e.Streams) > 0 {
		p.LatencyMS = e.Streams[0].LatencyMS
	}
	if len(rates) > 0 {
		p.RateRPS = rates[0]
	}
	return &p
}

// decideRefined applies e — a configuration of every stream and job planned for as live
// refinement scored it: a trial, or the point a trial goes back to — through the one
// path (applyDecision with the group's Choice), with model v1's figures for it at the
// streams' rates on the profiles as they are now (e may be older: the confirmed point a
// trial left). Called with c.mu held.
func (c *Controller) decideRefined(ctx context.Context, kind Kind, reason string, e plan.MultiEval, rates []float64) {
	mb := c.plannedBudgets(rates)
	exact := e
	if m, err := plan.NewMultiModel(mb, c.cfg.InferBatches); err == nil {
		if ps, perr := c.plannedProfiles(); perr == nil {
			for _, p := range ps {
				if p.Mode != e.Mode {
					continue
				}
				micro := make([]int, len(p.Train)) // the training turns the decision chose (issue 32)
				copy(micro, e.MicroBatches)
				if x, err := m.EvaluateMicro(p, e.Batches(), micro); err == nil {
					exact = x
				}
			}
		}
	}
	ch := c.choiceOf(exact, mb)
	// The rates as measured, not the model's least rate (an event shows what ran).
	for i := range ch.Streams {
		if i < len(rates) {
			ch.Streams[i].RateRPS = rates[i]
		}
	}
	if len(rates) > 0 {
		ch.Predicted.RateRPS = rates[0]
	}
	// A plan judged with the scheduler's admission room that does not fit in it is not
	// feasible, whatever the exact model says: training would starve.
	ch.Predicted.Feasible = exact.Feasible && e.Feasible
	if !e.Feasible {
		ch.Predicted.Binding = string(e.Binding.Constraint) // what the decision's reason names
	}
	c.applyDecision(ctx, kind, reason, ch)
}

// turnKey is job j's training turn at a mode: micro 0 the whole minibatch, else a
// micro-batch size.
type turnKey struct {
	job   int
	m     powermode.Mode
	micro int
}

// storedTurnTimes is every stored training turn's time before the live evidence, of every
// job planned for. Rule 4 ranks turns as "shorter" on it: only the mode in force has live
// evidence, and its pooled time against the others' stored ones would be compared across
// two bases (a live turn reads a few % over its stored time on every mode: the
// scheduler's medians include the interleaving); a stored mode that trains longer then
// ranked as shorter and the step went there (ALS on the AGX sweep, 20 req/s, 40 W: to a
// configuration predicted infeasible, training paused; docs/benchmarks.md "Live
// refinement"). Nil when refinement is off or nothing is measured live (plannedProfiles
// is then the stored basis).
func (c *Controller) storedTurnTimes() map[turnKey]float64 {
	if !c.cfg.Refine.Enabled || len(c.ref.evidence) == 0 {
		return nil
	}
	ps, err := c.storedPlanned()
	if err != nil {
		return nil
	}
	out := map[turnKey]float64{}
	for _, p := range ps {
		for j := range p.Train {
			for _, t := range p.TrainChoices(j) {
				out[turnKey{j, p.Mode, t.MicroBatch()}] = t.TimeMS
			}
		}
	}
	return out
}
