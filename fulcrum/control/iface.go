// Package control is fulcrumd's controller (docs/design.md §6): it plans the power mode and the
// inference batch size from stored profiles with model v1 (plan.Model), runs a
// searcher (GMD or ALS) through a live profiler when too few profiles are stored,
// and watches the measured arrival rate, latency quantiles and board power, re-planning
// on drift and stepping to a safer known mode at once when a budget is broken. Every
// decision is an Event in a bounded log. docs/controller.md describes the rules.
package control

import (
	"context"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Board is the board the controller drives. daemon.Board implements it (its Apply
// snapshots the board before the first change, so it can be restored).
type Board interface {
	Info() powermode.BoardInfo
	Space() *powermode.Space
	Current(ctx context.Context) (powermode.Mode, error)
	Apply(ctx context.Context, m powermode.Mode) error
	Power(ctx context.Context) (powermode.PowerReading, error)
}

// Scheduler is the part of the GPU turn scheduler the controller uses
// (*sched.Scheduler implements it).
type Scheduler interface {
	BetweenTurns(ctx context.Context, fn func(context.Context) error) error
	Profile(ctx context.Context, workerID string, batch int) (time.Duration, error)
	Snapshot() sched.Snapshot
	SetInferBatch(workerID string, batch int) error
	SetLatencyBudget(l time.Duration)
	// SetStreamLatencyBudgets sets per-stream latency budgets (workload → L_i).
	SetStreamLatencyBudgets(budgets map[string]time.Duration) error
	// SetTrainWeights sets the training workloads' time-share weights.
	SetTrainWeights(weights map[string]float64) error
	SetTrainingPaused(paused bool)
	// SetMicroBatch sets the largest micro-batch size a training worker runs its
	// minibatches in (a smaller one while its turn does not fit the room; 0: the
	// scheduler's run-time choice; issue 32).
	SetMicroBatch(workerID string, microBatch int) error
	// Config is the scheduler's configuration (its admission margins).
	Config() sched.Config
	// ExpectTimes resets a worker's expected turn times after a mode change.
	ExpectTimes(workerID string, times map[int]time.Duration) error
	// RealBatchMS is the median time of a workload's latest real batches of a size
	// released at or after since (zero: any), and how many there are (profile batches far
	// faster than them are discarded: decline.go).
	RealBatchMS(role, workload string, batch int, since time.Time) (float64, int)
}

var _ Scheduler = (*sched.Scheduler)(nil)
