// Package controlapi serves fulcrumd's controller (fulcrum/control) on the control API:
// API implements server.Controller by reading the controller and converting its state
// into the wire types of fulcrum/api. It lives on the server's side so that the
// dependency points from the API to the controller, never back (fulcrum/api's
// deps_test.go holds the controller free of the API).
package controlapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
)

// API adapts a Controller to the control API's server.Controller.
type API struct {
	C *control.Controller
	// Version is fulcrumd's build version; BoardSpec how the board was configured
	// ("auto", "sim:NAME", "none").
	Version   string
	BoardSpec string
	Started   time.Time

	faults faults // optional parts that failed (health.go)
}

var _ server.Controller = (*API)(nil)

// toAPIBudgets is the budgets in force in the API's wire form; where the rate is auto,
// the measured rate is reported of the one stream planned for, none with several (each
// has its own, in the status's streams).
func (a *API) toAPIBudgets(t plan.Targets) api.Budgets {
	return a.budgetsOf(t, a.C.Status().Streams)
}

// budgetsOf is toAPIBudgets with the streams of one status, so that the rate the budgets
// report is the one the streams and workloads of the same status show.
func (a *API) budgetsOf(t plan.Targets, streams []control.StreamStatus) api.Budgets {
	measured := 0.0
	if t.RateRPS == 0 && len(streams) == 1 {
		measured = streams[0].MeasuredRateRPS
	}
	return server.BudgetsFrom(t, measured)
}

// Status implements server.Controller.
func (a *API) Status(ctx context.Context) (api.Status, error) {
	c := a.C
	st := c.Status()
	snap := c.Snapshot()
	s := api.Status{Version: a.Version, Board: st.Board, Budgets: a.budgetsOf(st.Targets, st.Streams), ModeHeld: c.Held(),
		Workers: server.WorkersFrom(snap.Workers), Workloads: server.WorkloadsFrom(snap.Workloads), Degraded: st.Degraded != "", DegradedReason: st.Degraded,
		Optimizing: c.Searching(), Profiling: st.Profiling, TrainingPaused: snap.TrainingPaused, Turns: snap.Turns, Overruns: snap.Overruns, StartedAt: a.Started,
		UptimeS: c.Now().Sub(a.Started).Seconds()}
	if s.Board == "" {
		s.Board = "none"
	}
	s.Notices = st.Notices
	if n, err := c.Store().Count(); err == nil {
		s.Profiles = n
	}
	if err := c.Store().Damaged(); err != nil {
		s.Notices = append(s.Notices, fmt.Sprintf("%v (found while running); profiles cannot be read or stored: restart fulcrumd, which moves the file aside and starts on a fresh store", err))
	}
	s.Nvpmodel, s.StoodDown = a.nvpmodelMode(), c.StoodDown()
	if c.Board() != nil {
		if m, err := c.Board().Current(ctx); err == nil {
			s.Mode = m
		} else {
			s.ModeError = modeReadError(err)
			s.Degraded = true
			s.DegradedReason = strings.TrimPrefix(s.DegradedReason+"; "+s.ModeError, "; ")
		}
		if r, err := c.Board().Power(ctx); err == nil {
			// The average now, with or without workers (the controller's own figure is
			// updated only while it plans for a pair).
			avg, n := c.PowerAverage()
			p := &api.Power{TotalMW: r.TotalMW, Avg1sMW: avg, Avg1sSamples: n, At: r.At}
			for _, x := range r.Rails {
				p.Rails = append(p.Rails, api.Rail{Name: x.Name, PowerMW: x.PowerMW})
			}
			s.Power = p
		}
	}
	s.Heat = toAPIHeat(st.Heat)
	s.Refine = toAPIRefine(st.Refine)
	// One measured rate per stream on one status (issue 34): the controller's meter, the
	// rate it plans with, also in the workloads' rows (the scheduler's mean over its
	// window is another figure, and differs from it while the rate changes).
	for i, wl := range s.Workloads {
		if wl.Role != string(proto.RoleInfer) {
			continue
		}
		if j := slices.IndexFunc(st.Streams, func(x control.StreamStatus) bool { return x.Workload == wl.Workload }); j >= 0 {
			s.Workloads[i].ArrivalRateHz = st.Streams[j].MeasuredRateRPS
		}
	}
	for _, x := range st.Streams {
		s.Streams = append(s.Streams, api.StreamStatus{Workload: x.Workload, Batch: x.Batch, LatencyBudgetMS: x.LatencyBudgetMS,
			OwnBudget: x.OwnBudget, RateRPS: x.RateRPS, RateFixed: x.RateFixed, PlanRateRPS: x.PlanRateRPS, PredLatencyMS: x.PredLatencyMS,
			MeasuredP99MS: x.MeasuredP99MS, ServedRecent: x.Served, Rho: x.Rho})
	}
	if r := a.degradedFaults(s.DegradedReason); r != s.DegradedReason {
		s.Degraded, s.DegradedReason = true, r
	}
	s.Plan = a.plan()
	// An evaluated plan that meets no budget set is degraded running (docs/operations.md):
	// inference and power come first, training waits.
	if p := s.Plan; p != nil && !p.Feasible && (p.PredLatencyMS > 0 || p.PredPowerMW > 0) {
		why := infeasibleWhy(p, st, s.Power, snap.TrainingPaused)
		s.Degraded = true
		s.DegradedReason = strings.TrimPrefix(s.DegradedReason+"; "+why, "; ")
	}
	return s, nil
}

// infeasibleWhy is the degraded reason of an infeasible plan: the budget the decision
// names, with the figures it was judged on (predicted with training running) beside what
// the board does now, so that "power budget" at 9.7 W measured against 30 W is not left
// unexplained (issue 34), and what to do.
func infeasibleWhy(p *api.Plan, st control.Status, power *api.Power, paused bool) string {
	b := st.Targets.WithDefaults()
	fig := ""
	switch p.Binding {
	case "power":
		fig = fmt.Sprintf("the plan is predicted to draw %.1f W with training running, over the %.0f W budget", p.PredPowerMW/1000, b.PowerMW/1000)
		if power != nil && power.Avg1sSamples > 0 {
			fig += fmt.Sprintf("; the board draws %.1f W now (1 s average)", power.Avg1sMW/1000)
			if paused {
				fig += " with training paused"
			}
		}
	case "latency":
		worst, ratio := -1, 0.0
		for i, x := range st.Streams {
			if x.LatencyBudgetMS > 0 && x.PredLatencyMS/x.LatencyBudgetMS > ratio {
				worst, ratio = i, x.PredLatencyMS/x.LatencyBudgetMS
			}
		}
		switch {
		case worst >= 0 && len(st.Streams) > 1:
			x := st.Streams[worst]
			fig = fmt.Sprintf("stream %s's p99 is predicted at %.1f ms with training running, against its %.0f ms budget", x.Workload, x.PredLatencyMS, x.LatencyBudgetMS)
		case p.PredLatencyMS > 0:
			fig = fmt.Sprintf("the p99 is predicted at %.1f ms with training running, against the %.0f ms budget", p.PredLatencyMS, b.LatencyMS)
		}
	case "gpu_share":
		fig = fmt.Sprintf("inference is predicted to take %.0f%% of the GPU, over the %.0f%% cap", 100*p.Rho, 100*b.RhoMax)
	}
	if fig != "" {
		fig = ": " + fig
	}
	return fmt.Sprintf("no known configuration meets the %s budget%s (relax it, or run fulcrumctl optimize to profile more modes)", p.Binding, fig)
}

// plan is the applied configuration as an api.Plan, with the reason of the decision
// that chose it.
func (a *API) plan() *api.Plan {
	st := a.C.Status()
	ch := st.Current
	if st.Wanted != nil {
		ch = st.Wanted // the decision, shown as not in force (ApplyError)
	}
	if ch == nil {
		return nil
	}
	p := &api.Plan{Mode: ch.Mode, InferBatch: ch.Batch(), TrainMicroBatch: ch.MicroBatch(), Feasible: ch.Predicted.Feasible,
		PredLatencyMS: ch.Predicted.LatencyMS, PredPowerMW: ch.Predicted.PowerMW,
		PredThroughputSamplesPerS: ch.Predicted.ThroughputSPS, Rho: ch.Predicted.Rho, Source: "stored-profiles",
		ApplyError: st.ApplyError}
	if len(ch.Streams) > 1 || len(ch.Train) > 1 {
		p.TrainJobs = toAPITrainJobs(ch.Train) // the pair's one job is TrainMicroBatch
	}
	evs := a.C.Events().List(0)
	for i := len(evs) - 1; i >= 0; i-- {
		e := evs[i]
		if e.Kind == control.KindApply && e.Caller == nil && (e.Err == "" || st.Wanted != nil) {
			continue
		}
		if e.Mode != nil && *e.Mode == ch.Mode {
			p.Reason, p.At = e.Reason, e.Time
			switch {
			case a.C.Held():
				p.Source = "operator"
			case st.LastSearch != nil && e.Kind == control.KindPlan:
				p.Source = "search"
			}
			break
		}
	}
	if !p.Feasible {
		p.Binding = ch.Predicted.Binding // the decision's, as its event says
		if p.Binding == "" {
			p.Binding = "unknown"
			if e, ok := a.binding(ch); ok {
				p.Binding = e
			}
		}
	}
	return p
}

// toAPITrainJobs is every job's micro-batch of a plan for several streams or jobs on the
// wire (nil for a pair's plan).
func toAPITrainJobs(train []control.TrainChoice) []api.PlanTrainJob {
	var out []api.PlanTrainJob
	for _, t := range train {
		out = append(out, api.PlanTrainJob{Workload: t.Workload, Batch: t.Batch, MicroBatch: t.MicroBatch})
	}
	return out
}

func (a *API) binding(ch *control.Choice) (string, bool) {
	b := a.C.Targets().WithDefaults()
	// First the budgets themselves; then latency with the room the scheduler's admission
	// test needs (see admissionBudgets), which the decision keeps.
	for _, lim := range []struct{ latencyMS, powerMW, rho float64 }{
		{b.LatencyMS, b.PowerMW, b.RhoMax},
		{a.C.AdmissionLatencyMS(b.LatencyMS), b.PowerMW, b.RhoMax},
	} {
		switch {
		case ch.Predicted.LatencyMS > lim.latencyMS:
			return "latency", true
		case b.PowerMW > 0 && ch.Predicted.PowerMW > lim.powerMW:
			return "power", true
		case ch.Predicted.Rho > lim.rho:
			return "gpu_share", true
		}
	}
	return "", false
}

// Budgets implements server.Controller.
func (a *API) Budgets(context.Context) (api.Budgets, error) {
	return a.toAPIBudgets(a.C.Targets()), nil
}

// SetBudgets implements server.Controller.
func (a *API) SetBudgets(_ context.Context, u api.BudgetsUpdate, by api.Caller) (api.Budgets, error) {
	// Apply against the budgets held now; a concurrent update between reading and
	// setting is resolved last-writer-wins, like two PUTs in a row.
	cur := a.toAPIBudgets(a.C.Targets())
	nb, err := server.ApplyUpdate(u, cur)
	if err != nil {
		return cur, err
	}
	if u.Workload != "" {
		sb := nb.StreamOf(u.Workload)
		if err := a.C.SetStreamTarget(u.Workload, server.StreamTargetOf(sb), fromAPICaller(by)); err != nil {
			return cur, api.Errorf(http.StatusBadRequest, api.CodeBadBudget, "workload", "%v", err)
		}
		a.C.SaveSettings()
		return a.toAPIBudgets(a.C.Targets()), nil
	}
	if err := a.C.SetTargetsBy(server.TargetsOf(nb).Shared(), fromAPICaller(by)); err != nil {
		return cur, api.Errorf(http.StatusBadRequest, api.CodeBadBudget, "", "%v", err)
	}
	return a.toAPIBudgets(a.C.Targets()), nil
}

// Workers implements server.Controller.
func (a *API) Workers(context.Context) ([]api.Worker, error) {
	return server.WorkersFrom(a.C.Snapshot().Workers), nil
}

// modeReadError words a failed read of the board's mode for an operator.
func modeReadError(err error) string {
	return fmt.Sprintf("the board's mode could not be read: %v; check that the board's mode files (CPU online and cpufreq, the GPU's devfreq, the EMC clock in debugfs) exist and are readable by fulcrumd (fulcrumctl board info reads them too)", err)
}

// Mode implements server.Controller.
func (a *API) Mode(ctx context.Context) (api.ModeInfo, error) {
	c := a.C
	if c.Board() == nil {
		return api.ModeInfo{Board: "none"}, api.Errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "", "%v", control.ErrNoBoard)
	}
	cur, err := c.Board().Current(ctx)
	if err != nil {
		// The board's files, not the daemon, are at fault: 503 with what to check.
		return api.ModeInfo{Board: c.Board().Info().Name}, api.Errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "", "%s", modeReadError(err))
	}
	mi := api.ModeInfo{Board: c.Board().Info().Name, Current: cur, Held: c.Held()}
	if n, ok := c.Board().(interface{ Nvpmodel() string }); ok {
		mi.Nvpmodel = n.Nvpmodel()
	}
	if n := a.nvpmodelMode(); n != nil && n.Name != "" {
		mi.Nvpmodel = n.Name // read now: an nvpmodel -m since start shows
	}
	if st := c.Status(); st.Current != nil {
		m := st.Current.Mode
		mi.Planned = &m
	}
	if sp := c.Board().Space(); sp != nil {
		l := sp.Levels()
		mi.Levels = api.Levels{Cores: l.Cores, CPUKHz: l.CPUKHz, GPUHz: l.GPUHz, EMCHz: l.EMCHz}
	}
	return mi, nil
}

// ApplyMode implements server.Controller.
func (a *API) ApplyMode(ctx context.Context, m powermode.Mode, by api.Caller) (api.ModeInfo, error) {
	c := a.C
	if c.Board() == nil {
		return api.ModeInfo{}, api.Errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "", "%v", control.ErrNoBoard)
	}
	if sp := c.Board().Space(); sp != nil {
		if err := sp.Check(m); err != nil { // names the knob and its nearest levels, as board apply does
			return api.ModeInfo{}, api.Errorf(http.StatusBadRequest, api.CodeBadMode, "mode", "%v (fulcrumctl mode lists the board's levels)", err)
		}
	}
	if _, err := c.ApplyMode(ctx, m); err != nil {
		// The mode was valid and the board refused it (the backend rolled it back): the
		// daemon cannot do it now, which is not a bug of the daemon's (500).
		return api.ModeInfo{}, api.Errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "", "%v; fix the cause the board names (fulcrumctl board info shows what it runs) and apply again", err)
	}
	c.Events().Add(control.Event{Kind: control.KindApply, Reason: "operator applied mode " + m.Human(), Mode: &m, Caller: fromAPICaller(by)})
	c.SaveSettings() // the held mode, kept across a restart
	return a.Mode(ctx)
}

// nvpmodelMode is the board's running nvpmodel mode (daemon.Board reads its status file
// again), nil where it has none.
func (a *API) nvpmodelMode() *api.NvpmodelMode {
	n, ok := a.C.Board().(interface{ NvpmodelMode() (int, string, bool) })
	if !ok {
		return nil
	}
	id, name, known := n.NvpmodelMode()
	if !known {
		return nil
	}
	return &api.NvpmodelMode{ID: id, Name: name}
}

// ResolvePreset implements server.PresetResolver: a live nvpmodel preset's mode.
func (a *API) ResolvePreset(_ context.Context, nameOrID string) (powermode.Mode, error) {
	pb, ok := a.C.Board().(interface {
		Preset(nameOrID string) (powermode.Mode, string, error)
	})
	if !ok {
		return powermode.Mode{}, api.Errorf(http.StatusBadRequest, api.CodeBadMode, "preset", "this board has no nvpmodel presets; give the mode's clocks")
	}
	m, _, err := pb.Preset(nameOrID)
	if err != nil {
		return powermode.Mode{}, api.Errorf(http.StatusBadRequest, api.CodeBadMode, "preset", "%v", err)
	}
	return m, nil
}

// Resume implements server.Resumer.
func (a *API) Resume(ctx context.Context, by api.Caller) (api.ModeInfo, error) {
	if a.C.Board() == nil {
		return api.ModeInfo{}, api.Errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "", "%v", control.ErrNoBoard)
	}
	if _, err := a.C.Resume(ctx, fromAPICaller(by)); err != nil {
		if errors.Is(err, control.ErrNotStoodDown) {
			return api.ModeInfo{}, api.Errorf(http.StatusConflict, api.CodeNotStoodDown, "", "%v", err)
		}
		return api.ModeInfo{}, api.Errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "", "%v", err)
	}
	return a.Mode(ctx)
}

// Profiles implements server.Controller.
func (a *API) Profiles(_ context.Context, f store.Filter) ([]store.Profile, error) {
	return a.C.Store().List(f)
}

// ExportProfiles implements server.Controller.
func (a *API) ExportProfiles(_ context.Context, w io.Writer, format store.Format, f store.Filter) error {
	return a.C.Store().Export(w, format, f)
}

// ImportProfiles implements server.Controller.
func (a *API) ImportProfiles(_ context.Context, r io.Reader, opts store.ImportOptions, by api.Caller) (store.ImportResult, error) {
	// A profile of fulcrumd's own board must be at one of the board's modes.
	if b := a.C.Board(); b != nil {
		opts.Spaces = map[string]*powermode.Space{b.Info().Name: b.Space()}
	}
	res, err := a.C.Store().Import(r, opts)
	if err != nil {
		return res, err
	}
	a.C.Events().Add(control.Event{Kind: control.KindProfile, Reason: fmt.Sprintf("profiles imported: %d added, %d unchanged, %d replaced", res.Added, res.Unchanged, res.Replaced), Caller: fromAPICaller(by)})
	return res, nil
}

// Optimize implements server.Controller.
func (a *API) Optimize(ctx context.Context, req api.OptimizeRequest, by api.Caller) (api.OptimizeResult, error) {
	if req.Method != api.OptimizeGMD && req.Method != api.OptimizeALS {
		return api.OptimizeResult{}, api.Errorf(http.StatusBadRequest, api.CodeBadMethod, "method", "method %q: want gmd or als", req.Method)
	}
	a.C.Events().Add(control.Event{Kind: control.KindProfile, Reason: "optimize requested: " + req.Method, Caller: fromAPICaller(by)})
	out, err := a.C.Optimize(ctx, req.Method, req.MaxProfiles)
	switch {
	case errors.Is(err, control.ErrBusy):
		return api.OptimizeResult{}, api.Errorf(http.StatusConflict, api.CodeNotStoodDown, "", "%v", err)
	case errors.Is(err, control.ErrNoBoard), errors.Is(err, control.ErrNoPair), errors.Is(err, control.ErrNoProfiles):
		return api.OptimizeResult{}, api.Errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "", "%v", err)
	case err != nil:
		return api.OptimizeResult{}, err
	}
	res := api.OptimizeResult{Method: req.Method, Profiled: out.Counts.Profiled + out.Counts.Abandoned, Reused: out.Counts.FromStore,
		StopReason: out.Result.Stop, DurationMS: float64(out.Duration) / float64(time.Millisecond)}
	if p := a.plan(); p != nil {
		p.Source = req.Method
		res.Plan = *p
	}
	return res, nil
}

// toAPIEvent converts an event: Kind as is, Message its reason, Data the rest.
func toAPIEvent(e control.Event) api.Event {
	out := api.Event{Seq: e.Seq, Time: e.Time, Kind: string(e.Kind), Message: e.Reason, Caller: toAPICaller(e.Caller)}
	data := struct {
		Mode      *powermode.Mode     `json:"mode,omitempty"`
		Batch     int                 `json:"batch,omitempty"`
		Streams   []api.RefineStream  `json:"streams,omitempty"`
		Predicted *control.Prediction `json:"predicted,omitempty"`
		Measured  *control.Measured   `json:"measured,omitempty"`
		Err       string              `json:"error,omitempty"`
	}{e.Mode, e.Batch, toAPIStreamBatches(e.Streams), e.Predicted, e.Measured, e.Err}
	if raw, err := json.Marshal(data); err == nil && string(raw) != "{}" {
		out.Data = raw
	}
	return out
}

// Events implements server.Controller.
func (a *API) Events(_ context.Context, since uint64) ([]api.Event, error) {
	evs := a.C.Events().List(since)
	out := make([]api.Event, len(evs))
	for i, e := range evs {
		out[i] = toAPIEvent(e)
	}
	return out, nil
}

// Subscribe implements server.Controller.
func (a *API) Subscribe(ctx context.Context) (<-chan api.Event, func()) {
	in, cancelIn := a.C.Events().Subscribe(256)
	out := make(chan api.Event, 256)
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		defer close(out)
		defer cancelIn()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- toAPIEvent(e):
				default: // the subscriber is behind: it sees the Seq gap
				}
			}
		}
	}()
	return out, cancel
}

// fromAPICaller is the API's caller as the controller records it.
func fromAPICaller(c api.Caller) *control.Caller {
	return &control.Caller{UID: c.UID, GID: c.GID, PID: c.PID, Comm: c.Comm, Groups: c.Groups}
}

// toAPICaller is the controller's caller in the API's wire form (nil stays nil).
func toAPICaller(c *control.Caller) *api.Caller {
	if c == nil {
		return nil
	}
	return &api.Caller{UID: c.UID, GID: c.GID, PID: c.PID, Comm: c.Comm, Groups: c.Groups}
}

// toAPIRefine is the controller's live refinement in the API's wire form (nil stays nil).
func toAPIRefine(r *control.RefineStatus) *api.Refine {
	if r == nil {
		return nil
	}
	out := &api.Refine{Mode: r.Mode, Batch: r.Batch, Streams: toAPIStreamBatches(r.Streams), PFeasible: r.PFeasible, TrialUntil: r.TrialUntil,
		Pooled: api.RefinePooled{Windows: r.Pooled.Windows, TrainRatio: r.Pooled.TrainRatio, InferRatio: r.Pooled.InferRatio,
			PowerRatio: r.Pooled.PowerRatio, Repeats: r.Pooled.Repeats,
			TrainRatios: slices.Clone(r.Pooled.TrainRatios), InferRatios: slices.Clone(r.Pooled.InferRatios)}}
	if c := r.Confirmed; c != nil {
		out.Confirmed = &api.RefineConfig{Mode: c.Mode, Batch: c.Batch, Streams: toAPIStreamBatches(c.Streams)}
	}
	if c := r.Trial; c != nil {
		out.Trial = &api.RefineConfig{Mode: c.Mode, Batch: c.Batch, Streams: toAPIStreamBatches(c.Streams)}
	}
	for _, f := range r.Failed {
		out.Failed = append(out.Failed, api.RefineFailure{Mode: f.Mode, Batch: f.Batch, Streams: toAPIStreamBatches(f.Streams), Count: f.Count, RetryAt: f.RetryAt, Why: f.Why})
	}
	return out
}

// toAPIStreamBatches is every stream's batch of a refinement configuration on the wire.
func toAPIStreamBatches(bs []control.StreamBatch) []api.RefineStream {
	var out []api.RefineStream
	for _, b := range bs {
		out = append(out, api.RefineStream{Workload: b.Workload, Batch: b.Batch})
	}
	return out
}

// toAPIHeat is the controller's heat in the API's wire form (nil stays nil).
func toAPIHeat(h *control.Heat) *api.Heat {
	if h == nil {
		return nil
	}
	out := &api.Heat{At: h.At, GPULoad: h.GPULoad, GPUHz: h.GPUHz, GPUFloorHz: h.GPUFloorHz, CPUKHz: h.CPUKHz, CPUFloorKHz: h.CPUFloorKHz,
		Throttled: h.Throttled, ThrottleReason: h.ThrottleReason, ThrottledSince: h.ThrottledSince, CapGPUHz: h.CapGPUHz, CapCPUKHz: h.CapCPUKHz}
	for _, z := range h.Zones {
		out.Zones = append(out.Zones, api.ThermalZone{Zone: z.Zone, Celsius: z.Celsius, TripC: z.TripC, Error: z.Error})
	}
	return out
}
