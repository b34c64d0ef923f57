package control

import (
	"fmt"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// KindMicroBatch: a training worker's micro-batch size changed (issue 32,
// docs/runtime.md "Micro-batched training turns").
const KindMicroBatch Kind = "micro_batch"

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

// keepTrainingMicro reports whether a plan found infeasible on binding should keep
// training running in micro-batch turns instead of pausing it: only for a latency
// budget (the shorter turns fix what the admission room could not hold; a power or
// GPU-share excess they do not) and with a training worker that declared micro-batches.
// The scheduler then picks the largest micro-batch whose turn fits the room, and its
// admission test still keeps every turn out that would make a request miss. Called with
// c.mu held.
func (c *Controller) keepTrainingMicro(binding string) bool {
	return binding == "latency" && microCapable(c.sched.Snapshot())
}

// noteMicro records an event for each training worker whose micro-batch size changed
// since the controller last looked. Called with c.mu held.
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
		reason := fmt.Sprintf("%s (%s): training runs its minibatch of %d as %d turn(s) of %d (the largest declared micro-batch whose turn fits the inference streams' admission room)",
			w.ID, w.Workload, w.Batch, w.Batch/w.MicroBatch, w.MicroBatch)
		c.events.Add(Event{Kind: KindMicroBatch, Reason: reason})
		c.log.Info(reason)
	}
	for id := range c.micro {
		if !seen[id] {
			delete(c.micro, id)
		}
	}
}
