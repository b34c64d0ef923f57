package search

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/fulcrum-edge/fulcrum/fulcrum/gp"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/internal/stats"
)

// posterior is the prediction at one mode: mean and sd of every log output.
type posterior struct{ mu, sd []float64 }

// Answer implements Answerer. b are the exact budgets; the answer is the decision of
// the model's Rules (plan.Decider) over b on every profile the profiler knows, after at
// most ConfirmBudget confirming profiles chosen to let that decision claim the highest
// throughput it can: profiles of unprofiled modes the surrogates predict to be
// claimable, and repeats (Remeasurer) of profiled ones just short of the decision's
// confidence.
func (m *ALSModel) Answer(ctx context.Context, b plan.Budgets, prof Profiler) (Result, error) {
	dec := m.rules.For(b.WithDefaults(), m.batches)
	if err := dec.Validate(); err != nil {
		return Result{}, fmt.Errorf("als: %w", err)
	}
	model, err := plan.NewModel(dec.Budgets, m.batches)
	if err != nil {
		return Result{}, fmt.Errorf("als: %w", err)
	}
	measured := make(map[int]bool, len(m.profiles))
	for _, mp := range m.profiles {
		measured[m.pos[mp.Mode]] = true
	}
	// Profiles the campaign did not use (another campaign's, or confirmations kept by
	// a store) join the GP data for this answer.
	var extra []plan.ModeProfile
	for _, mp := range prof.Known() {
		if i, ok := m.pos[mp.Mode]; ok && !measured[i] {
			if _, ok := outputsOf(mp, m.batches); ok {
				measured[i] = true
				extra = append(extra, mp.Clone())
			}
		}
	}
	post, err := m.posteriors(extra)
	if err != nil {
		return Result{}, err
	}
	rm, canRepeat := prof.(Remeasurer)
	var res Result
	for left := m.ConfirmBudget(); left > 0; left-- {
		known := prof.Known()
		claimSPS, err := claimedThroughput(dec, known)
		if err != nil {
			return Result{}, fmt.Errorf("als: %w", err)
		}
		act, ok := m.nextConfirm(model, dec, known, measured, post, claimSPS, left, canRepeat)
		if !ok {
			break
		}
		md := m.modes[act.pos]
		m.opts.Logger.Debug("als confirm", "mode", md.String(), "repeat", act.repeat, "gain_sps", act.gain, "planned", act.steps, "claimed_sps", claimSPS)
		if act.repeat {
			if _, err := rm.Remeasure(ctx, md); err != nil {
				return Result{}, fmt.Errorf("als: measuring mode %s again: %w", md, err)
			}
			res.Remeasured = append(res.Remeasured, md)
			continue
		}
		mp, err := prof.Profile(ctx, md)
		if err != nil {
			return Result{}, fmt.Errorf("als: confirming mode %s: %w", md, err)
		}
		mp.Mode = md
		if _, ok := outputsOf(mp, m.batches); !ok {
			return Result{}, fmt.Errorf("als: the confirming profile of mode %s lacks a batch size of %v or has a non-positive value: fix the profiler", md, m.batches)
		}
		measured[act.pos] = true
		extra = append(extra, mp)
		res.Profiled = append(res.Profiled, md)
		if post, err = m.posteriors(extra); err != nil {
			return Result{}, err
		}
	}
	d, err := dec.Decide(prof.Known())
	if err != nil {
		return Result{}, fmt.Errorf("als: deciding over the profiles: %w", err)
	}
	res.Found, res.Feasible, res.Choice = true, d.Feasible, d.Best
	how := fmt.Sprintf("claimed with P(within budgets) %.3f ≥ %g", d.PFeasible, confidenceOf(dec))
	if !d.Feasible {
		how = fmt.Sprintf("nothing profiled can be claimed; most likely to fit: P %.3f", d.PFeasible)
	}
	res.Stop = fmt.Sprintf("als: decided over the learned pair's profiles (campaign: %d profiles, %s) with %d confirming profile(s) and %d repeat(s); %s",
		len(m.campaign), m.stop, len(res.Profiled), len(res.Remeasured), how)
	return res, nil
}

// ConfirmBudget is how many profiles (first profiles and repeats) one answer may take:
// Confirm, less what the campaign took beyond MaxProfiles − Confirm, so that campaign
// and confirmations together stay within MaxProfiles.
func (m *ALSModel) ConfirmBudget() int {
	return max(0, min(m.opts.Confirm, m.maxProfiles-len(m.campaign)))
}

// claimedThroughput is the training throughput of what the decision claims over the
// profiles, or 0 when it claims nothing.
func claimedThroughput(dec plan.Decider, known []plan.ModeProfile) (float64, error) {
	all, err := dec.ScoreAll(known)
	if err != nil {
		return 0, err
	}
	var best float64
	for _, s := range all {
		if dec.Claims(s) {
			best = max(best, s.ThroughputSPS)
		}
	}
	return best, nil
}

// confirmAction is one confirming profile: a first profile of an unprofiled mode, or a
// repeat of a profiled one.
type confirmAction struct {
	pos    int
	repeat bool
	gain   float64 // expected throughput gained, samples/s
	steps  int     // profiles the gain is planned with (this one the first)
}

// alsMinClaimProb is the least probability of a claim worth a profile: below it a
// plan only spends profiles where the budgets are out of reach.
const alsMinClaimProb = 0.01

// alsMaxRepeats caps the repeats of one mode in one answer's planning: past 4, a
// repeat shrinks the decision's σ by less than 12%.
const alsMaxRepeats = 4

// microTurn is a training micro-batch size as the confirmation planner predicts it: its
// samples and its time and power relative to the minibatch's at the same mode.
type microTurn struct {
	samples         int
	timeRel, powRel float64
}

// microTurns estimates each micro-batch size's time and power relative to the
// minibatch from the profiles (the median ratio over them, internal/stats' nearest
// rank; issue 32). The Gaussian processes model the minibatch only, so the planner
// predicts a micro-batch turn at an unprofiled mode as the minibatch's prediction times
// these ratios; the decision itself uses the measured turns.
func microTurns(known []plan.ModeProfile) []microTurn {
	var sizes []int
	for _, mp := range known {
		for _, t := range mp.TrainChoices()[1:] {
			if !slices.Contains(sizes, t.Batch) {
				sizes = append(sizes, t.Batch)
			}
		}
	}
	var out []microTurn
	for _, b := range sizes {
		var rt, rp []float64
		for _, mp := range known {
			for _, t := range mp.TrainChoices()[1:] {
				if t.Batch == b && mp.Train.TimeMS > 0 && mp.Train.PowerMW > 0 {
					rt, rp = append(rt, t.TimeMS/mp.Train.TimeMS), append(rp, t.PowerMW/mp.Train.PowerMW)
				}
			}
		}
		out = append(out, microTurn{samples: b, timeRel: stats.Median(rt), powRel: stats.Median(rp)})
	}
	return out
}

// microAt returns the measured turn of the given samples in mp, if it has one.
func microAt(mp plan.ModeProfile, samples int) (plan.TrainPoint, bool) {
	for _, t := range mp.TrainChoices()[1:] {
		if t.Batch == samples {
			return t, true
		}
	}
	return plan.TrainPoint{}, false
}

// nextConfirm returns the confirming profile that starts the plan with the largest
// expected gain: the throughput a configuration would add over what the decision claims
// now (claimSPS), times the probability that the decision claims it once measured
// (claimProb), when k ≤ left profiles are spent on it. For an unprofiled mode that is a
// first profile and k−1 repeats, predicted by the surrogates (their sd and the
// measurement noise combined, no floor: the decision, not this ranking, keeps the
// margin); for a profiled one, k repeats, predicted from the repeats so far or, for a
// mode measured once, from the surrogates' posterior there (fresh repeats replace the
// first measurement, which was picked for looking good). Ties go to the shorter plan.
// Only the first profile is taken: the next call plans again with what it measured.
// ok is false when no plan is expected to gain.
func (m *ALSModel) nextConfirm(model *plan.Model, dec plan.Decider, known []plan.ModeProfile, measured map[int]bool, post map[int]posterior, claimSPS float64, left int, canRepeat bool) (confirmAction, bool) {
	no, nb := m.nOut(), len(m.batches)
	micro := microTurns(known)
	bud := model.Budgets()
	noise := m.noiseRel
	cp := claimParams{
		bud: bud, trainBatch: m.trainBatch, adm: dec.Admission,
		z: math.Sqrt2 * math.Erfinv(2*confidenceOf(dec)-1),
	}
	cp.fill = make([]float64, nb)
	for j, b := range m.batches {
		cp.fill[j] = plan.FillQuantileMS(b, bud.RateRPS, bud.Quantile)
	}
	repeats := make(map[int]int, len(known))
	knownAt := make(map[int]plan.ModeProfile, len(known))
	for _, mp := range known {
		if i, ok := m.pos[mp.Mode]; ok {
			repeats[i] = mp.Repeats
			knownAt[i] = mp
		}
	}
	var best confirmAction
	found := false
	// A gain below this is noise in the ranking, not worth a profile.
	minGain := 1e-3 * claimSPS
	vals, spread := make([]float64, no), make([]float64, no)
	// kp is the pooled profile a repeat's values come from (nil: predicted values),
	// whose measured micro-batch turns replace the ratios' estimate.
	var kp *plan.ModeProfile
	consider := func(pos int, repeat bool, k int, decSD float64) {
		g := 0.0
		// The minibatch (u = B_T), then each micro-batch turn (issue 32).
		for c := -1; c < len(micro); c++ {
			samples, tT, pT := m.trainBatch, vals[0], vals[1]
			if c >= 0 {
				samples, tT, pT = micro[c].samples, vals[0]*micro[c].timeRel, vals[1]*micro[c].powRel
				if kp != nil {
					t, ok := microAt(*kp, samples)
					if !ok {
						continue
					}
					tT, pT = t.TimeMS, t.PowerMW
				}
			}
			for j := range m.batches {
				t := cp.throughputOf(samples, m.batches[j], tT, vals[2+j])
				if t <= claimSPS {
					continue
				}
				p := cp.claimProb(j, m.batches[j], tT, pT, vals[2+j], vals[2+nb+j],
					spread[0], spread[1], spread[2+j], spread[2+nb+j], decSD)
				if p >= alsMinClaimProb {
					g = max(g, (t-claimSPS)*p)
				}
			}
		}
		if g > minGain && (!found || g > best.gain*(1+1e-9) || (g >= best.gain*(1-1e-9) && k < best.steps)) {
			best, found = confirmAction{pos: pos, repeat: repeat, gain: g, steps: k}, true
		}
	}
	for i := range m.modes {
		mu, sd := m.at(i, post)
		if !measured[i] {
			// Cheap bound first: at the predicted mean, can any batch beat the claim (with
			// the minibatch or a micro-batch turn)?
			above := cp.anyAbove(m.batches, math.Exp(mu[0]), mu[2:2+nb], claimSPS)
			for _, u := range micro {
				above = above || cp.anyAbove(m.batches, math.Exp(mu[0])*u.timeRel*float64(m.trainBatch)/float64(u.samples), mu[2:2+nb], claimSPS)
			}
			if !above {
				continue
			}
			kp = nil
			// A first profile, then up to left−1 repeats, which replace it.
			for k := 1; k <= left; k++ {
				n := float64(max(1, k-1))
				if !canRepeat && k > 1 {
					break
				}
				for o := range vals {
					vals[o] = math.Exp(mu[o])
					spread[o] = math.Hypot(sd[o], noise/math.Sqrt(n))
				}
				consider(i, false, k, dec.NoiseRel/math.Sqrt(n))
			}
			continue
		}
		r := repeats[i]
		if !canRepeat || r >= alsMaxRepeats {
			continue
		}
		for k := 1; k <= min(left, alsMaxRepeats-r); k++ {
			if r == 0 {
				// k fresh repeats replace the first measurement: centred on the
				// posterior, spread by its sd and the mean of k measurements' noise.
				kp = nil
				for o := range vals {
					vals[o] = math.Exp(mu[o])
					spread[o] = math.Hypot(sd[o], noise/math.Sqrt(float64(k)))
				}
			} else {
				// The pooled mean of r repeats moves by the k new ones' share.
				at := knownAt[i]
				kp = &at
				fillLinear(vals, at, m.batches)
				s := noise * math.Sqrt(float64(k)/float64(r*(r+k)))
				for o := range spread {
					spread[o] = s
				}
			}
			consider(i, true, k, dec.NoiseRel/math.Sqrt(float64(r+k)))
		}
	}
	return best, found
}

// fillLinear writes a profile's values in model order (linear, not log).
func fillLinear(dst []float64, mp plan.ModeProfile, batches []int) {
	nb := len(batches)
	dst[0], dst[1] = mp.Train.TimeMS, mp.Train.PowerMW
	for _, ip := range mp.Infer {
		if j, ok := slices.BinarySearch(batches, ip.Batch); ok {
			dst[2+j], dst[2+nb+j] = ip.TimeMS, ip.PowerMW
		}
	}
}

func confidenceOf(d plan.Decider) float64 {
	if d.Confidence <= 0 {
		return plan.DefaultConfidence
	}
	return d.Confidence
}

// claimParams is what claimProb needs of one decision.
type claimParams struct {
	bud        plan.Budgets
	trainBatch int
	adm        plan.Admission
	fill       []float64 // per batch index: fill quantile, ms
	z          float64   // the decision's confidence as a one-sided normal quantile
}

func (c claimParams) rho(batch int, tI float64) float64 {
	return c.bud.RateRPS * (tI / 1000) / float64(batch)
}

// throughput is model v1's training throughput, samples/s.
func (c claimParams) throughput(batch int, tT, tI float64) float64 {
	return c.throughputOf(c.trainBatch, batch, tT, tI)
}

// throughputOf is throughput with a training turn of samples (a micro-batch: k turns a
// minibatch, so samples per turn time is the minibatch's rate).
func (c claimParams) throughputOf(samples, batch int, tT, tI float64) float64 {
	return max(0, 1-c.rho(batch, tI)) * float64(samples) / (tT / 1000)
}

// anyAbove reports whether some batch's throughput at train time tT and log inference
// times logTI exceeds sps.
func (c claimParams) anyAbove(batches []int, tT float64, logTI []float64, sps float64) bool {
	for j, b := range batches {
		if c.throughput(b, tT, math.Exp(logTI[j])) > sps {
			return true
		}
	}
	return false
}

// claimProb approximates the probability that the decision claims a configuration once
// it is measured: each constraint's measured value must leave the decision's margin
// (z of its σ, decSD relative per value) below the budget, and the measured value is
// predicted at vals with relative spreads s (independent per value). The constraints
// are taken as independent, as the decision takes them.
func (c claimParams) claimProb(j, batch int, tT, pT, tI, pI, sT, sPT, sI, sPI, decSD float64) float64 {
	b := c.bud
	g := 1 + c.adm.DevRel
	lat := c.adm.LatencyMS(b.LatencyMS, c.fill[j], tT, tI)
	rho := c.rho(batch, tI)
	share := min(rho, 1)
	pow := share*pI + (1-share)*pT
	pl := phiSlack(b.LatencyMS-lat-c.z*g*decSD*math.Hypot(tT, tI), g*math.Hypot(sT*tT, sI*tI))
	pp := phiSlack(b.PowerMW-pow-c.z*decSD*math.Hypot(share*pI, (1-share)*pT), math.Hypot(sPI*share*pI, sPT*(1-share)*pT))
	pr := phiSlack(b.RhoMax-rho-c.z*decSD*rho, sI*rho)
	return pl * pp * pr
}

// phiSlack is P(N(slack, sd²) ≥ 0); an exact value (sd 0) holds when slack ≥ 0.
func phiSlack(slack, sd float64) float64 {
	if sd <= 0 {
		if slack >= 0 {
			return 1
		}
		return 0
	}
	return 0.5 * math.Erfc(-slack/sd/math.Sqrt2)
}

// posteriors conditions the GPs on the campaign's data plus extra profiles (at the
// stored hyper-parameters) and returns the posterior at the extra profiles' modes.
// Other modes keep the campaign's predictions: an answer stays a scan, not a refit.
func (m *ALSModel) posteriors(extra []plan.ModeProfile) (map[int]posterior, error) {
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
	var sc gp.Scratch
	for g := range numGroups {
		gp, err := gp.New(x, groupOutputs(ys, g, nb), m.hyper[g])
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
