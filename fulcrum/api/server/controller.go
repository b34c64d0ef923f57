// Package server is the HTTP side of fulcrumd's control API (the wire types are
// fulcrum/api, the Go client fulcrum/api/client): the socket and its access control by
// SO_PEERCRED, strict JSON decoding, the limits on local clients, the budgets' checks
// and the Controller interface the handlers call, which fulcrumd's controller implements
// through fulcrum/api/server/controlapi. docs/api.md documents every endpoint.
package server

import (
	"context"
	"io"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
)

// Controller is what the API server asks. fulcrumd's controller implements it; every
// method is called concurrently from HTTP handlers. Errors of type *Error reach the
// client as they are (status, code, field, message); any other error is a 500 whose
// message is the error's text, so wrap causes with what to do.
type Controller interface {
	// Status is the daemon's state now: board, mode, budgets, plan, power, per-workload
	// measurements, degraded flag, uptime.
	Status(ctx context.Context) (api.Status, error)

	// Budgets are the budgets in force.
	Budgets(ctx context.Context) (api.Budgets, error)
	// SetBudgets applies u (fields left nil keep their value) and re-plans from stored
	// profiles. The server has already checked u.Apply(current) succeeds; the controller
	// applies it atomically against the budgets it holds and returns the budgets now in
	// force. An infeasible plan is not an error: Status.Plan says so.
	SetBudgets(ctx context.Context, u api.BudgetsUpdate, by api.Caller) (api.Budgets, error)
	// ResetBudgets returns to the configuration's budgets: the budgets, per-workload
	// budgets, training weights and held mode set at run time are dropped and their
	// saved copy deleted. It returns the budgets now in force.
	ResetBudgets(ctx context.Context, by api.Caller) (api.Budgets, error)
	// Health says whether fulcrumd is ready (board, profile store and control loop
	// working) and what else is degraded; it never fails.
	Health(ctx context.Context) api.Health

	// Workers are the live workers (from the scheduler's snapshot).
	Workers(ctx context.Context) ([]api.Worker, error)

	// Mode is the board's current power mode, the one planned, and the board's levels.
	Mode(ctx context.Context) (api.ModeInfo, error)
	// ApplyMode sets m between minibatches and holds it (ModeInfo.Held) until budgets
	// change or an optimize runs; a power or latency violation may still step away from
	// it (an event says so). A mode outside the board's space is a 400 bad_mode *Error.
	ApplyMode(ctx context.Context, m powermode.Mode, by api.Caller) (api.ModeInfo, error)

	// Profiles lists stored profiles matching f.
	Profiles(ctx context.Context, f store.Filter) ([]store.Profile, error)
	// ExportProfiles writes the profiles matching f to w (store.WriteProfiles format).
	ExportProfiles(ctx context.Context, w io.Writer, format store.Format, f store.Filter) error
	// ImportProfiles stores the profiles read from r: all, or none when it returns an
	// error (a crash while writing can leave part stored; store.Import says how).
	ImportProfiles(ctx context.Context, r io.Reader, opts store.ImportOptions, by api.Caller) (store.ImportResult, error)

	// Optimize runs a searcher (OptimizeGMD or OptimizeALS) that profiles modes on the
	// board, then plans. It blocks until done; ctx ends when the client goes away, which
	// aborts the search (the controller returns to its previous plan). A second optimize
	// while one runs is a 409 busy *Error.
	Optimize(ctx context.Context, req api.OptimizeRequest, by api.Caller) (api.OptimizeResult, error)

	// Events returns the kept events with Seq > since, oldest first.
	Events(ctx context.Context, since uint64) ([]api.Event, error)
	// Subscribe delivers every event published from now on until cancel is called or
	// ctx ends; then the channel is closed. A subscriber that does not keep up loses
	// events (the channel is buffered; the controller never blocks on it) — the Seq gap
	// shows it.
	Subscribe(ctx context.Context) (events <-chan api.Event, cancel func())
}

// PresetResolver is implemented by a Controller whose board has nvpmodel presets: the
// mode of a live preset, by name or id (PUT /v1/mode with a preset).
type PresetResolver interface {
	ResolvePreset(ctx context.Context, nameOrID string) (powermode.Mode, error)
}

// Resumer is implemented by a Controller that stands down when another tool changes
// the board (POST /v1/mode/resume takes the board back).
type Resumer interface {
	Resume(ctx context.Context, by api.Caller) (api.ModeInfo, error)
}
