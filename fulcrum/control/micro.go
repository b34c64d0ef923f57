package control

import (
	"fmt"
	"slices"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// KindMicroBatch: a training worker's micro-batch size changed (issue 32,
// docs/runtime.md "Micro-batched training turns").
const KindMicroBatch Kind = "micro_batch"

// declaredMicro is the micro-batch sizes training worker w declared below its minibatch
// (divisors of it), ascending, without repeats: what its job is profiled and planned at.
func declaredMicro(w sched.WorkerInfo) []int {
	var micro []int
	for _, mb := range w.MicroBatches {
		if mb > 0 && mb < w.Batch && w.Batch%mb == 0 && !slices.Contains(micro, mb) {
			micro = append(micro, mb)
		}
	}
	slices.Sort(micro)
	return micro
}

// microCapable reports that a live training worker declared micro-batch sizes below its
// minibatch: training can then run in turns shorter than a minibatch.
func microCapable(snap sched.Snapshot) bool {
	for _, w := range snap.Workers {
		if w.Role == proto.RoleTrain && len(w.MicroBatches) > 0 && w.MicroBatches[0] < w.Batch {
			return true
		}
	}
	return false
}

// microFits reports that a training worker's smallest declared micro-batch fits the
// inference streams' admission room now (the scheduler's expected times).
func microFits(snap sched.Snapshot) bool {
	for _, w := range snap.Workers {
		if w.Role == proto.RoleTrain && w.MicroBatchFits && len(w.MicroBatches) > 0 && w.MicroBatches[0] < w.Batch {
			return true
		}
	}
	return false
}

// trainingPausedFor decides the pause for a plan (feasible or not, and the constraint it
// binds on): an infeasible plan pauses training — unless only the latency budget binds
// and a training worker declared micro-batches (the shorter turns fix what the admission
// room could not hold; a power or GPU-share excess they do not) whose smallest fits the
// room. The scheduler then picks the largest micro-batch that fits, and its admission
// test still keeps out every turn that would make a request miss; Step re-checks the fit
// (microKeep). Called with c.mu held.
func (c *Controller) trainingPausedFor(feasible bool, binding string) bool {
	c.microKeep = false
	if feasible {
		return false
	}
	snap := c.sched.Snapshot()
	if binding != string(plan.ConstraintLatency) || !microCapable(snap) {
		return true
	}
	c.microKeep = true
	return !microFits(snap)
}

// watchMicro keeps the pause in step with the fit while training runs in micro-batches
// beside a latency-infeasible plan: a measured micro-batch turn longer than expected
// pauses training, a room that grew (a faster mode's times) resumes it. Called with c.mu
// held.
func (c *Controller) watchMicro() {
	if !c.microKeep || c.latPause.active { // the latency rule's last resort holds its own pause
		return
	}
	snap := c.sched.Snapshot() // after this step's decision, if it made one
	if fits := microFits(snap); fits == snap.TrainingPaused {
		why := "no declared micro-batch of the training workers fits the inference streams' admission room"
		if fits {
			why = "a declared micro-batch fits the inference streams' admission room again"
		}
		c.setTrainingPaused(!fits, why)
	}
}

// noteMicro records an event for each training worker whose micro-batch size changed
// since the controller last looked, saying whether it is the plan's size for the job
// (the pair's, or each job's with several: applyMicro) or the scheduler's run-time
// choice. Called with c.mu held.
func (c *Controller) noteMicro(snap sched.Snapshot) {
	if c.micro == nil {
		c.micro = map[string]int{}
	}
	seen := map[string]bool{}
	for _, w := range snap.Workers {
		if w.Role != proto.RoleTrain || len(w.MicroBatches) == 0 || w.MicroBatch <= 0 {
			continue
		}
		seen[w.ID] = true
		prev, ok := c.micro[w.ID]
		c.micro[w.ID] = w.MicroBatch
		if (!ok && w.MicroBatch == w.Batch) || prev == w.MicroBatch {
			continue
		}
		why := "the largest declared micro-batch whose turn fits the inference streams' admission room"
		if c.cur != nil {
			if mb, ok := c.microFor(*c.cur, w.Workload); ok && mb == w.MicroBatch && mb > 0 {
				why = "the plan's micro-batch for this job"
			} else if ok && mb > w.MicroBatch {
				why = fmt.Sprintf("below the plan's %d while that turn does not fit the inference streams' admission room: the largest declared micro-batch whose turn does", mb)
			}
		}
		reason := fmt.Sprintf("%s (%s): training runs its minibatch of %d as %d turn(s) of %d (%s)",
			w.ID, w.Workload, w.Batch, w.Batch/w.MicroBatch, w.MicroBatch, why)
		c.events.Add(Event{Kind: KindMicroBatch, Reason: reason})
		c.log.Info(reason)
	}
	for id := range c.micro {
		if !seen[id] {
			delete(c.micro, id)
		}
	}
}

// keepMicro sets the configuration in force's micro-batch on each training worker that
// registered since it was applied (a trainer that reconnected, or was dropped past the
// hold limit and came back): applyMicro set it only on the workers there then, and the
// same workload coming back does not re-plan. It forgets the workers gone, so what it
// keeps is bounded by the workers registered. Called with c.mu held.
func (c *Controller) keepMicro(snap sched.Snapshot) {
	if c.cur == nil {
		return
	}
	live := map[string]bool{}
	for _, w := range snap.Workers {
		live[w.ID] = true
		mb, ok := c.microOf(*c.cur, w)
		if set, done := c.microSet[w.ID]; !ok || (done && set == mb) {
			continue
		}
		if err := c.setMicro(w.ID, mb); err != nil {
			c.log.Warn("set the planned micro-batch on a new training worker", "worker", w.ID, "err", err)
		}
	}
	for id := range c.microSet {
		if !live[id] {
			delete(c.microSet, id)
		}
	}
}
