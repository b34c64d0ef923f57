// Package apitest is an in-memory server.Controller for tests of the API server, its
// client and fulcrumctl: budgets, mode, workers and an event log held in memory, the
// profiles in a real profile store.
package apitest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
)

// Fake implements server.Controller in memory. Its exported fields are set before use.
type Fake struct {
	Board  string
	Levels api.Levels
	Store  *store.Store
	Now    func() time.Time
	// OptimizeFunc answers Optimize when set (a test can block on ctx there); without it
	// Optimize plans the current mode and reports nothing profiled.
	OptimizeFunc func(ctx context.Context, req api.OptimizeRequest) (api.OptimizeResult, error)
	// KeepEvents bounds the event log (100 when 0).
	KeepEvents int
	// HealthFunc answers Health when set; without it the fake is ready.
	HealthFunc func() api.Health

	mu        sync.Mutex
	started   time.Time
	budgets   api.Budgets
	initial   api.Budgets // what ResetBudgets returns to
	mode      powermode.Mode
	held      bool
	plan      *api.Plan
	power     *api.Power
	workers   []api.Worker
	workloads []api.WorkloadStats
	optim     string
	events    []api.Event
	seq       uint64
	subs      map[chan api.Event]struct{}
}

// New returns a fake with budgets b at mode m on a board with levels lv.
func New(board string, lv api.Levels, m powermode.Mode, b api.Budgets, st *store.Store, now func() time.Time) *Fake {
	return &Fake{Board: board, Levels: lv, Store: st, Now: now, started: now(), budgets: b, initial: b, mode: m,
		subs: map[chan api.Event]struct{}{}}
}

// SetMeasurements replaces the workers, workload stats and power reading.
func (f *Fake) SetMeasurements(ws []api.Worker, wl []api.WorkloadStats, p *api.Power) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.workers, f.workloads, f.power = ws, wl, p
}

// SetPlan replaces the plan.
func (f *Fake) SetPlan(p *api.Plan) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.plan = p
}

// Subscribers is how many event subscriptions are open.
func (f *Fake) Subscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

// Publish appends an event to the log and sends it to subscribers.
func (f *Fake) Publish(kind, msg string, by *api.Caller, data any) api.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.publishLocked(kind, msg, by, data)
}

func (f *Fake) publishLocked(kind, msg string, by *api.Caller, data any) api.Event {
	f.seq++
	e := api.Event{Seq: f.seq, Time: f.Now().UTC(), Kind: kind, Message: msg, Caller: by}
	if data != nil {
		e.Data, _ = json.Marshal(data)
	}
	keep := f.KeepEvents
	if keep <= 0 {
		keep = 100
	}
	f.events = append(f.events, e)
	if len(f.events) > keep {
		f.events = slices.Clone(f.events[len(f.events)-keep:])
	}
	for ch := range f.subs {
		select {
		case ch <- e:
		default: // a slow subscriber loses events; the seq gap shows it
		}
	}
	return e
}

// Status implements server.Controller.
func (f *Fake) Status(context.Context) (api.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	if f.Store != nil {
		c, err := f.Store.Count()
		if err != nil {
			return api.Status{}, err
		}
		n = c
	}
	now := f.Now()
	st := api.Status{
		Version: "test", Board: f.Board, Mode: f.mode, ModeHeld: f.held, Budgets: f.budgets,
		Plan: f.plan, Power: f.power, Workers: slices.Clone(f.workers), Workloads: slices.Clone(f.workloads),
		Optimizing: f.optim, Profiles: n, StartedAt: f.started.UTC(), UptimeS: now.Sub(f.started).Seconds(),
	}
	if f.plan != nil && !f.plan.Feasible {
		st.TrainingPaused, st.Degraded = true, true
		st.DegradedReason = fmt.Sprintf("no known configuration meets the %s budget; training paused (relax it or run fulcrumctl optimize)", f.plan.Binding)
	}
	if st.Workers == nil {
		st.Workers = []api.Worker{}
	}
	if st.Workloads == nil {
		st.Workloads = []api.WorkloadStats{}
	}
	return st, nil
}

// Budgets implements server.Controller.
func (f *Fake) Budgets(context.Context) (api.Budgets, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.budgets, nil
}

// SetBudgets implements server.Controller.
func (f *Fake) SetBudgets(_ context.Context, u api.BudgetsUpdate, by api.Caller) (api.Budgets, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := server.ApplyUpdate(u, f.budgets)
	if err != nil {
		return f.budgets, err
	}
	f.budgets, f.held = b, false
	f.publishLocked(api.EventBudgets, "budgets set: "+b.String(), &by, b)
	return b, nil
}

// ResetBudgets implements server.Controller: back to the budgets New was given.
func (f *Fake) ResetBudgets(_ context.Context, by api.Caller) (api.Budgets, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.budgets, f.held = f.initial, false
	f.publishLocked(api.EventBudgets, "budgets reset: "+f.budgets.String(), &by, f.budgets)
	return f.budgets, nil
}

// Health implements server.Controller.
func (f *Fake) Health(context.Context) api.Health {
	if f.HealthFunc != nil {
		return f.HealthFunc()
	}
	return api.Health{Ready: true, Checks: []api.HealthCheck{{Name: "board", OK: true, Detail: f.Board}}}
}

// Workers implements server.Controller.
func (f *Fake) Workers(context.Context) ([]api.Worker, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.workers), nil
}

func (f *Fake) modeInfoLocked() api.ModeInfo {
	mi := api.ModeInfo{Board: f.Board, Current: f.mode, Held: f.held, Levels: f.Levels}
	if f.plan != nil {
		m := f.plan.Mode
		mi.Planned = &m
	}
	return mi
}

// Mode implements server.Controller.
func (f *Fake) Mode(context.Context) (api.ModeInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.modeInfoLocked(), nil
}

// ApplyMode implements server.Controller: m must be on the board's levels.
func (f *Fake) ApplyMode(_ context.Context, m powermode.Mode, by api.Caller) (api.ModeInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	bad := func(field string, v any, levels any) error {
		return api.Errorf(http.StatusBadRequest, api.CodeBadMode, field, "%s = %v is not a level of %s: want one of %v", field, v, f.Board, levels)
	}
	switch {
	case !slices.Contains(f.Levels.Cores, m.Cores):
		return api.ModeInfo{}, bad("cores", m.Cores, f.Levels.Cores)
	case !slices.Contains(f.Levels.CPUKHz, m.CPUKHz):
		return api.ModeInfo{}, bad("cpu_khz", m.CPUKHz, f.Levels.CPUKHz)
	case !slices.Contains(f.Levels.GPUHz, m.GPUHz):
		return api.ModeInfo{}, bad("gpu_hz", m.GPUHz, f.Levels.GPUHz)
	case !slices.Contains(f.Levels.EMCHz, m.EMCHz):
		return api.ModeInfo{}, bad("emc_hz", m.EMCHz, f.Levels.EMCHz)
	}
	f.mode, f.held = m, true
	f.publishLocked(api.EventApply, "mode applied by operator: "+m.Human(), &by, m)
	return f.modeInfoLocked(), nil
}

// Profiles implements server.Controller.
func (f *Fake) Profiles(_ context.Context, flt store.Filter) ([]store.Profile, error) {
	return f.Store.List(flt)
}

// ExportProfiles implements server.Controller.
func (f *Fake) ExportProfiles(_ context.Context, w io.Writer, format store.Format, flt store.Filter) error {
	return f.Store.Export(w, format, flt)
}

// ImportProfiles implements server.Controller.
func (f *Fake) ImportProfiles(_ context.Context, r io.Reader, opts store.ImportOptions, by api.Caller) (store.ImportResult, error) {
	res, err := f.Store.Import(r, opts)
	if err != nil {
		return res, api.Errorf(http.StatusBadRequest, api.CodeBadRequest, "", "import: %v", err)
	}
	f.Publish(api.EventProfile, fmt.Sprintf("imported profiles: %d added, %d unchanged, %d replaced", res.Added, res.Unchanged, res.Replaced), &by, res)
	return res, nil
}

// Optimize implements server.Controller.
func (f *Fake) Optimize(ctx context.Context, req api.OptimizeRequest, by api.Caller) (api.OptimizeResult, error) {
	f.mu.Lock()
	if f.optim != "" {
		f.mu.Unlock()
		return api.OptimizeResult{}, api.Errorf(http.StatusConflict, api.CodeBusy, "", "an optimize (%s) is already running; wait for it (fulcrumctl events --follow)", f.optim)
	}
	f.optim = req.Method
	f.publishLocked(api.EventProfile, "optimize started: "+req.Method, &by, req)
	mode := f.mode
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.optim = ""
		f.mu.Unlock()
	}()
	var res api.OptimizeResult
	var err error
	if f.OptimizeFunc != nil {
		res, err = f.OptimizeFunc(ctx, req)
	} else {
		res = api.OptimizeResult{Method: req.Method, Plan: api.Plan{Mode: mode, InferBatch: 1, Feasible: true, Source: req.Method, At: f.Now().UTC()}, StopReason: "nothing to profile"}
	}
	if err != nil {
		f.Publish(api.EventProfile, "optimize failed: "+err.Error(), &by, nil)
		return res, err
	}
	f.mu.Lock()
	p := res.Plan
	f.plan, f.mode, f.held = &p, p.Mode, false
	f.publishLocked(api.EventProfile, "optimize finished: "+res.StopReason, &by, res)
	f.mu.Unlock()
	return res, nil
}

// Events implements server.Controller.
func (f *Fake) Events(_ context.Context, since uint64) ([]api.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.Event
	for _, e := range f.events {
		if e.Seq > since {
			out = append(out, e)
		}
	}
	return out, nil
}

// Subscribe implements server.Controller.
func (f *Fake) Subscribe(ctx context.Context) (<-chan api.Event, func()) {
	ch := make(chan api.Event, 64)
	f.mu.Lock()
	f.subs[ch] = struct{}{}
	f.mu.Unlock()
	var once sync.Once
	cancel := func() {
		once.Do(func() {
			f.mu.Lock()
			delete(f.subs, ch)
			close(ch)
			f.mu.Unlock()
		})
	}
	stop := context.AfterFunc(ctx, cancel)
	return ch, func() { stop(); cancel() }
}

var _ server.Controller = (*Fake)(nil)
