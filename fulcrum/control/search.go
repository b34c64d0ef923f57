package control

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/fulcrum/search"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// startSearch runs a searcher in its own goroutine through a live profiler, then plans
// from the store. Called with c.mu held; returns an event fired when it is done.
func (c *Controller) startSearch(reqCtx context.Context, method, reason string, maxProfiles int) (sched.Event, *Outcome) {
	done := sched.NewEvent(c.clock)
	c.job, c.jobDone, c.jobMethod = true, done, method
	c.held = false
	// The live profiler pauses training while it measures a mode; the micro-batch watch
	// (watchMicro) of a latency-infeasible plan would resume it as soon as the search
	// moved the board to a mode where a micro-batch fits, and training then ran beside
	// the profile batches (measured on the lifetime board: 30–39 W against a 20 W budget
	// through a re-search, docs/benchmarks.md "After-plan breaks"). The plan after the
	// search decides the pause again; a failed search keeps the watch as it was.
	keepMicro := c.microKeep
	c.microKeep = false
	pair := *c.pair
	grp := c.grp // never changed in place: Step replaces it
	var mb plan.MultiBudgets
	if grp != nil {
		rates, _ := c.streamRates(c.clock.Now())
		mb = c.plannedBudgets(rates)
	}
	rate := c.planRateOr()
	b := c.targets.Shared()
	keeping := c.cur != nil // a plan is in force: its streams' p99 is being kept
	out := &Outcome{Method: method}
	started := c.clock.Now()
	c.events.Add(Event{Kind: KindProfile, Reason: fmt.Sprintf("starting %s through the live profiler: %s", method, reason)})
	// The search ends with the daemon, or with the request that asked for it.
	ctx, cancel := context.WithCancel(c.base)
	stop := context.AfterFunc(reqCtx, cancel)
	sched.Go(c.clock, func() {
		defer done.Fire()
		defer cancel()
		defer stop()
		var res search.Result
		var counts LiveCounts
		var err error
		if grp != nil {
			res, counts, err = c.searchPooled(ctx, method, grp, mb, maxProfiles)
		} else {
			res, counts, err = c.search(ctx, method, pair, b, rate, maxProfiles, keeping)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.job, c.jobMethod = false, ""
		c.forceApply = true // the live profiler moved the board
		out.Result, out.Counts, out.Err, out.Duration = res, counts, err, c.clock.Now().Sub(started)
		c.searchFailed(err) // a failed search is searched again after a hold (research.go)
		if err != nil && c.cur != nil {
			c.events.Add(Event{Kind: KindProfile, Reason: method + " search stopped; returning to the previous configuration", Err: err.Error()})
			prev := *c.cur
			c.apply(c.base, prev)
			c.microKeep = keepMicro
			out.Choice = c.cur
			return
		}
		c.live.add(counts)
		if err != nil {
			c.events.Add(Event{Kind: KindProfile, Reason: method + " search failed; planning from what is stored", Err: err.Error()})
		} else {
			c.lastSearch = &res
			c.events.Add(Event{Kind: KindProfile, Reason: fmt.Sprintf("%s search done: %s; stopped: %s", method, searchCounts(counts, grp), res.Stop)})
		}
		if !samePair(c.pair, &pair) || !sameGroup(c.grp, grp) {
			return // the workers changed meanwhile: the next step plans for the new ones
		}
		c.plan(c.base, fmt.Sprintf("after %s (%s)", method, reason), true)
		out.Choice = c.cur
	})
	return done, out
}

// Outcome is what a search did and the configuration applied after it.
type Outcome struct {
	Method   string
	Result   search.Result
	Counts   LiveCounts
	Choice   *Choice
	Duration time.Duration
	Err      error
}

// searchPooled runs one searcher over the board's space for several streams and jobs:
// it walks the pooled pair (plan.PooledPair at plan.PooledBudgets) while every workload is
// profiled live at each mode it asks for (pooledLive).
func (c *Controller) searchPooled(ctx context.Context, method string, g *group, mb plan.MultiBudgets, maxProfiles int) (search.Result, LiveCounts, error) {
	rates := make([]float64, len(mb.Streams))
	latencyMS := 0.0
	for i, s := range mb.Streams {
		rates[i] = s.RateRPS
		latencyMS = max(latencyMS, s.LatencyMS)
	}
	sat := &SaturatedModes{} // one search: a mode found saturated is not waited at again
	pl := newPooledLive(g, rates, mb.TrainWeights, c.store, c.board.Info().Name, func(pr Pair, only truth.Role) *LiveProfiler {
		return c.liveProfiler(pr, mb.PowerMW, latencyMS, sat, only)
	})
	batches := slices.Clone(g.Streams[0].Batches)
	for _, s := range g.Streams[1:] {
		batches = slices.DeleteFunc(batches, func(b int) bool { return !slices.Contains(s.Batches, b) })
	}
	if len(batches) == 0 {
		return search.Result{}, LiveCounts{}, fmt.Errorf("live search: the streams %v share no batch size (set controller.infer_batches so that they do)", g)
	}
	names := make([]string, len(g.Streams))
	for i, s := range g.Streams {
		names[i] = s.Workload
	}
	p := search.Problem{Space: c.board.Space(), Train: g.Train[0].Workload, Infer: "pooled:" + strings.Join(names, "+"), TrainBatch: g.Train[0].Batch,
		InferBatches: batches, Budgets: plan.PooledBudgets(mb), Rules: c.Rules(), Presets: c.presets, PresetNames: c.pnames,
		MaxProfiles: cmp.Or(maxProfiles, c.cfg.MaxProfiles), NoiseRel: c.cfg.NoiseRel}
	s, err := search.New(method, search.Env{Logger: c.log})
	if err != nil {
		return search.Result{}, LiveCounts{}, fmt.Errorf("live search: %w", err)
	}
	res, err := s.Search(ctx, p, pl)
	return res, pl.Counts(), err
}

// liveProfiler is a live profiler of pair (only one role's points when only is set)
// guarded at budgetMW, sharing sat with the search's other profilers, announcing what it
// profiles as events. latencyMS is the largest latency budget of the streams.
func (c *Controller) liveProfiler(pair Pair, budgetMW, latencyMS float64, sat *SaturatedModes, only truth.Role) *LiveProfiler {
	return &LiveProfiler{Sched: c.sched, Board: c.board, Store: c.store, Power: c.power, Clock: c.clock, Log: c.log,
		Pair: pair, Options: c.cfg.Live, BudgetMW: budgetMW, LatencyMS: latencyMS, Saturation: sat, Only: only, Admission: c.Rules().Admission,
		OnSaturated: func(m powermode.Mode, _ plan.ModeProfile, rec Saturated) {
			mode := m
			c.events.Add(Event{Kind: KindProfile, Mode: &mode, Reason: fmt.Sprintf("abandoned profiling mode %s: inference requests stayed queued the whole time a profile batch of %s waited, "+
				"so inference alone keeps the GPU busy there; judged over the latency budget with any training and skipped for the rest of this search", m.Human(), rec.Point)})
		},
		OnDiscard: func(k store.Key, n int, fastestMS, realMS float64) {
			mode := k.Mode
			c.events.Add(Event{Kind: KindProfile, Mode: &mode, Reason: fmt.Sprintf("discarded %d profile batches of %s at batch %d: the fastest took %.3f ms, under a fifth of its real batches' %.1f ms (an on_profile handler that runs no real batch?)",
				n, k.Workload, k.Batch, fastestMS, realMS)})
		},
		OnProfile: func(m powermode.Mode, mp plan.ModeProfile, over *OverBudget) {
			mode := m
			if over != nil {
				c.events.Add(Event{Kind: KindProfile, Mode: &mode, Reason: fmt.Sprintf("abandoned profiling mode %s: the 1 s average power %.1f W went over the %.1f W budget; recorded as over budget", m.Human(), over.PowerMW/1000, over.BudgetMW/1000)})
				return
			}
			what := fmt.Sprintf("training %.1f ms at batch %d, %d inference batch sizes", mp.Train.TimeMS, mp.Train.Batch, len(mp.Infer))
			switch only {
			case truth.Infer:
				what = fmt.Sprintf("%s at %d batch sizes", pair.Infer, len(mp.Infer))
			case truth.Train:
				what = fmt.Sprintf("%s %.1f ms at batch %d", pair.Train, mp.Train.TimeMS, mp.Train.Batch)
			}
			c.events.Add(Event{Kind: KindProfile, Mode: &mode, Reason: fmt.Sprintf("profiled mode %s live: %s", m.Human(), what)})
		}}
}

// search runs one searcher over the board's space through a live profiler.
// keeping says a plan is in force (a re-search, or a search after a budget change): its
// inference batches over the room are then left out too (LiveProfiler.InferByRoom).
func (c *Controller) search(ctx context.Context, method string, pair Pair, b plan.Targets, rate float64, maxProfiles int, keeping bool) (search.Result, LiveCounts, error) {
	lp := c.liveProfiler(pair, b.PowerMW, b.LatencyMS, nil, "")
	lp.ByRoom = true // the training sizes a claim can use (livemicro.go)
	lp.InferByRoom = keeping
	p := search.Problem{Space: c.board.Space(), Train: pair.Train, Infer: pair.Infer, TrainBatch: pair.TrainBatch,
		InferBatches: pair.Batches, Budgets: b.Budgets(rate), Rules: c.Rules(), Presets: c.presets, PresetNames: c.pnames,
		MaxProfiles: cmp.Or(maxProfiles, c.cfg.MaxProfiles), NoiseRel: c.cfg.NoiseRel, TimeLeft: c.searchTimeLeft()}
	s, err := search.New(method, search.Env{Logger: c.log})
	if err != nil {
		return search.Result{}, LiveCounts{}, fmt.Errorf("live search: %w", err)
	}
	res, err := s.Search(ctx, p, lp)
	return res, lp.Counts(), err
}

// searchTimeLeft is the live search's time bound (Config.SearchTime from now, on the
// controller's clock) as search.Problem.TimeLeft, or nil. A search pauses training at
// every mode it measures, so the time to the first plan is time the operator's job does
// not train: GMD stops walking where its next profile would end past the bound and plans
// from what it measured, and live refinement's probes and trials walk on from the plan
// with training running. Only where they can: the pair's search with refinement's
// probes on (probes are built for one job and one stream); a pooled search of several
// streams or jobs, or one with probes off, is bounded by its profiles alone — cut short
// there, what the walk left was never taken up (measured with heavy-tailed workers,
// docs/controller.md "The search's time").
func (c *Controller) searchTimeLeft() func() time.Duration {
	if r := c.cfg.Refine; c.cfg.SearchTimeOff || !r.Enabled || !r.Trials || !r.Probes {
		return nil
	}
	deadline := c.clock.Now().Add(c.cfg.SearchTime)
	return func() time.Duration { return deadline.Sub(c.clock.Now()) }
}

// searchCounts words what a search measured: distinct modes, and with several streams or
// jobs the profile runs they took (one per live profiler at each mode), so that the
// count a searcher's budget caps (modes) is not confused with the runs (issue 34).
func searchCounts(n LiveCounts, g *group) string {
	out := fmt.Sprintf("%d modes profiled live", n.Modes)
	if g != nil {
		out += fmt.Sprintf(" (%d profile runs: at each mode one for %s with %s and one for each further stream and training job)",
			n.Profiled, g.Streams[0].Workload, g.Train[0].Workload)
	}
	out += fmt.Sprintf(", %d answers from the store, %d abandoned over the power budget", n.FromStore, n.Abandoned)
	if n.Saturated > 0 {
		out += fmt.Sprintf(", %d abandoned as saturated by inference (over the latency budget)", n.Saturated)
	}
	if n.Bound > 0 {
		out += fmt.Sprintf(", %d whole minibatches not run over the latency budget's room (stored as bounds)", n.Bound)
	}
	return out + fmt.Sprintf(", %d remeasured", n.Remeasured)
}
