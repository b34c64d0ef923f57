package control

// Several inference streams and training jobs (issue 19, docs/design.md §2 "Model v1 for
// several workloads"): while more than one inference workload or training workload is
// registered, the controller plans the mode and every stream's batch size jointly with
// plan.MultiDecider, holds each stream to its own latency budget and rate, and watches
// each stream's p99. One of each is the pair, planned by the same code (planning.go) as
// the group of one job and one stream (Controller.planned).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/fulcrum/search"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// TrainJob is a training workload planned for, at its registered minibatch.
type TrainJob struct {
	Workload string `json:"workload"`
	Batch    int    `json:"batch"`
	// MicroBatches are the micro-batch sizes its first worker declared below the
	// minibatch, ascending (issue 32): profiled at every mode, and the decision chooses
	// one of them (or the whole minibatch) for the job.
	MicroBatches []int `json:"micro_batches,omitempty"`
}

func sameJob(a, b TrainJob) bool {
	return a.Workload == b.Workload && a.Batch == b.Batch && slices.Equal(a.MicroBatches, b.MicroBatches)
}

// StreamSpec is an inference workload planned for, with the batch sizes it may serve.
type StreamSpec struct {
	Workload string `json:"workload"`
	Batches  []int  `json:"batches"`
}

// group is every workload planned for when there are several: training jobs and
// inference streams in order of first registration.
type group struct {
	Train   []TrainJob
	Streams []StreamSpec
}

func sameGroup(a, b *group) bool {
	if a == nil || b == nil {
		return a == b
	}
	return slices.EqualFunc(a.Train, b.Train, sameJob) && slices.EqualFunc(a.Streams, b.Streams, func(x, y StreamSpec) bool {
		return x.Workload == y.Workload && slices.Equal(x.Batches, y.Batches)
	})
}

// String names the group's workloads for an event.
func (g *group) String() string {
	var tr, st []string
	for _, j := range g.Train {
		if len(j.MicroBatches) > 0 {
			tr = append(tr, fmt.Sprintf("%s (batch %d, micro-batches %v)", j.Workload, j.Batch, j.MicroBatches))
			continue
		}
		tr = append(tr, fmt.Sprintf("%s (batch %d)", j.Workload, j.Batch))
	}
	for _, s := range g.Streams {
		st = append(st, s.Workload)
	}
	return fmt.Sprintf("training %s; inference streams %s", strings.Join(tr, ", "), strings.Join(st, ", "))
}

// groupOf returns every distinct training and inference workload with a live worker
// (the first worker of each gives the training minibatch, its micro-batch sizes and the
// batch sizes), or nil when there is at most one of each: the pair plans that.
func (c *Controller) groupOf(snap sched.Snapshot) *group {
	g := &group{}
	for _, w := range snap.Workers {
		switch w.Role {
		case proto.RoleTrain:
			if !slices.ContainsFunc(g.Train, func(j TrainJob) bool { return j.Workload == w.Workload }) {
				g.Train = append(g.Train, TrainJob{Workload: w.Workload, Batch: w.Batch, MicroBatches: declaredMicro(w)})
			}
		case proto.RoleInfer:
			if !slices.ContainsFunc(g.Streams, func(s StreamSpec) bool { return s.Workload == w.Workload }) {
				g.Streams = append(g.Streams, StreamSpec{Workload: w.Workload, Batches: c.batchesFor(w.BatchSizes)})
			}
		}
	}
	if len(g.Train) == 0 || len(g.Streams) == 0 || (len(g.Train) == 1 && len(g.Streams) == 1) {
		return nil
	}
	return g
}

// batchesFor is the batch sizes planned over for a worker that serves sizes (all of
// InferBatches when it listed none; its own sizes when none of InferBatches is among them).
func (c *Controller) batchesFor(sizes []int) []int {
	batches := slices.Clone(c.cfg.InferBatches)
	if len(sizes) > 0 {
		batches = slices.DeleteFunc(batches, func(b int) bool { return !slices.Contains(sizes, b) })
		if len(batches) == 0 {
			batches = slices.Clone(sizes)
		}
	}
	slices.Sort(batches)
	return batches
}

// StreamTarget is one workload's own targets (plan.StreamTarget, the one shape of them).
type StreamTarget = plan.StreamTarget

// MaxStreamTargets bounds the per-stream budgets held (the scheduler holds as many).
const MaxStreamTargets = plan.MaxStreamTargets

// SetStreamTarget installs the budgets of one inference stream (workload), replacing what
// was set for it; the zero StreamTarget drops them (the stream uses the shared budgets).
// Invalid values change nothing. The next step re-plans.
func (c *Controller) SetStreamTarget(workload string, t StreamTarget, by *Caller) error {
	if err := t.Validate(workload); err != nil {
		return fmt.Errorf("stream budgets not changed: %w", err)
	}
	c.mu.Lock()
	old, had := c.targets.Streams[workload]
	if !had && t != (StreamTarget{}) && len(c.targets.Streams) >= MaxStreamTargets {
		c.mu.Unlock()
		return fmt.Errorf("stream budgets not changed: %d streams have budgets of their own (the limit); drop one first (fulcrumctl budget set --workload NAME --shared)", MaxStreamTargets)
	}
	if c.targets.Streams == nil {
		c.targets.Streams = map[string]StreamTarget{}
	}
	if t == (StreamTarget{}) {
		delete(c.targets.Streams, workload)
	} else {
		c.targets.Streams[workload] = t
	}
	targets := c.targets.Clone()
	c.held = false
	for k := range c.badPoint {
		if k.stream == workload {
			delete(c.badPoint, k)
		}
	}
	if c.cur != nil || c.pair != nil {
		c.needPlan = reasonBudgets
	}
	c.mu.Unlock()
	if err := c.streamDeadlines(targets); err != nil {
		return fmt.Errorf("stream budgets: %w", err) // cannot happen: bounded and checked above
	}
	from, to := "shared", "shared"
	if had {
		from = old.String()
	}
	if t != (StreamTarget{}) {
		to = t.String()
	}
	if from != to || (had && old != t) {
		c.events.Add(Event{Kind: KindBudget, Reason: fmt.Sprintf("budgets of stream %s changed from %s to %s", workload, from, to), Caller: by})
	}
	return nil
}

// streamPoint is one stream's batch at one mode.
type streamPoint struct {
	stream string
	m      powermode.Mode
	b      int
}

// StoredMultiProfiles returns the stored profiles of every workload of g on board, one
// per mode where every training job has a profile at its minibatch and every stream at
// one or more of its batch sizes. Each profile's repeats are its least-repeated point's.
// A job's points stored at its declared micro-batch sizes become the profile's Micro
// turns (issue 32); a mode stored without them offers that job whole minibatches.
func StoredMultiProfiles(st *store.Store, board string, g *group) ([]plan.MultiProfile, error) {
	return storedMultiProfiles(st, board, g, true)
}

// storedMultiProfiles is StoredMultiProfiles; without microOptional a mode is complete
// only with every job's every declared micro-batch size (what a searcher may take as
// known, as for the pair: LiveProfiler.Known).
func storedMultiProfiles(st *store.Store, board string, g *group, microOptional bool) ([]plan.MultiProfile, error) {
	sh := plan.Shape{MicroOptional: microOptional}
	var ps []store.Profile
	for _, job := range g.Train {
		sh.Train = append(sh.Train, plan.Wanted{Workload: job.Workload, Batches: []int{job.Batch}, Micro: job.MicroBatches})
		l, err := st.List(store.Filter{Board: board, Workload: job.Workload, Role: truth.Train})
		if err != nil {
			return nil, err
		}
		ps = append(ps, l...)
	}
	for _, sp := range g.Streams {
		sh.Infer = append(sh.Infer, plan.Wanted{Workload: sp.Workload, Batches: sp.Batches})
		l, err := st.List(store.Filter{Board: board, Workload: sp.Workload, Role: truth.Infer})
		if err != nil {
			return nil, err
		}
		ps = append(ps, l...)
	}
	// In the order of the store (plan.Assemble): the decision's ties go the same way
	// every time.
	return plan.Assemble(sh, measured(ps)), nil
}

// streamRates is each planned stream's planning rate: its own fixed rate, the shared
// fixed rate, or its measured one (its meter); ready is false while a measured rate is
// still warming up. Called with c.mu held.
func (c *Controller) streamRates(now time.Time) (rates []float64, ready bool) {
	ready = true
	for _, s := range c.planned().Streams {
		t := c.targets.Streams[s.Workload]
		switch {
		case t.RateRPS > 0:
			rates = append(rates, t.RateRPS)
		case c.targets.RateRPS > 0:
			rates = append(rates, c.targets.RateRPS)
		default:
			m := c.meter(s.Workload, now)
			rates = append(rates, m.level)
			ready = ready && m.ready(now, c.cfg.RateWarmup)
		}
	}
	return rates, ready
}

// forgetGone drops the rate meters and the broken (stream, mode, batch) points of the
// streams not in g (nil: the pair's stream only), so that what is kept is bounded by the workers registered
// now — workload names are chosen by any local process — and a stream that comes back
// measures its rate afresh. Called with c.mu held.
func (c *Controller) forgetGone(g *group) {
	in := func(name string) bool {
		return (g != nil && slices.ContainsFunc(g.Streams, func(s StreamSpec) bool { return s.Workload == name })) ||
			(g == nil && c.pair != nil && c.pair.Infer == name)
	}
	for name := range c.meters {
		if !in(name) {
			delete(c.meters, name)
		}
	}
	for k := range c.badPoint {
		if !in(k.stream) {
			delete(c.badPoint, k)
		}
	}
}

// meter is the stream's rate meter, started now when new. Called with c.mu held.
func (c *Controller) meter(workload string, now time.Time) *rateMeter {
	if c.meters == nil {
		c.meters = map[string]*rateMeter{}
	}
	m := c.meters[workload]
	if m == nil {
		m = &rateMeter{since: now}
		c.meters[workload] = m
	}
	return m
}

// StreamChoice is one stream's part of a configuration planned for several streams.
type StreamChoice struct {
	Workload        string  `json:"workload"`
	Batch           int     `json:"batch"`
	LatencyBudgetMS float64 `json:"latency_budget_ms"`
	RateRPS         float64 `json:"rate_rps"` // the rate planned for
	// PredLatencyMS is the p99 model v1 expects.
	PredLatencyMS float64 `json:"predicted_latency_ms"`
	Rho           float64 `json:"rho"`
}

// TrainChoice is one training job's part of a configuration planned for several streams
// or jobs (issue 32): the micro-batch size the plan runs its minibatch in.
type TrainChoice struct {
	Workload string `json:"workload"`
	Batch    int    `json:"batch"` // the minibatch
	// MicroBatch is the samples of one turn when the plan runs the minibatch as
	// Batch/MicroBatch turns; 0: whole minibatches (for a worker that declared
	// micro-batches, the scheduler's run-time choice: the whole minibatch where it fits).
	MicroBatch int `json:"micro_batch,omitempty"`
}

// sameTrain reports that two configurations run every job at the same micro-batch.
func sameTrain(a, b []TrainChoice) bool { return slices.Equal(a, b) }

// microFor is the micro-batch ch plans for a training workload's workers and whether ch
// plans one for it at all (0: whole minibatches).
func (c *Controller) microFor(ch Choice, workload string) (int, bool) {
	for _, t := range ch.Train {
		if t.Workload == workload {
			return t.MicroBatch, true
		}
	}
	return 0, false
}

// batchFor is the batch ch plans for an inference workload's workers (0: none).
func (c *Controller) batchFor(ch Choice, workload string) int {
	for _, s := range ch.Streams {
		if s.Workload == workload {
			return s.Batch
		}
	}
	return 0
}

// trainChoices are g's jobs with the micro-batch sizes a decision chose (one per job,
// in job order; nil: whole minibatches for every job).
func trainChoices(g *group, micro []int) []TrainChoice {
	if g == nil {
		return nil
	}
	out := make([]TrainChoice, len(g.Train))
	for j, job := range g.Train {
		out[j] = TrainChoice{Workload: job.Workload, Batch: job.Batch}
		if j < len(micro) {
			out[j].MicroBatch = micro[j]
		}
	}
	return out
}

// microText is the jobs' micro-batches in an event's words ("" when every job runs
// whole minibatches).
func microText(train []TrainChoice) string {
	var parts []string
	for _, t := range train {
		if t.MicroBatch > 0 && t.MicroBatch < t.Batch {
			parts = append(parts, fmt.Sprintf("%s in micro-batches of %d (%d turns a minibatch)", t.Workload, t.MicroBatch, t.Batch/t.MicroBatch))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "training " + strings.Join(parts, ", ")
}

// pooledLive is the search.Profiler a searcher walks while several streams or jobs are
// planned for (docs/controller.md "Several streams and training jobs"): every mode it asks
// for is profiled live for every workload — the first job and stream by one live
// profiler, each further stream's inference points and each further job's training point
// by their own — and answered as plan.PooledPair at the streams' rates, so that the
// searcher walks the GPU share and power mix of all of them. What is stored is never
// measured again. The bench's truthprof.PooledProfiler is the same over a ground truth.
type pooledLive struct {
	g       *group
	rates   []float64 // per stream
	weights []float64 // per job
	store   *store.Store
	board   string
	streams []*LiveProfiler // (first job, stream i); streams[0] measures both
	jobs    []*LiveProfiler // (job j, first stream), training point only, j ≥ 1

	mu    sync.Mutex
	modes map[powermode.Mode]bool // where any profiler measured live
}

var (
	_ search.Profiler   = (*pooledLive)(nil)
	_ search.Remeasurer = (*pooledLive)(nil)
)

// newPooledLive builds the live profilers of g with mk (a live profiler of a pair,
// limited to one role's points when only is set).
func newPooledLive(g *group, rates, weights []float64, st *store.Store, board string, mk func(pr Pair, only truth.Role) *LiveProfiler) *pooledLive {
	p := &pooledLive{g: g, rates: rates, weights: weights, store: st, board: board}
	first := g.Train[0]
	for i, s := range g.Streams {
		var only truth.Role
		if i > 0 {
			only = truth.Infer
		}
		p.streams = append(p.streams, mk(Pair{Train: first.Workload, TrainBatch: first.Batch, Infer: s.Workload, Batches: s.Batches, MicroBatches: first.MicroBatches}, only))
	}
	for _, j := range g.Train[1:] {
		p.jobs = append(p.jobs, mk(Pair{Train: j.Workload, TrainBatch: j.Batch, Infer: g.Streams[0].Workload, Batches: g.Streams[0].Batches, MicroBatches: j.MicroBatches}, truth.Train))
	}
	return p
}

// each asks every live profiler for mode m (f: Profile or Remeasure) and puts the answers
// together.
func (p *pooledLive) each(m powermode.Mode, f func(*LiveProfiler) (plan.ModeProfile, error)) (plan.MultiProfile, error) {
	mp := plan.MultiProfile{Mode: m, Train: make([]plan.TrainPoint, len(p.g.Train)), Infer: make([][]plan.InferPoint, len(p.g.Streams))}
	if slices.ContainsFunc(p.g.Train, func(j TrainJob) bool { return len(j.MicroBatches) > 0 }) {
		mp.Micro = make([][]plan.TrainPoint, len(p.g.Train)) // each job's micro-batch turns (issue 32)
	}
	before := p.Counts().Profiled
	defer func() {
		if p.Counts().Profiled > before {
			p.mu.Lock()
			if p.modes == nil {
				p.modes = map[powermode.Mode]bool{}
			}
			p.modes[m] = true
			p.mu.Unlock()
		}
	}()
	for i, lp := range p.streams {
		x, err := f(lp)
		if err != nil {
			return mp, err
		}
		mp.Infer[i] = x.Infer
		if i == 0 {
			mp.Train[0], mp.Repeats = x.Train, x.Repeats
			if mp.Micro != nil {
				mp.Micro[0] = x.Micro
			}
			if p.overBudget(m) {
				// The first pair drew over the power budget there: the mode is answered by
				// its estimate (as Known answers it), and the others are not profiled at a
				// mode no plan can use (they were, and counted as profiled: issue 34).
				return mp, errAbandoned
			}
		}
	}
	for j, lp := range p.jobs {
		x, err := f(lp)
		if err != nil {
			return mp, err
		}
		mp.Train[j+1] = x.Train
		if mp.Micro != nil {
			mp.Micro[j+1] = x.Micro
		}
	}
	return mp, nil
}

// errAbandoned stops pooledLive.each at a mode over the power budget.
var errAbandoned = errors.New("mode over the power budget")

// overBudget reports that the first pair's profiler holds m as over the power budget it
// profiles against (a budget raised since lets it measure m again).
func (p *pooledLive) overBudget(m powermode.Mode) bool {
	lp := p.streams[0]
	return lp.BudgetMW > 0 && slices.ContainsFunc(lp.OverBudgetModes(), func(r OverBudget) bool { return r.Mode == m && r.PowerMW > lp.BudgetMW })
}

// first is the first pair's answer at m (its estimate where m is over the budget).
func (p *pooledLive) first(mp plan.MultiProfile) plan.ModeProfile {
	return plan.PairOf(mp)
}

// Profile implements search.Profiler.
func (p *pooledLive) Profile(ctx context.Context, m powermode.Mode) (plan.ModeProfile, error) {
	mp, err := p.each(m, func(lp *LiveProfiler) (plan.ModeProfile, error) { return lp.Profile(ctx, m) })
	if errors.Is(err, errAbandoned) {
		return p.first(mp), nil
	}
	if err != nil {
		return plan.ModeProfile{}, err
	}
	return plan.PooledPair(mp, p.rates, p.weights), nil
}

// Remeasure implements search.Remeasurer: every workload's points at m measured again.
func (p *pooledLive) Remeasure(ctx context.Context, m powermode.Mode) (plan.ModeProfile, error) {
	mp, err := p.each(m, func(lp *LiveProfiler) (plan.ModeProfile, error) { return lp.Remeasure(ctx, m) })
	if errors.Is(err, errAbandoned) {
		return p.first(mp), nil
	}
	if err != nil {
		return plan.ModeProfile{}, err
	}
	return plan.PooledPair(mp, p.rates, p.weights), nil
}

// Known implements search.Profiler: every mode stored for every workload, pooled, and
// the modes the first pair's guard abandoned as over the power budget (their estimates).
func (p *pooledLive) Known() []plan.ModeProfile {
	// A mode stored without some job's declared micro-batch sizes is not known: a
	// searcher that visits it has the jobs' profilers measure the missing sizes.
	ps, err := storedMultiProfiles(p.store, p.board, p.g, false)
	if err != nil {
		p.streams[0].logger().Warn("reading stored profiles", "err", err)
	}
	out := make([]plan.ModeProfile, 0, len(ps))
	have := map[powermode.Mode]bool{}
	for _, mp := range ps {
		out = append(out, plan.PooledPair(mp, p.rates, p.weights))
		have[mp.Mode] = true
	}
	over := map[powermode.Mode]bool{}
	for _, r := range p.streams[0].OverBudgetModes() {
		over[r.Mode] = true
	}
	for _, e := range p.streams[0].Known() {
		if over[e.Mode] && !have[e.Mode] {
			out = append(out, e) // an estimate: every power at what the board drew there
		}
	}
	return out
}

// Counts sums what the live profilers did; Modes is the distinct modes any measured.
func (p *pooledLive) Counts() LiveCounts {
	var c LiveCounts
	for _, lp := range append(slices.Clone(p.streams), p.jobs...) {
		c = addCounts(c, lp.Counts())
	}
	p.mu.Lock()
	c.Modes = len(p.modes)
	p.mu.Unlock()
	return c
}

func addCounts(a, b LiveCounts) LiveCounts {
	return LiveCounts{Modes: a.Modes + b.Modes, Profiled: a.Profiled + b.Profiled, FromStore: a.FromStore + b.FromStore, Abandoned: a.Abandoned + b.Abandoned, Saturated: a.Saturated + b.Saturated,
		Points: a.Points + b.Points, Remeasured: a.Remeasured + b.Remeasured, Discarded: a.Discarded + b.Discarded, Bound: a.Bound + b.Bound}
}

// StreamStatus is one inference stream as the controller plans and measures it.
type StreamStatus struct {
	Workload        string  `json:"workload"`
	Batch           int     `json:"batch"` // planned (0 before a plan)
	LatencyBudgetMS float64 `json:"latency_budget_ms"`
	OwnBudget       bool    `json:"own_budget"` // set for this stream (else the shared one)
	RateRPS         float64 `json:"rate_rps"`   // measured (EWMA), or the fixed rate
	RateFixed       bool    `json:"rate_fixed"`
	// MeasuredRateRPS is the stream's measured rate (EWMA) whether or not its rate is
	// fixed: the one measured rate of the stream a status shows (issue 34).
	MeasuredRateRPS float64 `json:"measured_rate_rps"`
	PlanRateRPS     float64 `json:"plan_rate_rps,omitempty"`
	PredLatencyMS   float64 `json:"predicted_latency_ms,omitempty"`
	MeasuredP99MS   float64 `json:"measured_p99_ms"` // over the scheduler's recent window
	Served          int     `json:"served_recent"`   // requests the p99 is over
	Rho             float64 `json:"rho,omitempty"`   // planned share of GPU time
}

// streamStatus returns every inference stream planned for (the pair's one, or the
// group's). Called with c.mu held.
func (c *Controller) streamStatus(snap sched.Snapshot) []StreamStatus {
	var out []StreamStatus
	g := c.planned()
	if g == nil {
		return nil
	}
	for _, st := range g.Streams {
		n := st.Workload
		t, own := c.targets.Streams[n]
		s := StreamStatus{Workload: n, LatencyBudgetMS: c.targets.LatencyOf(n), OwnBudget: own}
		if m := c.meters[n]; m != nil {
			s.MeasuredRateRPS = m.rate
		}
		switch {
		case t.RateRPS > 0:
			s.RateRPS, s.RateFixed = t.RateRPS, true
		case c.targets.RateRPS > 0:
			s.RateRPS, s.RateFixed = c.targets.RateRPS, true
		default:
			s.RateRPS = s.MeasuredRateRPS
		}
		if wl, ok := snap.Workload(proto.RoleInfer, n); ok {
			s.MeasuredP99MS, s.Served = wl.LatencyRecent.P99MS, wl.LatencyRecent.Count
		}
		if ch := c.cur; ch != nil {
			for _, sc := range ch.Streams {
				if sc.Workload == n {
					s.Batch, s.PlanRateRPS, s.PredLatencyMS, s.Rho = sc.Batch, sc.RateRPS, sc.PredLatencyMS, sc.Rho
				}
			}
		}
		out = append(out, s)
	}
	return out
}

// expectAtGroup tells every worker of g the stored times of its workload at mode m
// (mp: the profile there, nil when none is stored: everything is measured afresh).
// Called with c.mu held.
func (c *Controller) expectAtGroup(g *group, mp *plan.MultiProfile) {
	for _, w := range c.sched.Snapshot().Workers {
		var times map[int]time.Duration
		if mp != nil && g != nil {
			switch w.Role {
			case proto.RoleTrain:
				for j, job := range g.Train {
					if job.Workload == w.Workload {
						times = map[int]time.Duration{mp.Train[j].Batch: msDur(mp.Train[j].TimeMS)}
						if j < len(mp.Micro) {
							for _, t := range mp.Micro[j] { // its micro-batch turns by size (issue 32)
								times[t.Batch] = msDur(t.TimeMS)
							}
						}
					}
				}
			case proto.RoleInfer:
				for i, s := range g.Streams {
					if s.Workload == w.Workload {
						times = map[int]time.Duration{}
						for _, ip := range mp.Infer[i] {
							times[ip.Batch] = msDur(ip.TimeMS)
						}
					}
				}
			}
		}
		if err := c.sched.ExpectTimes(w.ID, times); err != nil {
			c.log.Debug("expected turn times not set", "worker", w.ID, "err", err) // it just left
		}
	}
}
