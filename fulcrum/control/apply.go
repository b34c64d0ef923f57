package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// ApplyMode applies an operator's mode between turns, with the best stored batch size
// there (or the present one), and holds it until budgets change or an optimize runs.
// A power or latency violation may still step away from it.
func (c *Controller) ApplyMode(ctx context.Context, m powermode.Mode) (Choice, error) {
	if c.board == nil {
		return Choice{}, ErrNoBoard
	}
	if sp := c.board.Space(); sp != nil {
		if err := sp.Check(m); err != nil {
			return Choice{}, fmt.Errorf("%w (fulcrumctl mode lists the board's levels)", err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.bestAt(m)
	if c.ext != nil {
		// An operator's mode is an explicit order to write: it ends a stand-down.
		c.ext = nil
		c.events.Add(Event{Kind: KindExternal, Reason: "mode set by the operator: fulcrumd takes the board back from the mode set outside it", Mode: &m})
	}
	mode := m
	c.events.Add(Event{Kind: KindApply, Reason: "mode set by the operator; held until budgets change or an optimize runs", Mode: &mode, Batch: ch.Batch()})
	c.forceApply = true
	// A refused operator change is answered to the operator, not retried: the
	// controller's own retry state (a plan the board refused earlier) stays as it was.
	want, fails, since, retryAt := c.want, c.applyFails, c.applyFailSince, c.retryAt
	c.apply(ctx, ch)
	c.microKeep = false
	c.dropLatencyPause(c.clock.Now())
	c.setTrainingPaused(false, "mode set by the operator")
	if c.cur == nil || c.cur.Mode != m {
		c.want, c.applyFails, c.applyFailSince, c.retryAt = want, fails, since, retryAt
		if c.applyErr != nil {
			return Choice{}, fmt.Errorf("apply mode %s failed; the board keeps its previous mode: %w", m.Human(), c.applyErr)
		}
		return Choice{}, fmt.Errorf("apply mode %s failed (see the events)", m.Human())
	}
	c.held = true
	c.stepped = false
	return *c.cur, nil
}

// bestAt is mode m with the best stored configuration there — every stream's batch and
// every job's micro-batch, chosen jointly by model v1 over the profile at m — and its
// prediction; at a mode with no stored profile, the batches in force, unpredicted, with
// whole minibatches (the scheduler's run-time choice). Called with c.mu held.
func (c *Controller) bestAt(m powermode.Mode) Choice {
	if ps, err := c.plannedProfiles(); err == nil {
		if i := slices.IndexFunc(ps, func(p plan.MultiProfile) bool { return p.Mode == m }); i >= 0 {
			rates, _ := c.streamRates(c.clock.Now())
			mb := c.plannedBudgets(rates)
			if mod, err := plan.NewMultiModel(mb, c.cfg.InferBatches); err == nil {
				if e, err := mod.BestAtMode(ps[i]); err == nil {
					return c.choiceOf(e, mb)
				}
			}
		}
	}
	ch := Choice{Mode: m}
	if c.cur != nil {
		ch.Streams, ch.Train = slices.Clone(c.cur.Streams), slices.Clone(c.cur.Train)
		for i := range ch.Streams {
			ch.Streams[i].PredLatencyMS, ch.Streams[i].Rho = 0, 0 // not predicted at m
		}
		for j := range ch.Train {
			ch.Train[j].MicroBatch = 0
		}
	}
	return ch
}

// setTrainingPaused pauses or resumes training turns and records the change.
func (c *Controller) setTrainingPaused(paused bool, why string) {
	if paused == c.sched.Snapshot().TrainingPaused {
		return
	}
	c.sched.SetTrainingPaused(paused)
	msg := "training resumed: the configuration in force meets the budgets"
	if paused {
		msg = "training paused: no known configuration meets the budgets with training running, so inference and power come first (" + why + ")"
	}
	c.events.Add(Event{Kind: KindApply, Reason: msg})
	c.log.Info(msg)
}

// apply sets the mode between turns and the inference workers' batch size. Called with
// c.mu held; BetweenTurns waits at most for the running minibatch.
func (c *Controller) apply(ctx context.Context, ch Choice) {
	start := c.clock.Now()
	m := ch.Mode
	var errs []error
	if c.cur == nil || c.cur.Mode != ch.Mode || c.forceApply {
		// The new mode's expected turn times, batches and micro-batches are set inside
		// the between-turns action: the scheduler grants the next turn the moment it
		// ends, and set after it that turn ran the old micro-batch on the old mode's
		// times (TestFirstTurnAtANewModeRunsThePlansMicroBatch). The action runs while
		// this goroutine waits in BetweenTurns, so nothing else touches c meanwhile.
		err := c.sched.BetweenTurns(ctx, func(ctx context.Context) error {
			if err := c.board.Apply(ctx, ch.Mode); err != nil {
				return err
			}
			c.expectAt(ch.Mode)
			errs = c.applyBatches(ch)
			return nil
		})
		if err != nil {
			now := c.clock.Now()
			if c.applyFails == 0 {
				c.applyFailSince = now
			}
			c.applyFails++
			c.applyErr = err
			c.want = &ch
			wait := applyRetry(c.applyFails)
			c.retryAt = now.Add(wait)
			reason := fmt.Sprintf("applying the mode failed (%d in a row); the board keeps its previous mode and fulcrumd runs DEGRADED; retrying in %s", c.applyFails, wait)
			c.events.Add(Event{Kind: KindApply, Reason: reason, Mode: &m, Batch: ch.Batch(), Err: err.Error()})
			c.log.Error("apply power mode", "mode", ch.Mode.Human(), "failures", c.applyFails, "retry_in", wait, "err", err)
			return
		}
		if c.applyFails > 0 {
			msg := fmt.Sprintf("the board accepts mode changes again after %d refused writes since %s", c.applyFails, c.applyFailSince.Format(time.RFC3339))
			c.events.Add(Event{Kind: KindDegraded, Reason: msg})
			c.log.Info(msg)
		}
		c.applyErr = nil
	} else {
		errs = c.applyBatches(ch)
	}
	// ch is in force now (written, or the board already ran its mode): nothing waits
	// for a retry.
	c.applyFails, c.want = 0, nil
	// forceApply: something moved the board meanwhile (the live profiler, the operator,
	// another tool), so the configuration is new to the latency window even where it is
	// the one in force before: a probe's or a re-search's profile batches left late
	// requests in it, and judged at once they stepped the plan down (NX lifetime sweep,
	// 30 req/s, 150 ms, 20 W: 0.2 s after a probe).
	if c.forceApply || c.cur == nil || c.cur.Mode != ch.Mode || !sameBatches(c.cur.Streams, ch.Streams) || !sameTrain(c.cur.Train, ch.Train) {
		c.configChanged(c.clock.Now())
	}
	c.cur = &ch
	c.forceApply = false
	c.lastApply = c.clock.Now()
	batches := fmt.Sprintf("inference batch %d", ch.Batch()) // the pair's words
	if mb := ch.MicroBatch(); mb > 0 {
		batches += fmt.Sprintf(", training in micro-batches of %d (%d turns a minibatch)", mb, ch.Train[0].Batch/mb)
	}
	if len(ch.Streams) > 1 || len(ch.Train) > 1 {
		var bs []string
		for _, s := range ch.Streams {
			bs = append(bs, fmt.Sprintf("%s %d", s.Workload, s.Batch))
		}
		batches = "inference batches " + strings.Join(bs, ", ")
		if mt := microText(ch.Train); mt != "" {
			batches += ", " + mt
		}
	}
	ev := Event{Kind: KindApply, Reason: fmt.Sprintf("mode %s and %s applied in %s", ch.Mode.Human(), batches, c.lastApply.Sub(start).Round(time.Microsecond)), Mode: &m, Batch: ch.Batch()}
	if err := errors.Join(errs...); err != nil {
		ev.Err = err.Error()
	}
	c.events.Add(ev)
	c.log.Info("applied", "mode", ch.Mode.Human(), "batch", ch.Batch(), "micro_batch", ch.MicroBatch())
}

// applyBatches sets ch's inference batch sizes and training micro-batches on the
// registered workers. Called with c.mu held (or inside apply's between-turns action).
func (c *Controller) applyBatches(ch Choice) []error {
	var errs []error
	for _, w := range c.sched.Snapshot().Workers {
		if w.Role != proto.RoleInfer {
			continue
		}
		if b := c.batchFor(ch, w.Workload); b > 0 && w.Batch != b {
			if err := c.sched.SetInferBatch(w.ID, b); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return append(errs, c.applyMicro(ch)...)
}

// applyMicro sets the training micro-batches the plan chose (issue 32): on every
// training worker that declared micro-batches, its job's size in ch (the pair's
// MicroBatch, or the job's in Train when several streams or jobs are planned for), 0
// (the scheduler's run-time choice) when the plan runs the job's whole minibatches or
// the worker did not declare the size. Workers of a job ch plans nothing for keep what
// they run. Called with c.mu held.
func (c *Controller) applyMicro(ch Choice) []error {
	var errs []error
	for _, w := range c.sched.Snapshot().Workers {
		mb, ok := c.microOf(ch, w)
		if !ok {
			continue
		}
		if err := c.setMicro(w.ID, mb); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// microOf is the micro-batch size ch plans for worker w: its job's, 0 where the job runs
// whole minibatches or w did not declare the size (the run-time choice); ok is false
// for a worker that declared none or whose job ch plans nothing for. Called with c.mu
// held.
func (c *Controller) microOf(ch Choice, w sched.WorkerInfo) (mb int, ok bool) {
	if w.Role != proto.RoleTrain || len(w.MicroBatches) == 0 {
		return 0, false
	}
	if mb, ok = c.microFor(ch, w.Workload); ok && mb != 0 && !slices.Contains(w.MicroBatches, mb) {
		mb = 0 // a worker that did not declare the size keeps the run-time choice
	}
	return mb, ok
}

// setMicro sets training worker id's micro-batch size and records it (keepMicro).
// Called with c.mu held.
func (c *Controller) setMicro(id string, mb int) error {
	if err := c.sched.SetMicroBatch(id, mb); err != nil {
		return err
	}
	if c.microSet == nil {
		c.microSet = map[string]int{}
	}
	c.microSet[id] = mb
	return nil
}

// Retries of a refused mode change wait applyRetryFirst, doubling per failure up to
// applyRetryMax: a board whose clock files are immutable refuses for minutes or hours.
const (
	applyRetryFirst = time.Second
	applyRetryMax   = 30 * time.Second
)

// applyRetry is the wait after the n-th refused write in a row.
func applyRetry(n int) time.Duration {
	d := applyRetryFirst
	for i := 1; i < n && d < applyRetryMax; i++ {
		d *= 2
	}
	return min(d, applyRetryMax)
}

// boardRefusal says why fulcrumd is degraded while the board refuses mode changes
// ("" when it does not). Called with c.mu held.
func (c *Controller) boardRefusal(now time.Time) string {
	if c.want == nil {
		return ""
	}
	next := c.retryAt.Sub(now).Round(time.Millisecond)
	if next < 0 {
		next = 0
	}
	return fmt.Sprintf("the board refuses mode changes (%d writes in a row failed since %s; last error: %v): the plan %s is not in force; retrying in %s (check that the board's clock files are writable, e.g. not immutable: lsattr)",
		c.applyFails, c.applyFailSince.Format(time.RFC3339), c.applyErr, c.want.Mode.Human(), next)
}
