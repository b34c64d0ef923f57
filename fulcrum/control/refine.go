package control

import (
	"context"
	"fmt"
	"math"
	"slices"
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
}

// DefaultRefineOptions are live refinement's defaults (on, trials on).
func DefaultRefineOptions() RefineOptions {
	return RefineOptions{Enabled: true, Trials: true, NearClaim: true}.withDefaults()
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
	return o
}

// liveWindow is one window of live operation at a mode: the scheduler's expected
// training minibatch and inference batch times at its end (medians of the latest turns,
// internal/stats), the board's mean power over it and the arrival rate.
type liveWindow struct {
	TrainMS    float64 // 0: not measured
	TrainMicro int     // the training turn TrainMS is of: 0 the whole minibatch, else a micro-batch size
	InferMS    float64 // 0: not measured
	InferBatch int
	PowerMW    float64 // 0: not measured
	RateRPS    float64
}

// Pooled is what the live evidence made of a mode's profile: the ratios applied to the
// stored times and power, and the repeats the profile now counts for.
type Pooled struct {
	Windows    int     `json:"windows"`
	TrainRatio float64 `json:"train_ratio"`
	InferRatio float64 `json:"infer_ratio"`
	PowerRatio float64 `json:"power_ratio"`
	Repeats    int     `json:"repeats"`
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

// poolEvidence refines the stored profile p of a mode with its live windows (the rule
// of poolRatio for each of the training time, the inference time and the mixed
// power). The mixed power a window measures is compared with model v1's power of p at
// the window's rate (ρ·π_I + (1−ρ)·π_T): the mix cannot be split, so both powers take
// the pooled ratio. Every inference batch of the mode takes the ratio measured at the
// batch that ran (the mode's speed). The profile counts for the fewest repeats any of
// the three quantities is worth, within [p.Repeats, maxRepeats].
//
// powerFloor (0: none) bounds the pooled power ratio from below: where the mode broke
// the power budget live and carries a learned correction (rule 2), its power is already
// the measured draw at the moment it broke, and a mean that sits under the budget does
// not make the 1 s averages the budget is judged on stay under it (found on the AGX
// lifetime sweep: the pooled mean, 3 % under a 40 W budget, brought step_up back to the
// mode every few minutes and each time power broke again).
func poolEvidence(p plan.ModeProfile, ws []liveWindow, noise float64, maxRepeats int, powerFloor float64) (plan.ModeProfile, Pooled) {
	var rt, ri, rp []float64
	for _, w := range ws {
		if st := storedTurnMS(p, w.TrainMicro); w.TrainMS > 0 && st > 0 {
			rt = append(rt, w.TrainMS/st)
		}
		ip, ok := inferAt(p, w.InferBatch)
		if w.InferMS > 0 && ok && ip.TimeMS > 0 {
			ri = append(ri, w.InferMS/ip.TimeMS)
		}
		if w.PowerMW > 0 && ok {
			rho := min(w.RateRPS*ip.TimeMS/1000/float64(max(ip.Batch, 1)), 1)
			if pred := rho*ip.PowerMW + (1-rho)*p.Train.PowerMW; pred > 0 {
				rp = append(rp, w.PowerMW/pred)
			}
		}
	}
	n0 := max(p.Repeats, 1)
	kt, nt := poolRatio(rt, n0, noise)
	ki, ni := poolRatio(ri, n0, noise)
	kp, np := poolRatio(rp, n0, noise)
	kp = max(kp, powerFloor)
	out := p.Clone()
	out.Train.TimeMS *= kt
	out.Train.PowerMW *= kp
	for j := range out.Infer {
		out.Infer[j].TimeMS *= ki
		out.Infer[j].PowerMW *= kp
	}
	for j := range out.Micro {
		out.Micro[j].TimeMS *= kt
		out.Micro[j].PowerMW *= kp
	}
	reps := int(math.Floor(min(nt, ni, np) + 1e-9))
	out.Repeats = min(max(reps, n0), max(maxRepeats, n0))
	return out, Pooled{Windows: len(ws), TrainRatio: kt, InferRatio: ki, PowerRatio: kp, Repeats: out.Repeats}
}

// storedTurnMS is the stored time of the training turn of micro-batch size micro (0:
// the whole minibatch) at p's mode; 0 when not stored.
func storedTurnMS(p plan.ModeProfile, micro int) float64 {
	if micro == 0 || micro == p.Train.Batch {
		return p.Train.TimeMS
	}
	for _, t := range p.Micro {
		if t.Batch == micro {
			return t.TimeMS
		}
	}
	return 0
}

func inferAt(p plan.ModeProfile, b int) (plan.InferPoint, bool) {
	i := slices.IndexFunc(p.Infer, func(ip plan.InferPoint) bool { return ip.Batch == b })
	if i < 0 {
		return plan.InferPoint{}, false
	}
	return p.Infer[i], true
}

// refineState is live refinement's state in the controller (guarded by c.mu).
type refineState struct {
	evidence map[powermode.Mode][]liveWindow
	// The open window: the configuration and since when, the counters at its start.
	win struct {
		key         cfgKey
		since       time.Time // c.cfgSince it belongs to
		start       time.Time
		minibatches uint64
		batches     uint64
		count       int // windows closed at key since it was applied
	}
	confirmed *refinePoint
	trial     *refineTrial
	failed    map[cfgKey]*refineFailure
	nextTrial time.Time
	// nearNext: the next step that may look for a near-claim (nearClaim scores every
	// stored configuration; once a window, not every control period, while paused).
	nearNext time.Time
	last     *RefineStatus // the figures at the last closed window
}

type refinePoint struct {
	key  cfgKey
	eval plan.Eval
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
}

type refineFailure struct {
	count   int
	retryAt time.Time
	why     string
}

// RefineStatus is live refinement in the controller's status.
type RefineStatus struct {
	// Mode and Batch are the configuration in force the figures are of; Pooled what its
	// evidence made of its profile; PFeasible the decision's P(every budget met) there
	// with it (at the last closed window).
	Mode      powermode.Mode `json:"mode"`
	Batch     int            `json:"batch"`
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

// RefineConfig is a configuration live refinement confirmed or tries.
type RefineConfig struct {
	Mode  powermode.Mode `json:"mode"`
	Batch int            `json:"batch"`
}

// RefineFailure is a neighbour whose trial failed.
type RefineFailure struct {
	Mode    powermode.Mode `json:"mode"`
	Batch   int            `json:"batch"`
	Count   int            `json:"count"`
	RetryAt time.Time      `json:"retry_at"`
	Why     string         `json:"why"`
}

// refineReset forgets everything learned live (other workloads).
func (c *Controller) refineReset() { c.ref = refineState{} }

// refining reports that live evidence is pooled into the profiles planned from
// (plannedProfiles): refinement is on, the pair is planned for, and something was
// measured live.
func (c *Controller) refining() bool {
	return c.cfg.Refine.Enabled && c.grp == nil && len(c.ref.evidence) > 0
}

// powerFloor is the least pooled power ratio at m: 1 where m carries a learned power
// correction (it broke the power budget live), else none.
func (c *Controller) powerFloor(m powermode.Mode) float64 {
	if c.corrP[m] > 1 {
		return 1
	}
	return 0
}

// refineStep is live refinement's part of the pair's Step, before the budget checks:
// it closes live windows, ends a trial that breaks a budget, confirms configurations
// and starts trials. It returns true when it decided this step (the rest of the step
// is skipped). Called with c.mu held.
func (c *Controller) refineStep(ctx context.Context, snap sched.Snapshot, now time.Time, rate float64) bool {
	o := c.cfg.Refine
	if !o.Enabled || c.cur == nil || c.grp != nil || c.board == nil {
		return false
	}
	closed := c.observeWindow(snap, now)
	t := c.ref.trial
	if t != nil && (c.needPlan != "" || c.want != nil || c.held || c.ext != nil || (cfgKey{c.cur.Mode, c.cur.Batch()}) != t.key) {
		c.ref.trial = nil // a plan, a step or the operator moved on: the trial is over
		t = nil
	}
	if t != nil {
		if avg, over := c.powerOver(now); over {
			if pred := c.cur.Predicted.PowerMW; pred > 0 {
				c.corrP[t.key.m] = max(c.corrP[t.key.m], avg/pred) // what the model is taught
			}
			c.violations["power"]++
			c.abandon(ctx, fmt.Sprintf("power %.1f W (1 s average) over the %.1f W budget", avg/1000, c.targets.PowerMW/1000), now, rate)
			return true
		}
		if c.latCount >= c.cfg.MinLatency && c.measured.LatencyP99MS > c.targets.LatencyMS && c.latencySettled(now) {
			c.markBad(c.pair.Infer, t.key.m, t.key.b)
			c.violations["latency"]++
			c.abandon(ctx, fmt.Sprintf("p99 latency %.1f ms over the %.0f ms budget", c.measured.LatencyP99MS, c.targets.LatencyMS), now, rate)
			return true
		}
		if closed && c.ref.win.count >= o.ConfirmWindows {
			s, ok := c.scoreKey(t.key, rate)
			if fs, fok := c.scoreKey(t.from.key, rate); ok && fok && !t.paused && s.ThroughputSPS < fs.ThroughputSPS {
				// Its own evidence ranks it below where it came from: no gain to keep.
				c.abandon(ctx, fmt.Sprintf("with its live evidence it trains %.1f samples/s, the confirmed configuration %.1f", s.ThroughputSPS, fs.ThroughputSPS), now, rate)
				return true
			}
			if ok && c.Rules().For(c.targets.Budgets(rate), c.cfg.InferBatches).Claims(s) {
				c.ref.trial = nil
				c.ref.confirmed = &refinePoint{key: t.key, eval: s.Eval, at: now}
				c.ref.nextTrial = now.Add(o.Window * time.Duration(o.ConfirmWindows))
				c.events.Add(Event{Kind: KindConfirm, Reason: fmt.Sprintf("trial of mode %s batch %d confirmed after %s: %s", t.key.m.Human(), t.key.b, now.Sub(t.start).Round(time.Second), c.refineWhy(s)),
					Mode: ptrMode(t.key.m), Batch: t.key.b, Predicted: predPtr(s.Eval, rate), Measured: ptrMeasured(c.measured)})
				return true
			}
		}
		if !now.Before(t.deadline) {
			c.abandon(ctx, fmt.Sprintf("not confirmed within %s", o.TrialMax), now, rate)
			return true
		}
		// The other rules still run on trial: a drift re-plan ends it like a plan does
		// (power and latency violations ended it above, before rules 2 and 4).
		return false
	}
	if c.nearClaim(ctx, snap, now, rate) {
		return true
	}
	if !closed || c.needPlan != "" || c.want != nil || c.held || c.ext != nil {
		return false
	}
	key := cfgKey{c.cur.Mode, c.cur.Batch()}
	cs, ok := c.scoreKey(key, rate)
	if !ok {
		return false
	}
	d := c.Rules().For(c.targets.Budgets(rate), c.cfg.InferBatches)
	if c.ref.confirmed == nil || c.ref.confirmed.key != key {
		if c.ref.win.count >= o.ConfirmWindows && d.Claims(cs) && !c.stepped {
			c.ref.confirmed = &refinePoint{key: key, eval: cs.Eval, at: now}
			c.ref.nextTrial = now.Add(o.Window)
			c.events.Add(Event{Kind: KindConfirm, Reason: fmt.Sprintf("configuration in force confirmed live after %d windows: %s", c.ref.win.count, c.refineWhy(cs)),
				Mode: ptrMode(key.m), Batch: key.b, Predicted: predPtr(cs.Eval, rate), Measured: ptrMeasured(c.measured)})
		}
		return false
	}
	if !d.Claims(cs) {
		c.ref.confirmed = nil // the budgets or the evidence moved: confirm again
		return false
	}
	c.ref.confirmed.eval = cs.Eval
	if !o.Trials || c.stepped || now.Before(c.ref.nextTrial) {
		return false
	}
	cand, ok := c.trialCandidate(d, cs, rate, now)
	if !ok {
		return false
	}
	from := *c.ref.confirmed
	c.ref.trial = &refineTrial{key: cfgKey{cand.Mode, cand.Batch}, from: from, start: now, deadline: now.Add(o.TrialMax)}
	reason := fmt.Sprintf("trying mode %s batch %d for at most %s from the confirmed mode %s batch %d: predicted %.1f samples/s against %.1f, P(every budget met) %.1f%% (a claim needs %g%%); back at once if a budget breaks",
		cand.Mode.Human(), cand.Batch, o.TrialMax, from.key.m.Human(), from.key.b, cand.ThroughputSPS, cs.ThroughputSPS, 100*cand.PFeasible, 100*d.Confidence)
	c.decidePair(ctx, KindTrial, reason, cand.Eval, rate)
	return true
}

// abandon ends the trial: back to the confirmed configuration, the neighbour backed
// off (Backoff, doubled per failure). Called with c.mu held.
func (c *Controller) abandon(ctx context.Context, why string, now time.Time, rate float64) {
	t := c.ref.trial
	c.ref.trial = nil
	if c.ref.failed == nil {
		c.ref.failed = map[cfgKey]*refineFailure{}
	}
	f := c.ref.failed[t.key]
	if f == nil {
		f = &refineFailure{}
		c.ref.failed[t.key] = f
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
	reason := fmt.Sprintf("trial of mode %s batch %d abandoned after %s: %s; back to %s mode %s batch %d; not tried again before %s",
		t.key.m.Human(), t.key.b, now.Sub(t.start).Round(100*time.Millisecond), why, back, t.from.key.m.Human(), t.from.key.b, f.retryAt.Sub(now).Round(time.Second))
	c.decidePair(ctx, KindAbandon, reason, t.from.eval, rate)
	if t.paused {
		// Back to the paused plan, often at the same mode and batch: the latency window
		// still holds the trial's turns, which are not the paused plan's. Without this the
		// latency rule judged that window at once and stepped to an unclaimed
		// configuration with training running (traced: the AGX lifetime sub-sweep, ALS,
		// 20 req/s, 20 W, latency broken 1,367 s of 1,800).
		c.cfgSince = now
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
func (c *Controller) nearClaim(ctx context.Context, snap sched.Snapshot, now time.Time, rate float64) bool {
	o := c.cfg.Refine
	if !o.Trials || !o.NearClaim || c.ref.trial != nil || c.cur.Predicted.Feasible || !snap.TrainingPaused ||
		c.needPlan != "" || c.want != nil || c.held || c.ext != nil || now.Before(c.ref.nextTrial) {
		return false
	}
	if _, over := c.powerOver(now); over || (c.latCount >= c.cfg.MinLatency && c.measured.LatencyP99MS > c.targets.LatencyMS) {
		return false // a budget broken even while paused: the step rules act first
	}
	if now.Before(c.ref.nearNext) {
		return false
	}
	// Measured: scoring the store every 250 ms period while paused made the lifetime
	// tests under -race run past their 10 min (TestPausedTrainingSearchesAgain).
	c.ref.nearNext = now.Add(o.Window)
	d := c.Rules().For(c.targets.Budgets(rate), c.cfg.InferBatches)
	best, found := c.bestCandidate(d, now, func(s plan.Scored) bool {
		return !c.isBad(c.pair.Infer, s.Mode, s.Batch) && !d.Claims(s) && s.ViolationAdm <= 0 && s.PFeasible >= o.NearClaimP && s.ThroughputSPS > 0
	})
	if !found {
		return false
	}
	from := cfgKey{c.cur.Mode, c.cur.Batch()}
	cs, ok := c.scoreKey(from, rate)
	if !ok {
		return false
	}
	back := cs.Eval // the paused plan, as the decision gave it: not claimed
	back.Feasible, back.Binding = false, cs.BindingAdm
	c.ref.trial = &refineTrial{key: cfgKey{best.Mode, best.Batch}, from: refinePoint{key: from, eval: back, at: now},
		start: now, deadline: now.Add(o.TrialMax), paused: true}
	try := best.Eval
	try.Feasible = true // on trial: training runs, under the trial's exposure bound
	reason := fmt.Sprintf("training is paused with nothing claimed; trying mode %s batch %d for at most %s: it fits as measured with the admission room, P(every budget met) %.1f%% (a claim needs %g%%), predicted %.1f samples/s; its live windows may certify it; back to the paused plan at once if a budget breaks",
		best.Mode.Human(), best.Batch, o.TrialMax, 100*best.PFeasible, 100*d.Confidence, best.ThroughputSPS)
	c.decidePair(ctx, KindTrial, reason, try, rate)
	return true
}

// trialCandidate is the neighbour to try: among the stored configurations within
// TrialSteps knob levels of the confirmed mode, not backed off, that fit as measured
// with the admission room, with P ≥ TrialMinP and TrialGain more predicted throughput,
// the one with the largest P × throughput.
func (c *Controller) trialCandidate(d plan.Decider, cur plan.Scored, rate float64, now time.Time) (plan.Scored, bool) {
	o := c.cfg.Refine
	sp := c.board.Space()
	return c.bestCandidate(d, now, func(s plan.Scored) bool {
		// The confirmed configuration's figures are refined, a neighbour's may not be:
		// comparing like with like (the neighbour against the confirmed one as stored)
		// was measured and lost the one gain of the AGX sweep (docs/benchmarks.md "Live
		// refinement"), so the model's ranking with what it knows stands.
		return (cfgKey{s.Mode, s.Batch}) != (cfgKey{cur.Mode, cur.Batch}) &&
			s.Feasible && s.ViolationAdm <= 0 && s.PFeasible >= o.TrialMinP && s.ThroughputSPS >= cur.ThroughputSPS*(1+o.TrialGain) &&
			modeSteps(sp, cur.Mode, s.Mode) <= o.TrialSteps
	})
}

// bestCandidate is the configuration to try among the stored ones under the thermal cap
// that keep accepts, not backed off after a failed trial: the one with the largest
// P × throughput (trialCandidate, nearClaim).
func (c *Controller) bestCandidate(d plan.Decider, now time.Time, keep func(plan.Scored) bool) (plan.Scored, bool) {
	ps, err := c.profiles()
	if err != nil {
		return plan.Scored{}, false
	}
	ps = underCap(c, ps, func(p plan.ModeProfile) powermode.Mode { return p.Mode })
	all, err := d.ScoreAll(ps)
	if err != nil {
		return plan.Scored{}, false
	}
	var best plan.Scored
	found := false
	for _, s := range all {
		if f := c.ref.failed[cfgKey{s.Mode, s.Batch}]; f != nil && now.Before(f.retryAt) {
			continue
		}
		if !keep(s) {
			continue
		}
		if !found || s.PFeasible*s.ThroughputSPS > best.PFeasible*best.ThroughputSPS {
			best, found = s, true
		}
	}
	return best, found
}

// scoreIn is the configuration key scored by d over ps (its best-P training turn).
func scoreIn(d plan.Decider, ps []plan.ModeProfile, key cfgKey) (plan.Scored, bool) {
	i := slices.IndexFunc(ps, func(p plan.ModeProfile) bool { return p.Mode == key.m })
	if i < 0 {
		return plan.Scored{}, false
	}
	all, err := d.ScoreAll(ps[i : i+1])
	if err != nil {
		return plan.Scored{}, false
	}
	var best plan.Scored
	found := false
	for _, s := range all {
		if s.Batch == key.b && (!found || s.PFeasible > best.PFeasible) {
			best, found = s, true
		}
	}
	return best, found
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
// minibatch turn, or its best-ranked micro-batch turn).
func (c *Controller) scoreKey(key cfgKey, rate float64) (plan.Scored, bool) {
	ps, err := c.profiles()
	if err != nil {
		return plan.Scored{}, false
	}
	i := slices.IndexFunc(ps, func(p plan.ModeProfile) bool { return p.Mode == key.m })
	best, found := scoreIn(c.Rules().For(c.targets.Budgets(rate), c.cfg.InferBatches), ps, key)
	if found {
		pooled := Pooled{Windows: len(c.ref.evidence[key.m]), TrainRatio: 1, InferRatio: 1, PowerRatio: 1, Repeats: max(ps[i].Repeats, 1)}
		if ws := c.ref.evidence[key.m]; len(ws) > 0 && c.cur != nil && key == (cfgKey{c.cur.Mode, c.cur.Batch()}) {
			// The status figures: the same pooling profiles() applied, recomputed on the
			// stored profile for its ratios.
			if raw, err := c.storedAt(key.m); err == nil {
				_, pooled = poolEvidence(raw, ws, c.cfg.NoiseRel, c.cfg.Refine.MaxRepeats, c.powerFloor(key.m))
			}
		}
		if c.cur != nil && key == (cfgKey{c.cur.Mode, c.cur.Batch()}) {
			c.ref.last = &RefineStatus{Mode: key.m, Batch: key.b, Pooled: pooled, PFeasible: best.PFeasible}
		}
	}
	return best, found
}

// storedAt is the pair's profile at m as profiles() gives it before the live evidence.
func (c *Controller) storedAt(m powermode.Mode) (plan.ModeProfile, error) {
	ps, err := c.unrefinedProfiles()
	if err != nil {
		return plan.ModeProfile{}, err
	}
	for _, p := range ps {
		if p.Mode == m {
			return p, nil
		}
	}
	return plan.ModeProfile{}, fmt.Errorf("no stored profile at %s", m.Human())
}

// observeWindow keeps the live window of the configuration in force and closes it once
// Window has passed with MinTurns training minibatches and inference batches in it;
// it reports whether one closed this step. A window counts only while training runs
// at a planned configuration, after the power readings settled. Called with c.mu held.
func (c *Controller) observeWindow(snap sched.Snapshot, now time.Time) bool {
	o := c.cfg.Refine
	w := &c.ref.win
	key := cfgKey{c.cur.Mode, c.cur.Batch()}
	tw, okT := snap.Workload(proto.RoleTrain, c.pair.Train)
	iw, okI := snap.Workload(proto.RoleInfer, c.pair.Infer)
	if c.job || c.want != nil || c.held || c.ext != nil || snap.TrainingPaused || !okT || !okI {
		w.start = time.Time{}
		return false
	}
	if w.key != key || !w.since.Equal(c.cfgSince) {
		w.key, w.since, w.count, w.start = key, c.cfgSince, 0, time.Time{}
	}
	if w.start.IsZero() {
		if now.Before(c.lastApply.Add(c.cfg.PowerSettle)) {
			return false
		}
		w.start, w.minibatches, w.batches = now, tw.Minibatches, iw.Served
		return false
	}
	if now.Sub(w.start) < o.Window || tw.Minibatches < w.minibatches+uint64(o.MinTurns) || iw.Served < w.batches+uint64(o.MinTurns) {
		if now.Sub(w.start) > 20*o.Window { // too slow to count: start afresh
			w.start = time.Time{}
		}
		return false
	}
	// The turn training runs: the plan's micro-batch (its own expected time), else the
	// whole minibatch.
	lw := liveWindow{TrainMS: tw.ExpectedTrainMS, RateRPS: c.measured.RateRPS, InferBatch: key.b}
	if mb := c.cur.MicroBatch(); mb > 0 {
		lw.TrainMS, lw.TrainMicro = tw.ExpectedMicroMS[mb], mb
	}
	if ms, ok := iw.ExpectedBatchMS[key.b]; ok {
		lw.InferMS = ms
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
	w.start, w.minibatches, w.batches = now, tw.Minibatches, iw.Served
	return true
}

// refineStatus is live refinement in the status (nil while off or before a window).
func (c *Controller) refineStatus() *RefineStatus {
	if !c.cfg.Refine.Enabled || c.ref.last == nil {
		return nil
	}
	s := *c.ref.last
	if p := c.ref.confirmed; p != nil {
		s.Confirmed = &RefineConfig{Mode: p.key.m, Batch: p.key.b}
	}
	if t := c.ref.trial; t != nil {
		s.Trial = &RefineConfig{Mode: t.key.m, Batch: t.key.b}
		s.TrialUntil = t.deadline
	}
	for k, f := range c.ref.failed {
		s.Failed = append(s.Failed, RefineFailure{Mode: k.m, Batch: k.b, Count: f.count, RetryAt: f.retryAt, Why: f.why})
	}
	slices.SortFunc(s.Failed, func(a, b RefineFailure) int { return a.RetryAt.Compare(b.RetryAt) })
	return &s
}

func (c *Controller) refineWhy(s plan.Scored) string {
	p := c.ref.last
	why := fmt.Sprintf("P(every budget met) %.2f%%", 100*s.PFeasible)
	if p != nil && p.Mode == s.Mode && p.Batch == s.Batch {
		why += fmt.Sprintf(" with %d live windows pooled (the profile counts %d repeats; live/stored: training time ×%.3f, inference time ×%.3f, power ×%.3f)",
			p.Pooled.Windows, p.Pooled.Repeats, p.Pooled.TrainRatio, p.Pooled.InferRatio, p.Pooled.PowerRatio)
	}
	return why
}

func ptrMode(m powermode.Mode) *powermode.Mode { return &m }
func ptrMeasured(m Measured) *Measured         { return &m }
func predPtr(e plan.Eval, rate float64) *Prediction {
	p := predictionOf(e, rate)
	return &p
}

// turnKey is a mode's training turn: 0 the whole minibatch, else a micro-batch size.
type turnKey struct {
	m     powermode.Mode
	micro int
}

// storedTurnTimes is every stored training turn's time before the live evidence. Rule 4
// ranks turns as "shorter" on it: only the mode in force has live evidence, and its
// pooled time against the others' stored ones would be compared across two bases (a
// live turn reads a few % over its stored time on every mode: the scheduler's medians
// include the interleaving); a stored mode that trains longer then ranked as shorter and
// the step went there (ALS on the AGX sweep, 20 req/s, 40 W: to a configuration
// predicted infeasible, training paused; docs/benchmarks.md "Live refinement"). Nil when
// refinement is off or nothing is measured live (profiles() is then the stored basis).
func (c *Controller) storedTurnTimes() map[turnKey]float64 {
	if !c.cfg.Refine.Enabled || c.grp != nil || len(c.ref.evidence) == 0 {
		return nil
	}
	ps, err := c.unrefinedProfiles()
	if err != nil {
		return nil
	}
	out := map[turnKey]float64{}
	for _, p := range ps {
		for _, t := range p.TrainChoices() {
			out[turnKey{p.Mode, t.MicroBatch()}] = t.TimeMS
		}
	}
	return out
}
