package control

import (
	"log/slog"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
)

// What the control API's adapter (fulcrum/api/server/controlapi) reads of a controller
// beyond its Status: the dependency points from the API server to the controller, so
// these are exported rather than the adapter living here.

// Snapshot is the scheduler's state now (workers, per-workload measurements, turns).
func (c *Controller) Snapshot() sched.Snapshot { return c.sched.Snapshot() }

// Now is the controller's clock.
func (c *Controller) Now() time.Time { return c.clock.Now() }

// Store is the profile store the controller plans from.
func (c *Controller) Store() *store.Store { return c.store }

// Board is the board the controller drives (nil with board: none).
func (c *Controller) Board() Board { return c.board }

// Log is the controller's logger.
func (c *Controller) Log() *slog.Logger { return c.log }

// PowerAverage is the board power's moving average over the configured power window now
// and the number of readings it holds (0: none; the average is then no measurement),
// with or without workers.
func (c *Controller) PowerAverage() (avgMW float64, n int) {
	return c.power.Average(c.clock.Now(), c.cfg.PowerWindow)
}

// AdmissionLatencyMS is the latency budget latencyMS as the scheduler's admission test
// sees it (the room it keeps before deadlines taken off; admissionBudgets).
func (c *Controller) AdmissionLatencyMS(latencyMS float64) float64 {
	return c.admissionBudgets(plan.Budgets{LatencyMS: latencyMS}).LatencyMS
}

// SaveSettings writes the run-time budgets and a held mode to <state_dir>/settings.json
// now, so they survive a restart (settings.go); the control API calls it after an
// operator's change that does not save itself.
func (c *Controller) SaveSettings() { c.persistSettings() }
