package control

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/fulcrum/search"
	"github.com/fulcrum-edge/fulcrum/internal/stats"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/measure"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// LiveOptions tune live profiling. Zero values take the defaults in brackets.
type LiveOptions struct {
	Warmup  int           `mapstructure:"warmup"`      // profile batches run and discarded at each point [1]
	Samples int           `mapstructure:"samples"`     // measured batches per point, at least [5]
	MinTime time.Duration `mapstructure:"min_time_ms"` // and measure each point at least this long, for power readings [300 ms]
	// MaxSamples, when above Samples, turns on the offline profiler's precision rule
	// (profiler/measure): after Samples and MinTime, keep measuring until the mean time's
	// relative standard error is at most TargetRSE [0.02], or MaxSamples batches ran.
	// 0 (or at most Samples) leaves it off [0]: live profile batches cost training time,
	// and with heavy-tailed turn times the rule held live searches for minutes
	// (docs/profiler.md "One measurement loop").
	MaxSamples int     `mapstructure:"max_samples"`
	TargetRSE  float64 `mapstructure:"target_rse"`
	// PowerWindow is the moving average the power guard checks [1 s].
	PowerWindow time.Duration
	// PowerSettle: readings this soon after the mode is applied still show the previous
	// mode (the INA3221 averages over ~430 ms; the simulator's loop lags a period), so
	// neither the guard nor the stored power uses them [500 ms].
	PowerSettle time.Duration
	// SensorLag: a power reading shows the board up to this long before it was taken
	// (the simulator's loop period; an assumption for a real INA3221, whose averaging
	// window is set by its driver), so only readings at least this far into a batch are
	// attributed to it [100 ms].
	SensorLag time.Duration
}

// sensorWindow is the span of board activity one power reading may average: the
// sensor's averaging window and how late it reports it (an INA3221's ~430 ms average,
// read up to one more window late; the lifetime board's 500 ms physics step alike):
// twice PowerSettle, which is the same memory of the sensor seen from a mode change
// (1 s by default). A reading counts as a training point's own only where its measured
// batches ran for at least sensorCover of the window before it, and a training turn
// that fits the latency budget's room is measured long enough for such readings
// (trainReadTime, sensorPower).
func (o LiveOptions) sensorWindow() time.Duration { return 2 * o.PowerSettle }

func (o LiveOptions) withDefaults() LiveOptions {
	if o.Warmup <= 0 {
		o.Warmup = 1
	}
	if o.Samples <= 0 {
		o.Samples = 5
	}
	if o.MinTime <= 0 {
		o.MinTime = 300 * time.Millisecond
	}
	if o.TargetRSE <= 0 {
		o.TargetRSE = 0.02
	}
	if o.PowerWindow <= 0 {
		o.PowerWindow = time.Second
	}
	if o.PowerSettle <= 0 {
		o.PowerSettle = 500 * time.Millisecond
	}
	if o.SensorLag <= 0 {
		o.SensorLag = 100 * time.Millisecond
	}
	return o
}

// Pair names the two workloads a profile covers: training at its B_T (and at each of
// MicroBatches) and inference at each of Batches.
type Pair struct {
	Train      string `json:"train"`
	TrainBatch int    `json:"train_batch"`
	Infer      string `json:"infer"`
	Batches    []int  `json:"infer_batches"`
	// MicroBatches are the micro-batch sizes the training worker declared below its
	// minibatch, ascending (issue 32): each mode is profiled at each of them too, and a
	// mode's profile is complete only with all of them (docs/design.md §9 "Micro-batches
	// profiled live").
	MicroBatches []int `json:"train_micro_batches,omitempty"`
}

// OverBudget records a mode abandoned while profiling because the board's 1 s average
// power went over the budget there.
type OverBudget struct {
	Mode     powermode.Mode `json:"mode"`
	PowerMW  float64        `json:"power_mw"`  // the average that broke the budget
	BudgetMW float64        `json:"budget_mw"` // the budget at the time
	At       time.Time      `json:"at"`
}

// Saturated records a mode abandoned while profiling because the scheduler refused a
// profile batch there (sched.ErrProfileCrowdedOut): inference requests stayed queued the
// whole time it waited, so inference alone keeps the GPU busy at that mode and no
// training fits within the latency budget. Unlike OverBudget it is not persisted: it
// depends on the streams' rates, and a later search (after a rate change) may try the
// mode again.
type Saturated struct {
	Mode  powermode.Mode `json:"mode"`
	Point string         `json:"point"` // the point whose profile batch was refused
	// PowerMW is the board's average power while inference ran alone there.
	PowerMW float64   `json:"power_mw"`
	At      time.Time `json:"at"`
}

// SaturatedModes holds the modes one search's live profilers found saturated: shared by
// a search's profilers (one per stream and job), so that only the first waits at such a
// mode and the others answer at once.
type SaturatedModes struct {
	mu    sync.Mutex
	modes map[powermode.Mode]Saturated
}

func (s *SaturatedModes) add(r Saturated) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.modes == nil {
		s.modes = map[powermode.Mode]Saturated{}
	}
	s.modes[r.Mode] = r
}

func (s *SaturatedModes) get(m powermode.Mode) (Saturated, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.modes[m]
	return r, ok
}

// List returns the saturated modes.
func (s *SaturatedModes) List() []Saturated {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Saturated, 0, len(s.modes))
	for _, r := range s.modes {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Saturated) int { return a.At.Compare(b.At) })
	return out
}

// LiveCounts say what a live profiler did.
type LiveCounts struct {
	// Modes counts the distinct modes at which anything was measured live. Profiled
	// counts profile runs: one per live profiler at each such mode, so with several
	// streams or training jobs one mode is one run for the first pair and one for each
	// further stream and job (docs/controller.md "Several streams and training jobs").
	Modes     int `json:"modes"`
	Profiled  int `json:"profiled"`   // profile runs measured live (see Modes)
	FromStore int `json:"from_store"` // requests answered from the store
	Abandoned int `json:"abandoned"`  // modes abandoned as over the power budget
	// Saturated counts modes abandoned because inference left no room for a profile
	// batch there (over the latency budget with any training; see Saturated).
	Saturated int `json:"saturated,omitempty"`
	Points    int `json:"points"` // (role, batch) points measured and stored
	// Remeasured counts repeat measurements of stored modes (a searcher confirming a
	// candidate near a budget's edge).
	Remeasured int `json:"remeasured"`
	// Discarded counts profile batches discarded as under a fifth of the workload's
	// real batches of that size (a handler that runs no real batch).
	Discarded int `json:"discarded"`
	// Bound counts whole training minibatches not run because they were over the
	// latency budget's room, stored as bounds from the micro-batch turns
	// (store.Profile.Bound).
	Bound int `json:"bound,omitempty"`
}

// add sums o into n: the live profile work since start (status), every search's and
// probe's counts added as it ends. Bound is per search (its done event), not summed.
func (n *LiveCounts) add(o LiveCounts) {
	n.Modes += o.Modes
	n.Profiled += o.Profiled
	n.FromStore += o.FromStore
	n.Abandoned += o.Abandoned
	n.Saturated += o.Saturated
	n.Points += o.Points
	n.Remeasured += o.Remeasured
	n.Discarded += o.Discarded
}

// LiveProfiler is a search.Profiler that measures a mode through the workers' profile
// grants while fulcrumd serves: it applies the mode between turns, runs profile batches
// on the training worker (at B_T, and at each micro-batch size it declared) and the
// inference worker (at every batch size) —
// the scheduler keeps serving real inference requests between them, deadline first —
// samples board power meanwhile, and stores every point in the profile store (source
// "live"). A mode already stored is answered from the store and never re-profiled. If
// the 1 s average power goes over the budget while a mode is profiled, the mode is
// abandoned and recorded as over budget (persisted in the store's model bucket): it is
// answered from then on by an estimated profile at the power it drew, so that a
// searcher treats it as infeasible and walks away, and it is never stored as a profile.
type LiveProfiler struct {
	Sched   Scheduler
	Board   Board
	Store   *store.Store
	Power   *PowerMonitor
	Clock   sched.Clock
	Log     *slog.Logger
	Pair    Pair
	Options LiveOptions
	// BudgetMW is the power budget the guard enforces (0: none).
	BudgetMW float64
	// Only, when truth.Train or truth.Infer, limits the points profiled (and answered)
	// to that workload of the pair: with several streams (pooledLive) the training point
	// is measured once per mode, not once per stream.
	Only truth.Role
	// OnProfile, when set, is told of every mode measured live (over is set when the
	// mode was abandoned as over budget). It must not block.
	OnProfile func(m powermode.Mode, mp plan.ModeProfile, over *OverBudget)
	// LatencyMS is the largest latency budget of the streams profiled: a saturated mode
	// answers with a training minibatch of twice it (plan.MaxLatencyMS when 0), so that
	// every planner and searcher sees training unable to fit there.
	LatencyMS float64
	// Saturation, shared by one search's profilers, holds the modes found saturated (nil:
	// this profiler keeps its own).
	Saturation *SaturatedModes
	// OnSaturated, when set, is told of every mode abandoned as saturated. It must not
	// block.
	OnSaturated func(m powermode.Mode, mp plan.ModeProfile, rec Saturated)
	// Admission is the scheduler's room the decision keeps (plan.Rules.Admission). With
	// ByRoom, LatencyMS and declared micro-batch sizes, the training turns over that room
	// are not measured (livemicro.go); ByRoom is set for the pair's search only (several
	// streams or jobs measure every size, as before).
	Admission plan.Admission
	ByRoom    bool
	// InferByRoom (with ByRoom) leaves out the inference batches over the room too. The
	// controller sets it where a plan is in force (a re-search from a paused plan keeps
	// the p99 the search would otherwise break); a first search measures every batch:
	// measured on the Orin NX lifetime sweep, GMD's first walk on predicted batches
	// stopped "converged" after its five probes at 75 ms budgets (1 h ratio 0.820 → 0.764).
	InferByRoom bool
	// OnDiscard, when set, is told once per point of the profile batches discarded there
	// as too fast (n of them, the fastest fastestMS, against realMS for the workload's
	// real batches). It must not block.
	OnDiscard func(k store.Key, n int, fastestMS, realMS float64)

	mu     sync.Mutex
	counts LiveCounts
	over   map[powermode.Mode]OverBudget
	loaded bool
	// repeats holds, per point, the repeat measurements this profiler took (Remeasure);
	// the store holds their combination.
	repeats map[store.Key][]store.Profile
}

var (
	_ search.Profiler   = (*LiveProfiler)(nil)
	_ search.Remeasurer = (*LiveProfiler)(nil)
)

// Counts returns what the profiler has done so far.
func (p *LiveProfiler) Counts() LiveCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts
}

func (p *LiveProfiler) logger() *slog.Logger {
	if p.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return p.Log
}

func (p *LiveProfiler) clock() sched.Clock {
	if p.Clock == nil {
		return sched.RealClock{}
	}
	return p.Clock
}

func (p *LiveProfiler) board() string { return p.Board.Info().Name }

// saturation returns the set of saturated modes, making this profiler's own if none is
// shared. Called with p.mu held.
func (p *LiveProfiler) saturation() *SaturatedModes {
	if p.Saturation == nil {
		p.Saturation = &SaturatedModes{}
	}
	return p.Saturation
}

// saturatedEstimate is the profile a saturated mode answers with: the over-budget
// estimate's times (measured points, else the nearest stored mode's) at the power the
// board drew there, with the training minibatch set to saturatedTrainMS so that no plan
// fits training at the mode. It is never stored. Called with p.mu held.
func (p *LiveProfiler) saturatedEstimate(r Saturated, have map[store.Key]store.Profile, known []plan.ModeProfile) plan.ModeProfile {
	mp := p.estimate(r.Mode, r.PowerMW, have, known)
	train := plan.MaxLatencyMS
	if p.LatencyMS > 0 {
		train = min(2*p.LatencyMS, plan.MaxLatencyMS)
	}
	mp.Train.TimeMS = max(mp.Train.TimeMS, train)
	// Its training time is set on purpose (no plan fits training here) and its power was
	// not over a budget: a searcher's model may learn from it as before.
	mp.Estimated = false
	return mp
}

func (p *LiveProfiler) overKey() string {
	return "live-overbudget/" + p.board() + "/" + p.Pair.Train + ":" + p.Pair.Infer
}

func (p *LiveProfiler) loadOver() {
	if p.loaded {
		return
	}
	p.loaded = true
	p.over = map[powermode.Mode]OverBudget{}
	raw, err := p.Store.GetModel(p.overKey())
	if err != nil {
		return
	}
	var recs []OverBudget
	if err := json.Unmarshal(raw, &recs); err != nil {
		p.logger().Warn("ignoring an unreadable over-budget record", "key", p.overKey(), "err", err)
		return
	}
	for _, r := range recs {
		p.over[r.Mode] = r
	}
}

func (p *LiveProfiler) saveOver() error {
	recs := make([]OverBudget, 0, len(p.over))
	for _, r := range p.over {
		recs = append(recs, r)
	}
	slices.SortFunc(recs, func(a, b OverBudget) int { return a.At.Compare(b.At) })
	raw, err := json.Marshal(recs)
	if err != nil {
		return err
	}
	return p.Store.PutModel(p.overKey(), raw)
}

// OverBudgetModes returns the modes abandoned as over budget.
func (p *LiveProfiler) OverBudgetModes() []OverBudget {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loadOver()
	out := make([]OverBudget, 0, len(p.over))
	for _, r := range p.over {
		out = append(out, r)
	}
	return out
}

// Known implements search.Profiler: every stored complete profile of the pair, plus
// the estimated profiles of modes abandoned as over the present budget. A mode stored
// without one of the trainer's micro-batch sizes is not known: a searcher that visits
// it has Profile measure the missing sizes (docs/design.md §9 "Micro-batches profiled
// live") — unless each missing size is over the latency budget's room there (roomOn),
// when the mode is known with those sizes at their predicted turns (livemicro.go).
func (p *LiveProfiler) Known() []plan.ModeProfile {
	out, err := storedProfiles(p.Store, p.board(), p.Pair, p.roomOn())
	if err != nil {
		p.logger().Warn("reading stored profiles", "err", err)
	}
	var ratios, iratios map[sizePair]sizeRatio
	if p.roomOn() { // the room's fills and bounds need them; elsewhere bounds never hold
		ratios = p.microRatios()
	}
	if p.roomOn() || p.aloneOn() {
		iratios = p.inferRatios()
	}
	bounds := p.boundModes()
	kept := out[:0]
	for _, mp := range out {
		if bounds[mp.Mode] && !p.boundHolds(mp, ratios) {
			continue // its minibatch fits the room now: a visit measures it
		}
		if !p.roomOn() {
			if f, ok := p.inferFill(mp, iratios); ok && p.aloneOn() {
				mp = f // batches over the budget alone, at their predicted turns
			}
			kept = append(kept, mp)
		} else if mp, ok := p.roomFill(mp, ratios, iratios); ok {
			// A mode lacking only sizes over the room is known, at their predicted turns.
			kept = append(kept, mp)
		}
	}
	out = kept
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loadOver()
	// In a fixed order (a map's is random): a searcher's fits and ties depend on the
	// order of what it knows, and a re-search starts from these (issue 31).
	for _, m := range slices.SortedFunc(maps.Keys(p.over), compareModes) {
		r := p.over[m]
		if p.BudgetMW > 0 && r.PowerMW > p.BudgetMW && !slices.ContainsFunc(out, func(x plan.ModeProfile) bool { return x.Mode == m }) {
			out = append(out, p.estimate(m, r.PowerMW, nil, out))
		}
	}
	for _, r := range p.saturation().List() {
		if !slices.ContainsFunc(out, func(x plan.ModeProfile) bool { return x.Mode == r.Mode }) {
			out = append(out, p.saturatedEstimate(r, nil, out))
		}
	}
	return out
}

// compareModes orders modes by cores, CPU, GPU and EMC clock.
func compareModes(a, b powermode.Mode) int {
	return cmp.Or(cmp.Compare(a.Cores, b.Cores), cmp.Compare(a.CPUKHz, b.CPUKHz), cmp.Compare(a.GPUHz, b.GPUHz), cmp.Compare(a.EMCHz, b.EMCHz))
}

// StoredProfiles returns the complete profiles of pair on board: modes with a training
// profile at B_T and an inference profile at one or more of the batch sizes, in the
// store's order of the training profiles (plan.Assemble). The training points stored
// at any of pair.MicroBatches become each profile's Micro turns: a mode stored before
// the trainer declared them offers whole minibatches alone.
func StoredProfiles(st *store.Store, board string, pair Pair) ([]plan.ModeProfile, error) {
	return storedProfiles(st, board, pair, true)
}

// storedProfiles is StoredProfiles; without microOptional a mode is complete only with
// every one of pair.MicroBatches (what a searcher may take as known).
func storedProfiles(st *store.Store, board string, pair Pair, microOptional bool) ([]plan.ModeProfile, error) {
	tr, err := st.List(store.Filter{Board: board, Workload: pair.Train, Role: truth.Train})
	if err != nil {
		return nil, err
	}
	inf, err := st.List(store.Filter{Board: board, Workload: pair.Infer, Role: truth.Infer})
	if err != nil {
		return nil, err
	}
	var out []plan.ModeProfile
	sh := pair.shape()
	sh.MicroOptional = microOptional
	for _, mp := range plan.Assemble(sh, measured(tr, inf)) {
		out = append(out, plan.PairOf(mp))
	}
	return out, nil
}

// ErrNoWorker is returned when a workload of the pair has no live worker to profile on.
var ErrNoWorker = errors.New("no live worker")

func (p *LiveProfiler) worker(role, workload string) (string, error) {
	declined := false
	for _, w := range p.Sched.Snapshot().Workers {
		if w.Role == role && w.Workload == workload {
			if w.NoProfiles {
				declined = true
				continue
			}
			return w.ID, nil
		}
	}
	if declined {
		return "", fmt.Errorf("profile %s workload %s: %w", role, workload, sched.ErrProfilesDeclined)
	}
	return "", fmt.Errorf("profile %s workload %s: %w (start its worker, or profile offline with fulcrumctl profile)", role, workload, ErrNoWorker)
}

// Profile implements search.Profiler.
func (p *LiveProfiler) Profile(ctx context.Context, m powermode.Mode) (plan.ModeProfile, error) {
	if sp := p.Board.Space(); sp != nil && !sp.Contains(m) {
		return plan.ModeProfile{}, fmt.Errorf("mode %s is not one of the board's modes", m.Human())
	}
	o := p.Options.withDefaults()
	// What is stored already is never measured again, but for a point measured while
	// the board throttled, once the board runs cool (docs/profiler.md).
	have := map[store.Key]store.Profile{}
	keys := p.keys(m)
	var missing []store.Key
	absentOptional := 0 // missing micro-batch and inference points (never stored when over the room)
	cool := p.cool(ctx)
	for _, k := range keys {
		prof, err := p.Store.Get(k)
		switch {
		case err == nil && prof.Throttled != nil && cool:
			missing = append(missing, k)
		case err == nil:
			have[k] = prof
		case errors.Is(err, store.ErrNotFound):
			missing = append(missing, k)
			if k.MicroBatch > 0 || (k.Role == truth.Infer && (p.InferByRoom || p.aloneOn())) {
				absentOptional++
			}
		default:
			return plan.ModeProfile{}, err
		}
	}
	for k, prof := range have {
		if prof.Bound && !p.boundHolds(p.toModeProfile(m, have), p.microRatios()) {
			// A minibatch stored as a bound that fits the room now: measured for real.
			delete(have, k)
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 && absentOptional == len(missing) {
		// Only micro-batch sizes or inference batches are missing: when each is over
		// the room (or an inference batch over the budget alone), the visit would
		// measure nothing (livemicro.go).
		if mp, ok := p.fillAbsent(p.toModeProfile(m, have)); ok {
			p.mu.Lock()
			p.counts.FromStore++
			p.mu.Unlock()
			return mp, nil
		}
	}
	p.mu.Lock()
	p.loadOver()
	rec, over := p.over[m]
	budget := p.BudgetMW
	p.mu.Unlock()
	if len(missing) == 0 {
		p.mu.Lock()
		p.counts.FromStore++
		p.mu.Unlock()
		return p.toModeProfile(m, have), nil
	}
	if over && budget > 0 && rec.PowerMW > budget {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.counts.FromStore++
		return p.estimate(m, rec.PowerMW, have, nil), nil
	}
	p.mu.Lock()
	sat, saturated := p.saturation().get(m)
	p.mu.Unlock()
	if saturated {
		// Found saturated in this search (by this or another stream's profiler).
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.saturatedEstimate(sat, have, nil), nil
	}

	mp, measured, err := p.measureMode(ctx, m, keys, missing, have, o, budget, true)
	if err != nil {
		return plan.ModeProfile{}, err
	}
	if measured {
		p.mu.Lock()
		p.counts.Profiled++
		p.counts.Modes++ // a searcher never asks one profiler for a mode twice
		p.mu.Unlock()
	}
	return mp, nil
}

// Remeasure implements search.Remeasurer: it measures every point of a mode again, as
// Profile does, and returns this measurement alone. The store then holds, for each
// point, the combination of the repeats this profiler has taken (times pooled over
// their batches, powers averaged over their readings), replacing the first
// measurement: a searcher remeasures a mode because its first measurement looked good
// enough to claim, so keeping that one in would keep its optimism. A mode recorded as
// over the power budget is not measured; it answers with its estimate. If the guard
// trips while remeasuring, the mode is recorded as over budget and answers the same way.
func (p *LiveProfiler) Remeasure(ctx context.Context, m powermode.Mode) (plan.ModeProfile, error) {
	if sp := p.Board.Space(); sp != nil && !sp.Contains(m) {
		return plan.ModeProfile{}, fmt.Errorf("mode %s is not one of the board's modes", m.Human())
	}
	o := p.Options.withDefaults()
	keys := p.keys(m)
	p.mu.Lock()
	p.loadOver()
	rec, over := p.over[m]
	budget := p.BudgetMW
	p.mu.Unlock()
	if over && budget > 0 && rec.PowerMW > budget {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.estimate(m, rec.PowerMW, nil, nil), nil
	}
	p.mu.Lock()
	sat, saturated := p.saturation().get(m)
	p.mu.Unlock()
	if saturated {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.saturatedEstimate(sat, nil, nil), nil
	}
	// Start from what is stored so that the scheduler expects this mode's turn times
	// while it is measured; every point is then replaced by its fresh measurement.
	fresh := map[store.Key]store.Profile{}
	for _, k := range keys {
		switch prof, err := p.Store.Get(k); {
		case err == nil:
			fresh[k] = prof
		case !errors.Is(err, store.ErrNotFound):
			return plan.ModeProfile{}, err
		}
	}
	mp, measured, err := p.measureMode(ctx, m, keys, keys, fresh, o, budget, false)
	if err != nil || !measured {
		return mp, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.repeats == nil {
		p.repeats = map[store.Key][]store.Profile{}
	}
	for _, k := range keys {
		if _, ok := fresh[k]; !ok {
			continue // a micro-batch size over the room, not measured (livemicro.go)
		}
		p.repeats[k] = append(p.repeats[k], fresh[k])
		if err := p.Store.Put(combineRepeats(p.repeats[k]), store.Overwrite); err != nil {
			return plan.ModeProfile{}, fmt.Errorf("store the repeats of %s: %w", k, err)
		}
	}
	p.counts.Remeasured++
	p.logger().Info("measured a mode again", "mode", m.Human(), "repeats", len(p.repeats[keys[0]]), "train_ms", mp.Train.TimeMS)
	return mp, nil
}

// keys are the store keys of a mode's points for the pair.
func (p *LiveProfiler) keys(m powermode.Mode) []store.Key {
	board := p.board()
	var keys []store.Key
	if p.Only != truth.Infer {
		keys = append(keys, store.Key{Board: board, Workload: p.Pair.Train, Role: truth.Train, Mode: m, Batch: p.Pair.TrainBatch})
		// The micro-batch turns, measured in the same visit (one mode change, one
		// profile against a searcher's budget; docs/design.md §9).
		for _, mb := range p.Pair.MicroBatches {
			keys = append(keys, store.Key{Board: board, Workload: p.Pair.Train, Role: truth.Train, Mode: m, Batch: p.Pair.TrainBatch, MicroBatch: mb})
		}
	}
	if p.Only != truth.Train {
		for _, b := range p.Pair.Batches {
			keys = append(keys, store.Key{Board: board, Workload: p.Pair.Infer, Role: truth.Infer, Mode: m, Batch: b})
		}
	}
	return keys
}

// measureMode applies m between turns and measures the points todo through the
// workers' profile grants, adding each to have (and, with put, to the store). It
// returns the mode's profile from have; measured is false when the power guard
// abandoned the mode, which is then recorded as over budget and answered by its
// estimate.
func (p *LiveProfiler) measureMode(ctx context.Context, m powermode.Mode, keys, todo []store.Key, have map[store.Key]store.Profile, o LiveOptions, budget float64, put bool) (mp plan.ModeProfile, measured bool, err error) {
	trainID, err := p.worker(proto.RoleTrain, p.Pair.Train)
	if err != nil {
		return plan.ModeProfile{}, false, err
	}
	inferID, err := p.worker(proto.RoleInfer, p.Pair.Infer)
	if err != nil {
		return plan.ModeProfile{}, false, err
	}
	if err := p.Sched.BetweenTurns(ctx, func(ctx context.Context) error { return p.Board.Apply(ctx, m) }); err != nil {
		return plan.ModeProfile{}, false, fmt.Errorf("apply mode %s to profile it: %w", m.Human(), err)
	}
	// The scheduler's expected turn times describe the previous mode: replace them with
	// what is stored at this one and forget the rest (the warm-up batch measures them).
	trainTimes, inferTimes := map[int]time.Duration{}, map[int]time.Duration{}
	for k, prof := range have {
		if k.Role == truth.Train {
			trainTimes[k.Turn()] = msDur(prof.TimeMS.Mean) // a micro-batch's by its size
		} else {
			inferTimes[k.Batch] = msDur(prof.TimeMS.Mean)
		}
	}
	for id, times := range map[string]map[int]time.Duration{trainID: trainTimes, inferID: inferTimes} {
		if err := p.Sched.ExpectTimes(id, times); err != nil {
			return plan.ModeProfile{}, false, fmt.Errorf("profile mode %s: %w", m.Human(), err)
		}
	}
	// No training minibatches while the mode is measured: they would run between the
	// profile batches, and the board power read for a point is the mean over its
	// measurement (a 5 ms inference batch measured between 100 ms training minibatches
	// read 1.4–2.2× its power). Profile batches and real inference requests still run.
	if !p.Sched.Snapshot().TrainingPaused {
		p.Sched.SetTrainingPaused(true)
		defer p.Sched.SetTrainingPaused(false)
	}
	applied := p.clock().Now()
	p.logger().Info("profiling a mode live", "mode", m.Human(), "points", len(todo), "repeat", !put)
	room := p.roomOn()
	var ratios, iratios map[sizePair]sizeRatio
	if room {
		todo = orderTodo(todo)
		ratios = p.microRatios()
	}
	if room || p.aloneOn() {
		iratios = p.inferRatios()
	}
	overMicro := false // a micro-batch size was left out as over the room
	// The training turns measured in this visit whose power the sensor read alone, by
	// turn size: the floor of the power of a longer turn it cannot read.
	readable := map[int]float64{}
	for _, k := range todo {
		id := inferID
		if k.Role == truth.Train {
			id = trainID
		}
		rule := o.rule()
		if k.Role == truth.Infer && p.inferOverBudget(k.Batch, p.toModeProfile(m, have).Infer, iratios) {
			delete(have, k) // a repeat's stored value is not measured again
			p.logger().Info("not profiling an inference batch that alone takes longer than the latency budget", "mode", m.Human(), "point", k.String())
			continue
		}
		if room && p.InferByRoom && k.Role == truth.Infer {
			if at := p.toModeProfile(m, have); p.inferOverRoom(k.Batch, at, iratios) {
				delete(have, k) // a repeat's stored value is not measured again
				p.logger().Info("not profiling an inference batch over the latency budget's room", "mode", m.Human(), "point", k.String())
				continue
			}
		}
		if room && k.Role == truth.Train {
			// The training turns measured so far at this mode (a repeat's stored ones
			// are this mode's too), below this one.
			at := p.toModeProfile(m, have)
			pts := map[int]plan.TrainPoint{}
			for s, t := range trainPoints(at) {
				if s < k.Turn() {
					pts[s] = t
				}
			}
			over := overMicro || p.turnOverRoom(k.Turn(), pts, shortestInfer(at.Infer), ratios)
			switch {
			case over && k.MicroBatch > 0:
				overMicro = true
				delete(have, k) // a repeat's stored value is not measured again
				p.logger().Info("not profiling a micro-batch size over the latency budget's room", "mode", m.Human(), "point", k.String())
				continue
			case over:
				// The whole minibatch over the room: its batches would only make
				// requests late, and no decision beside this budget runs it.
				if b, ok := p.boundMinibatch(k, pts, readable, ratios); ok {
					if put {
						if err := p.Store.Put(b, store.Overwrite); err != nil {
							return plan.ModeProfile{}, false, fmt.Errorf("store the bound of %s: %w", k, err)
						}
					}
					have[k] = b
					p.mu.Lock()
					p.counts.Bound++
					p.mu.Unlock()
					p.logger().Info("not profiling the whole minibatch over the latency budget's room: stored as a bound from its micro-batch turns", "mode", m.Human(), "point", k.String(), "time_ms", b.TimeMS.Mean)
					continue
				}
			}
		}
		floor := 0.0
		if room && k.Role == truth.Train && rule.MinTime > 0 {
			// A turn that fits the room runs back to back: long enough for readings that
			// show it alone (sensorPower). Where the room is not judged (several streams
			// or jobs, no micro-batches, no latency budget) a turn may wait for gaps in
			// the arrivals one batch at a time, and a longer measurement only waits longer.
			rule.MinTime = max(rule.MinTime, o.trainReadTime())
		}
		if k.Role == truth.Train {
			// A training turn draws at least what a smaller one at this mode drew (a bigger
			// batch keeps the GPU busier): the floor of a turn the sensor cannot read.
			for turn, mw := range readable {
				if turn < k.Turn() {
					floor = max(floor, mw)
				}
			}
		}
		prof, read, avg, err := p.measure(ctx, k, id, rule, applied, budget, put, floor)
		if errors.Is(err, errOverBudget) {
			p.mu.Lock()
			rec := OverBudget{Mode: m, PowerMW: avg, BudgetMW: budget, At: p.clock().Now().UTC()}
			p.over[m] = rec
			if err := p.saveOver(); err != nil {
				p.logger().Warn("could not persist the over-budget record", "mode", m.String(), "err", err)
			}
			p.counts.Abandoned++
			est := p.estimate(m, avg, have, nil)
			p.mu.Unlock()
			p.logger().Warn("abandoned profiling a mode: the board's 1 s average power went over the budget", "mode", m.Human(), "power_mw", avg, "budget_mw", budget)
			if p.OnProfile != nil {
				p.OnProfile(m, est, &rec)
			}
			return est, false, nil
		}
		if errors.Is(err, sched.ErrProfileCrowdedOut) {
			est, rec := p.abandonSaturated(ctx, m, k, o, applied, have)
			if p.OnSaturated != nil {
				p.OnSaturated(m, est, rec)
			}
			return est, false, nil
		}
		if err != nil {
			return plan.ModeProfile{}, false, err
		}
		have[k] = prof
		if read && k.Role == truth.Train {
			readable[k.Turn()] = prof.PowerMW.Mean
		}
		p.mu.Lock()
		p.counts.Points++
		p.mu.Unlock()
	}
	mp = p.toModeProfile(m, have)
	if room {
		mp, _ = p.roomFill(mp, ratios, iratios) // the sizes left out, at their predicted turns
	} else if f, ok := p.inferFill(mp, iratios); ok && p.aloneOn() {
		mp = f
	}
	if p.OnProfile != nil && put { // a repeat is counted (Counts.Remeasured), not announced
		p.OnProfile(m, mp, nil)
	}
	return mp, true, nil
}

var errOverBudget = errors.New("power over budget")

// abandonSaturated records m as saturated after the scheduler refused the profile batch
// of point k there, and returns the estimate m answers with. A mode where inference alone
// keeps a request queued for profileCrowdFactor × ProfileWait leaves training no room
// within the latency budget: measuring it would cost deadlines and could not give a
// usable plan (docs/controller.md "Saturated modes").
func (p *LiveProfiler) abandonSaturated(ctx context.Context, m powermode.Mode, k store.Key, o LiveOptions, applied time.Time, have map[store.Key]store.Profile) (plan.ModeProfile, Saturated) {
	now := p.clock().Now()
	pw, n := p.Power.Mean(maxTime(applied.Add(o.PowerSettle), now.Add(-o.PowerWindow)), now)
	if n == 0 {
		if r, err := p.Board.Power(ctx); err == nil {
			pw = r.TotalMW
		}
	}
	rec := Saturated{Mode: m, Point: k.String(), PowerMW: pw, At: now.UTC()}
	p.mu.Lock()
	p.saturation().add(rec)
	p.counts.Saturated++
	est := p.saturatedEstimate(rec, have, nil)
	p.mu.Unlock()
	p.logger().Warn("abandoned profiling a mode: inference requests stayed queued the whole time a profile batch waited (inference alone saturates the GPU there; over the latency budget with any training)",
		"mode", m.Human(), "point", k.String(), "power_mw", pw)
	return est, rec
}

// heat reads the board's heat where it can (false: it cannot, or the read failed).
func (p *LiveProfiler) heat(ctx context.Context) (powermode.HeatReading, bool) {
	hs, ok := p.Board.(powermode.HeatSensor)
	if !ok {
		return powermode.HeatReading{}, false
	}
	h, err := hs.Heat(ctx)
	return h, err == nil
}

// cool says the board reads as not throttling now (a board without heat sensors never
// marks a profile throttled, so the answer does not matter there).
func (p *LiveProfiler) cool(ctx context.Context) bool {
	h, ok := p.heat(ctx)
	return ok && !h.Throttled
}

// minBatchReadings is how many in-batch power readings a point needs for its power to be
// their mean rather than the mean over the whole measurement.
const minBatchReadings = 3

// sensorCover is the least share of the sensor window before a reading that the point's
// measured batches must have run for the reading to count as theirs alone: inference
// requests served between them (up to ~17 % of the GPU at 30 req/s of 5.8 ms batches)
// still let it count, batches waiting for gaps in the arrivals do not.
const sensorCover = 0.8

// trainReadTime is how long a training point that fits the latency budget's room is
// measured at least: a sensorWindow to fill the sensor's window, then room for
// minBatchReadings readings at a tenth of it (the controller samples every 100 ms, a
// tenth of the default window): 1.4 s by default.
func (o LiveOptions) trainReadTime() time.Duration {
	w := o.sensorWindow()
	return w + time.Duration(minBatchReadings+1)*w/10
}

// sensorPower is a training point's power from the readings taken in [from, to] (the
// controller's PowerMonitor) that show its measured batches nearly alone: a reading
// averages about the sensorWindow before it, and counts when the batches ran for at
// least sensorCover of that window (on a 10 ms grid). It is Σ reading / Σ cover over
// them, n their number; n is 0 when fewer than minBatchReadings count. Dividing by the
// cover counts what ran in the gaps (inference requests, idle) as the point's own, so it
// errs high by at most (1 − c)/c of the gaps' power — a few per cent — rather than low
// by their share.
func (m *liveMeter) sensorPower(from, to time.Time) (mw float64, n int) {
	const step = 10 * time.Millisecond
	window := m.o.sensorWindow()
	if len(m.ran) == 0 || window <= 0 {
		return 0, 0
	}
	var sum, cover float64
	for t := from; t.Before(to); t = t.Add(step) {
		r, k := m.p.Power.Mean(t, minTime(t.Add(step-time.Nanosecond), to))
		if k == 0 {
			continue
		}
		at := t.Add(step / 2)
		w0 := at.Add(-window)
		var ran time.Duration
		for _, iv := range m.ran {
			if a, b := maxTime(iv.From, w0), minTime(iv.To, at); b.After(a) {
				ran += b.Sub(a)
			}
		}
		if c := float64(ran) / float64(window); c >= sensorCover {
			sum, cover, n = sum+r*float64(k), cover+c*float64(k), n+k
		}
	}
	if n < minBatchReadings {
		return 0, 0
	}
	return sum / cover, n
}

// rule is the stopping rule of a live point (measure.Rule, the offline profiler's rule):
// no warm-up time, since PowerSettle leaves the readings of the mode change out instead;
// MinTime so that the controller's sampler, reading at its own period, reads each point;
// the precision wait only where MaxSamples is above Samples (off by default).
func (o LiveOptions) rule() measure.Rule {
	return measure.Rule{Warmup: o.Warmup, MinSamples: o.Samples, MinTime: o.MinTime, TargetRSE: o.TargetRSE, MaxSamples: max(o.MaxSamples, o.Samples)}
}

// measure profiles one point through the shared measurement loop (profiler/measure):
// warm-up profile batches, then measured ones until the stopping rule holds; power from
// the controller's readings (liveMeter, which also runs the power guard after every
// batch); with put, it stores the profile. read says that its power came from readings
// that show its batches alone (liveMeter.Stop); where they did not, a power under floorMW
// (a smaller training turn's at the mode, read alone; 0: none) is raised to it. When the
// guard trips it returns errOverBudget and the average that broke the budget.
func (p *LiveProfiler) measure(ctx context.Context, k store.Key, workerID string, rule measure.Rule, applied time.Time, budgetMW float64, put bool, floorMW float64) (prof store.Profile, read bool, overMW float64, err error) {
	o := p.Options.withDefaults()
	size := k.Turn() // a micro-batch turn runs its own samples
	meter := &liveMeter{p: p, o: o, k: k, applied: applied, budgetMW: budgetMW}
	// A batch far faster than the workload's real ones ran nothing real: discarded.
	ref, frac := p.discardRef(k, applied)
	discarded, fastest := 0, math.Inf(1)
	defer func() {
		if discarded > 0 {
			p.mu.Lock()
			p.counts.Discarded += discarded
			p.mu.Unlock()
			p.logger().Warn("discarded profile batches faster than a fifth of the workload's real batches", "point", k.String(),
				"discarded", discarded, "fastest_ms", fastest, "real_ms", ref)
			if p.OnDiscard != nil {
				p.OnDiscard(k, discarded, fastest, ref)
			}
		}
	}()
	loop := measure.Loop{Rule: rule, Clock: p.clock(), Meter: meter, Discard: func(d time.Duration, kept int) (bool, error) {
		ms := float64(d) / float64(time.Millisecond)
		if ref <= 0 || ms >= frac*ref {
			return false, nil
		}
		discarded++
		fastest = min(fastest, ms)
		if discarded >= 2*o.Samples && discarded > kept {
			return true, fmt.Errorf("%d profile batches took under %.0f%% of the workload's real batches (fastest %.3f ms, real %.1f ms): "+
				"its on_profile handler does not run a real batch of that size; fix it, or set none so that the worker declines profile batches", discarded, 100*frac, fastest, ref)
		}
		return true, nil
	}}
	res, err := loop.Run(ctx, func(ctx context.Context) (time.Duration, error) { return p.Sched.Profile(ctx, workerID, size) })
	if errors.Is(err, errOverBudget) {
		return store.Profile{}, false, meter.overMW, errOverBudget
	}
	if err != nil {
		return store.Profile{}, false, 0, fmt.Errorf("profile %s: %w", k, err)
	}
	prof = res.Profile(k, store.SourceLive)
	switch {
	case meter.read:
	case floorMW > 0 && prof.PowerMW.Mean < floorMW:
		p.logger().Info("a training turn the power sensor could not read alone takes a smaller turn's power at the mode as its floor",
			"point", k.String(), "read_mw", prof.PowerMW.Mean, "floor_mw", floorMW)
		prof.PowerMW.Mean = floorMW
	}
	if !put {
		return prof, meter.read, 0, nil
	}
	err = p.Store.Put(prof)
	if errors.Is(err, store.ErrExists) {
		// A cool measurement replaces one taken while the board throttled (Profile
		// measures such a point again once the board runs cool), any measurement a bound
		// (store.Profile.Bound); nothing else is lost.
		if old, gerr := p.Store.Get(k); gerr == nil && (old.Bound || (old.Throttled != nil && prof.Throttled == nil)) {
			err = p.Store.Put(prof, store.Overwrite)
		}
	}
	if err != nil && !errors.Is(err, store.ErrExists) {
		return store.Profile{}, false, 0, fmt.Errorf("store live profile %s: %w", k, err)
	}
	return prof, meter.read, 0, nil
}

// liveMeter is the live profiler's measure.Meter: a point's power from the controller's
// board readings (PowerMonitor), its throttling from a heat reading after every measured
// batch, and the power guard after every batch, warm-up or measured (the average of the
// readings since the mode was applied, over the last PowerWindow).
type liveMeter struct {
	p        *LiveProfiler
	o        LiveOptions
	k        store.Key
	applied  time.Time
	budgetMW float64

	batches   []Interval // when readings show a measured batch alone
	ran       []Interval // when each measured batch ran
	throttled *store.Throttled
	overMW    float64 // the average that tripped the guard
	read      bool    // Stop took the power from readings of the batches alone (sensorPower)
}

// Ran implements measure.Meter.
func (m *liveMeter) Ran(ctx context.Context, b measure.Ran) error {
	if !b.Warmup {
		if h, ok := m.p.heat(ctx); ok {
			m.throttled = store.NoteHeat(m.throttled, h)
		}
		m.batches = append(m.batches, Interval{From: b.At.Add(-b.Took + m.o.SensorLag), To: b.At})
		m.ran = append(m.ran, Interval{From: b.At.Add(-b.Took), To: b.At})
	}
	if m.budgetMW <= 0 {
		return nil
	}
	now := m.p.clock().Now()
	from := now.Add(-m.o.PowerWindow)
	if settled := m.applied.Add(m.o.PowerSettle); from.Before(settled) {
		from = settled
	}
	if avg, n := m.p.Power.Mean(from, now); n > 0 && avg > m.budgetMW {
		m.overMW = avg
		return errOverBudget
	}
	return nil
}

// Start implements measure.Meter: the controller's sampler reads all along.
func (m *liveMeter) Start(context.Context, time.Time) {}

// Stop implements measure.Meter.
func (m *liveMeter) Stop(ctx context.Context, s measure.Span) (measure.Power, error) {
	if s.Err != nil {
		return measure.Power{}, nil
	}
	o := m.o
	// Readings in the first SensorLag of a point still show the point before it (the
	// training point's power read into the first inference point's: 1.4× its power).
	from := s.Start
	if lagged := s.Start.Add(o.SensorLag); lagged.Before(s.End) {
		from = lagged
	}
	settled := m.applied.Add(o.PowerSettle)
	if from.Before(settled) && settled.Before(s.End) {
		from = settled
	}
	// Readings taken while a measured batch ran (and had run for the sensor's lag) are
	// its power. Between batches the GPU serves inference requests, or idles while a
	// batch longer than the requests' slack waits for its turn: averaging over the whole
	// measurement read a 214 ms training minibatch at 0.55–0.6 of its power. Batches too
	// short to be caught by enough readings fall back to the whole measurement.
	for i := range m.batches {
		if m.batches[i].From.Before(settled) {
			m.batches[i].From = settled
		}
	}
	// First, the readings whose whole sensor window the measured batches filled: a
	// reading averages the last sensorWindow or so, and a batch shorter than that (a
	// micro-batch turn of 16–60 ms, or batches waiting for gaps in the arrivals) is read
	// mixed with whatever ran around it. Measured on the lifetime board (500 ms physics
	// step): the per-batch rule below stored training turns at 0.24–0.69 of their true
	// power, and plans from them drew 1.5–4× their prediction (docs/benchmarks.md
	// "After-plan breaks").
	if m.k.Role == truth.Train {
		if mw, k := m.sensorPower(maxTime(settled, s.Start), s.End); k > 0 {
			m.read = true
			return measure.Power{MeanMW: mw, Readings: k, Throttled: m.throttled}, nil
		}
	}
	pw, n := m.p.Power.MeanIn(m.batches)
	if n < minBatchReadings {
		pw, n = m.p.Power.Mean(from, s.End)
	}
	if n == 0 {
		// Too short for the sampler: read once now (the board still runs this mode).
		r, err := m.p.Board.Power(ctx)
		if err != nil {
			return measure.Power{}, fmt.Errorf("no power reading: %w (check fulcrumctl board power)", err)
		}
		pw, n = r.TotalMW, 1
	}
	return measure.Power{MeanMW: pw, Readings: n, Throttled: m.throttled}, nil
}

// combineRepeats pools repeat measurements of one point: the time statistics as
// stats.Pool gives them (mean and standard deviation over all their batches, p50/p95
// the batch-weighted mean of theirs: the batches themselves are not kept), the power
// mean over all their readings.
func combineRepeats(reps []store.Profile) store.Profile {
	if real := slices.DeleteFunc(slices.Clone(reps), func(r store.Profile) bool { return r.Bound }); len(real) > 0 {
		reps = real // a measurement replaces bounds (store.Profile.Bound), never pools with them
	}
	out := reps[0]
	parts := make([]stats.Summary, 0, len(reps))
	var np int
	var sumP float64
	for _, r := range reps {
		parts = append(parts, stats.Summary{N: r.Samples, Mean: r.TimeMS.Mean, Stddev: r.TimeMS.Stddev, P50: r.TimeMS.P50, P95: r.TimeMS.P95})
		np += r.PowerSamples
		sumP += r.PowerMW.Mean * float64(r.PowerSamples)
		out.StartedAt = minTime(out.StartedAt, r.StartedAt)
		out.FinishedAt = maxTime(out.FinishedAt, r.FinishedAt)
	}
	t := stats.Pool(parts)
	out.TimeMS = store.TimeStats{Mean: t.Mean, P50: t.P50, P95: t.P95, Stddev: t.Stddev}
	if np > 0 {
		out.PowerMW.Mean = sumP / float64(np)
	}
	out.Samples, out.PowerSamples = t.N, np
	out.Repeats = len(reps)
	out.Throttled = pooledThrottle(reps)
	out.RSE = 0 // the store holds no +Inf: 0 is "no estimate"
	if rse := stats.RSE(t.N, t.Mean, t.Stddev); !math.IsInf(rse, 1) {
		out.RSE = rse
	}
	return out
}

// pooledThrottle is the throttling of pooled repeats: throttled when any was, with
// every throttled reading counted and the slowest clocks seen.
func pooledThrottle(reps []store.Profile) *store.Throttled {
	var out *store.Throttled
	for _, r := range reps {
		t := r.Throttled
		if t == nil {
			continue
		}
		if out == nil {
			c := *t
			out = &c
			continue
		}
		out.Readings += t.Readings
		out.GPUHzMin = min(out.GPUHzMin, t.GPUHzMin)
		if t.CPUKHzMin > 0 && (out.CPUKHzMin == 0 || t.CPUKHzMin < out.CPUKHzMin) {
			out.CPUKHzMin = t.CPUKHzMin
		}
	}
	return out
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// toModeProfile assembles the profile of m for the pair (its Only role alone, if set)
// from the points measured or read (plan.AssembleMode).
func (p *LiveProfiler) toModeProfile(m powermode.Mode, have map[store.Key]store.Profile) plan.ModeProfile {
	sh := p.Pair.shape()
	switch p.Only {
	case truth.Train:
		sh.Infer = nil
	case truth.Infer:
		sh.Train = nil
	}
	ps := make([]store.Profile, 0, len(have))
	for _, x := range have {
		ps = append(ps, x)
	}
	mp, _ := plan.AssembleMode(sh, m, measured(ps))
	return plan.PairOf(mp)
}

// shape is what a pair's profile is assembled from (plan.Assemble).
func (pr Pair) shape() plan.Shape {
	sh := plan.PairShape(pr.Train, pr.TrainBatch, pr.Infer, pr.Batches)
	sh.Train[0].Micro = pr.MicroBatches
	return sh
}

// measured is stored profiles as the points plan.Assemble puts together.
func measured(lists ...[]store.Profile) []plan.Measured {
	var out []plan.Measured
	for _, ps := range lists {
		for _, x := range ps {
			out = append(out, plan.Measured{Row: x.Row(), Repeats: x.Repeats})
		}
	}
	return out
}

// estimate builds the profile an abandoned mode answers with (Estimated: its times are
// borrowed, so that GMD leaves it out of its fit): every power at what the
// board drew there (over the budget, so the planner and searchers see it infeasible);
// times as measured where a point was, else from the stored profile of the nearest
// mode scaled by the training-time ratio, else proportional to the batch. It is never
// stored. Called with p.mu held.
func (p *LiveProfiler) estimate(m powermode.Mode, powerMW float64, have map[store.Key]store.Profile, known []plan.ModeProfile) plan.ModeProfile {
	if known == nil {
		var err error
		if known, err = StoredProfiles(p.Store, p.board(), p.Pair); err != nil {
			p.logger().Warn("reading stored profiles", "err", err)
		}
	}
	var near *plan.ModeProfile
	best := math.Inf(1)
	for i := range known {
		if known[i].Mode == m {
			continue
		}
		if d := modeDistance(known[i].Mode, m); d < best {
			best, near = d, &known[i]
		}
	}
	board := p.board()
	mp := plan.ModeProfile{Mode: m, Train: plan.TrainPoint{Batch: p.Pair.TrainBatch, PowerMW: powerMW}, Estimated: true}
	tk := store.Key{Board: board, Workload: p.Pair.Train, Role: truth.Train, Mode: m, Batch: p.Pair.TrainBatch}
	ratio := 1.0
	switch x, ok := have[tk]; {
	case ok:
		mp.Train.TimeMS = x.TimeMS.Mean
		if near != nil {
			ratio = x.TimeMS.Mean / near.Train.TimeMS
		}
	case near != nil:
		mp.Train.TimeMS = near.Train.TimeMS
	default:
		mp.Train.TimeMS = 100
	}
	for _, b := range p.Pair.Batches {
		ip := plan.InferPoint{Batch: b, PowerMW: powerMW}
		k := store.Key{Board: board, Workload: p.Pair.Infer, Role: truth.Infer, Mode: m, Batch: b}
		if x, ok := have[k]; ok {
			ip.TimeMS = x.TimeMS.Mean
		} else if i := nearIdx(near, b); i >= 0 {
			ip.TimeMS = near.Infer[i].TimeMS * ratio
		} else {
			ip.TimeMS = mp.Train.TimeMS * float64(b) / float64(max(p.Pair.TrainBatch, 1))
		}
		mp.Infer = append(mp.Infer, ip)
	}
	return mp
}

func nearIdx(mp *plan.ModeProfile, b int) int {
	if mp == nil {
		return -1
	}
	return slices.IndexFunc(mp.Infer, func(ip plan.InferPoint) bool { return ip.Batch == b })
}

// modeDistance is a scale-free distance between modes (sum of absolute log ratios).
func modeDistance(a, b powermode.Mode) float64 {
	l := func(x, y float64) float64 { return math.Abs(math.Log(x / y)) }
	return l(float64(a.Cores), float64(b.Cores)) + l(float64(a.CPUKHz), float64(b.CPUKHz)) +
		l(float64(a.GPUHz), float64(b.GPUHz)) + l(float64(a.EMCHz), float64(b.EMCHz))
}
