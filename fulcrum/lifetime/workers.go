package lifetime

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/internal/stats"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/powermode/tegra"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// The simulated workers run in process on the virtual clock: they call the scheduler's
// own worker API (Register, Arrivals, Acquire, Release: what fulcrumd's socket server
// calls for a connected worker) and end each turn with a timer of the modeled time. They
// never block, so they need no participant: a grant is delivered (from whoever called
// the scheduler), the worker marks the GPU busy for the board's physics and sets a timer;
// the timer releases the turn and asks for the next one.

// gpu is what the workers know of the board: the clocks it runs at (re-read from the
// simulated tree after each mode change, as the simulator's Runner reads them) and what
// ran on it since the physics' last step, with each minibatch's share of that step
// (sim.Options.Activities): the step's power is the time-weighted mean, as an INA3221
// averaging over the step would read it, however long the step.
type gpu struct {
	now    func() time.Time
	truth  *truth.Table // answers times and power when set (Scenario.Truth)
	runner *sim.Runner
	hw     sim.Hardware
	mode   powermode.Mode
	stale  bool
	tau    map[tauKey]float64 // s, noise-free, by workload, batch and mode

	running  *sim.Activity // the minibatch on the GPU now (nil: idle)
	since    time.Time     // when running started, or the last step if later
	lastStep time.Time
	busy     []sim.Activity // what ran since the last step; Share holds seconds until activities
}

type tauKey struct {
	w     string
	batch int
	m     powermode.Mode
}

// clocks is the mode a minibatch starting now runs at.
func (g *gpu) clocks() (powermode.Mode, error) {
	if g.stale {
		m, err := g.runner.Clocks()
		if err != nil {
			return powermode.Mode{}, fmt.Errorf("read the simulated board's clocks: %w", err)
		}
		g.mode, g.stale = m, false
	}
	return g.mode, nil
}

// turnTime is one minibatch of w at batch: the model's time at the running clocks times
// a log-normal noise factor of sigma noise drawn from rng.
func (g *gpu) turnTime(w *sim.Workload, batch int, rng *rand.Rand, noise float64) (time.Duration, error) {
	m, err := g.clocks()
	if err != nil {
		return 0, err
	}
	k := tauKey{w.Name, batch, m}
	sec, ok := g.tau[k]
	if !ok {
		if g.truth != nil {
			r, found := g.truth.LookupBetween(truthKey(w, w.Role, m, batch))
			if !found {
				return 0, fmt.Errorf("the truth table has no row for %s %s at %s batch %d (the run moved the board where the table has no answer; give a table covering the board's whole mode space)", w.Name, w.Role, m, batch)
			}
			sec = r.TimeMS / 1000
		} else {
			sec = w.Time(&g.hw, m, batch).TotalSec
		}
		g.tau[k] = sec
	}
	return max(time.Duration(sec*sim.NoisyFactor(rng, noise)*float64(time.Second)), time.Microsecond), nil
}

func (g *gpu) start(w *sim.Workload, role string, batch int) {
	g.running = &sim.Activity{Workload: w.Name, Role: role, Batch: batch, PID: 1}
	g.since = g.now()
}

func (g *gpu) stop() {
	g.account(g.now())
	g.running = nil
}

// account adds the running minibatch's time up to now to busy.
func (g *gpu) account(now time.Time) {
	if g.running == nil {
		return
	}
	sec := now.Sub(g.since).Seconds()
	g.since = now
	for i := range g.busy {
		a := &g.busy[i]
		if a.Workload == g.running.Workload && a.Role == g.running.Role && a.Batch == g.running.Batch {
			a.Share += sec
			return
		}
	}
	a := *g.running
	a.Share = sec
	g.busy = append(g.busy, a)
}

// activities is the board's view of the step ending now (sim.Options.Activities): every
// minibatch that ran since the last step with its share of it.
func (g *gpu) activities() []sim.Activity {
	now := g.now()
	g.account(now)
	step := now.Sub(g.lastStep).Seconds()
	g.lastStep = now
	out := g.busy[:0]
	for _, a := range g.busy {
		if step > 0 && a.Share > 0 {
			a.Share = min(a.Share/step, 1)
			out = append(out, a)
		}
	}
	res := slices.Clone(out)
	g.busy = g.busy[:0]
	return res
}

// worker is one simulated worker, training or inference.
type worker struct {
	h     *harness
	id    string
	role  string
	w     *sim.Workload
	batch int
	rng   *rand.Rand
	tail  *tail // heavy-tailed turn times (Scenario.Tail); nil: none
	spec  sched.WorkerSpec
	seq   uint64

	// training
	samples    float64
	acc        int // samples of the minibatch in progress run as micro-batches
	microTurns int
	trained    []trainedTurn
	// inference
	stream   int
	arrived  map[string]time.Time
	next     int
	rateRPS  float64
	budget   time.Duration
	latMS    []float64
	latAt    []time.Time // each served request's arrival
	latLate  []bool      // each served request's: over the budget in force when it was served
	latEnd   []time.Time // and its release (the scheduler's window holds it from then)
	recentAt int         // the first of them in the recent window at the last sample
	late     int
	refused  int
	requests int
	profiles int
	batches  int
}

// trainedTurn is a training turn's end and samples (Result.TrainSamplesAfterPlan).
type trainedTurn struct {
	at      time.Time
	samples int
}

// microSizes are the micro-batches a training worker of minibatch batch declares under
// Scenario.MicroBatches: its divisors below it down to batch/8.
func microSizes(batch int) []int {
	var out []int
	for m := max(batch/8, 1); m < batch; m++ {
		if batch%m == 0 {
			out = append(out, m)
		}
	}
	return out
}

// truthMicroSizes are the micro-batches a training worker of minibatch batch declares
// under Scenario.MicroBatches with a truth table: the sizes the table has micro_batch
// rows for at every mode where it has the minibatch (as bench's truth of the pair reads
// them, truthprof.NewPairTruth), so that every micro-batch turn the run grants has a row
// and the run and its denominator choose among the same turns. Sizes the scheduler would
// refuse (not dividing the minibatch) are left out.
func truthMicroSizes(t *truth.Table, workload string, batch int) []int {
	var modes []powermode.Mode
	have := map[powermode.Mode]map[int]bool{}
	for _, r := range t.Rows {
		if r.Role != truth.Train || r.Workload != workload || r.Batch != batch {
			continue
		}
		if r.MicroBatch == 0 {
			modes = append(modes, r.Mode)
			continue
		}
		if have[r.Mode] == nil {
			have[r.Mode] = map[int]bool{}
		}
		have[r.Mode][r.MicroBatch] = true
	}
	out := slices.DeleteFunc(t.MicroBatches(workload, batch), func(mb int) bool {
		if mb >= batch || batch%mb != 0 {
			return true
		}
		for _, m := range modes {
			if !have[m][mb] {
				return true
			}
		}
		return false
	})
	if len(out) > proto.MaxMicroBatches {
		out = out[len(out)-proto.MaxMicroBatches:] // the largest: the cheapest turns to hand over
	}
	return out
}

// truthKey is the table row a turn of w at batch answers from: a training turn below
// w's minibatch is a micro-batch turn of it (the table's micro_batch row), anything else
// the row at batch.
func truthKey(w *sim.Workload, role truth.Role, m powermode.Mode, batch int) truth.Key {
	k := truth.Key{Workload: w.Name, Role: role, Mode: m, Batch: batch}
	if role == truth.Train && batch < w.Batch {
		k.Batch, k.MicroBatch = w.Batch, batch
	}
	return k
}

func (h *harness) register(role string, w *sim.Workload, batch int, sizes, micro []int, seed uint64) (*worker, error) {
	wk := &worker{h: h, role: role, w: w, batch: batch, rng: rand.New(rand.NewPCG(uint64(h.sc.Seed), seed)), arrived: map[string]time.Time{}}
	// Each worker is its own process (the scheduler's probation after a turn taken back
	// is per process).
	wk.spec = sched.WorkerSpec{Role: role, Workload: w.Name, Batch: batch, BatchSizes: sizes, MicroBatches: micro, PID: int(seed)}
	id, _, err := h.sched.Register(wk.spec, wk.deliver)
	if err != nil {
		return nil, fmt.Errorf("register the simulated %s worker %s: %w", role, w.Name, err)
	}
	wk.id = id
	if wk.tail, err = newTail(h.sc.Tail, role, h.sc.Seed, seed); err != nil {
		return nil, err
	}
	return wk, nil
}

// acquire asks for the next turn.
func (wk *worker) acquire() {
	wk.seq++
	if err := wk.h.sched.Acquire(wk.id, wk.seq); err != nil {
		wk.h.fail(fmt.Errorf("%s acquire: %w", wk.w.Name, err))
	}
}

// deliver runs the granted minibatch: the board sees it busy until the timer of its
// modeled time releases it. Called without the scheduler's lock (sched.Deliver).
func (wk *worker) deliver(g sched.Grant) {
	h := wk.h
	if h.stopped {
		return
	}
	// A micro-batch grant (issue 32) runs micro_batch samples, one of k turns of the
	// minibatch (gradient accumulation), timed by the model's batch curve at that size
	// (sim.Workload.Time, what the real-time simulated worker's sim.Runner runs), or with
	// a truth table by its micro_batch row (truthKey).
	micro := g.Kind == proto.KindTrain && g.MicroBatch > 0 && g.MicroBatch < g.Batch
	n := g.Batch
	if micro {
		n = g.MicroBatch
	}
	tau, err := h.gpu.turnTime(wk.w, n, wk.rng, h.sc.NoiseFrac)
	if err != nil {
		h.fail(err)
		return
	}
	tau = wk.tail.stretch(tau)
	h.gpu.start(wk.w, wk.role, n)
	h.clock.AfterFunc(tau, func() {
		h.gpu.stop()
		if h.stopped {
			return
		}
		now := h.clock.Now()
		samples := 0
		switch g.Kind {
		case proto.KindProfile:
			wk.profiles++
		case proto.KindTrain:
			samples = n
			wk.samples += float64(n)
			wk.trained = append(wk.trained, trainedTurn{at: now, samples: n})
			if micro {
				// The minibatch counts once, after its last micro-batch.
				wk.microTurns++
				if wk.acc += n; wk.acc >= g.Batch {
					wk.acc = 0
					wk.batches++
				}
			} else {
				wk.acc = 0
				wk.batches++
			}
		case proto.KindInfer:
			wk.batches++
			for _, id := range g.RequestIDs {
				if at, ok := wk.arrived[id]; ok {
					delete(wk.arrived, id)
					l := now.Sub(at)
					wk.latMS = append(wk.latMS, float64(l)/float64(time.Millisecond))
					wk.latAt = append(wk.latAt, at)
					wk.latEnd = append(wk.latEnd, now)
					wk.latLate = append(wk.latLate, l > wk.budget)
					if l > wk.budget {
						wk.late++
					}
				}
			}
		}
		if err := h.sched.Release(wk.id, sched.Release{Grant: g.ID, Duration: tau, Samples: samples}); err != nil {
			if pe, ok := err.(*proto.Error); ok && pe.Code == proto.CodeTurnExpired {
				// Held past the hold limit (a heavy tail can): fulcrumd took the turn back and
				// dropped the worker; a real one reconnects and registers again.
				h.res.HoldExpired++
				wk.reregister()
				return
			}
			h.fail(fmt.Errorf("%s release of grant %d: %w", wk.w.Name, g.ID, err))
		}
		wk.acquire()
	})
}

// reregister is the worker reconnecting after fulcrumd dropped it: registered again
// under a new id (the requests it had queued are lost, as with a real worker), then it
// asks for a turn.
func (wk *worker) reregister() {
	h := wk.h
	h.sched.Unregister(wk.id)
	id, _, err := h.sched.Register(wk.spec, wk.deliver)
	if err != nil {
		h.fail(fmt.Errorf("register the simulated %s worker %s again after its turn was taken back: %w", wk.role, wk.w.Name, err))
		return
	}
	wk.id, wk.seq = id, 0
	wk.acc = 0 // a minibatch in progress is lost with the connection
	wk.acquire()
}

// arrive reports the stream's next request and sets the timer of the one after
// (Poisson arrivals at the stream's rate times the scenario's factor in force).
func (wk *worker) arrive() {
	h := wk.h
	if h.stopped {
		return
	}
	id := "q" + strconv.Itoa(wk.next)
	wk.next++
	wk.requests++
	wk.arrived[id] = h.clock.Now()
	if err := h.sched.Arrivals(wk.id, []proto.Request{{ID: id}}); err != nil {
		delete(wk.arrived, id)
		if pe, ok := err.(*proto.Error); ok && pe.Code == proto.CodeRateLimited {
			wk.refused++
		} else {
			h.fail(fmt.Errorf("%s arrivals: %w", wk.w.Name, err))
		}
	}
	wk.scheduleArrival()
}

func (wk *worker) scheduleArrival() {
	rate := wk.rateRPS * wk.h.rateFactor
	if rate <= 0 {
		return
	}
	gap := time.Duration(wk.rng.ExpFloat64() / rate * float64(time.Second))
	wk.h.clock.AfterFunc(gap, wk.arrive)
}

// watchedBackend tells the workers when the board's clocks change: Apply and Restore
// are the only writers of the mode files in the simulated tree.
type watchedBackend struct {
	powermode.Backend
	g *gpu
	// space, when set, is the board's space as fulcrumd sees it: a truth table's modes
	// (the board answers only where the table does).
	space *powermode.Space
}

func (b *watchedBackend) Space() *powermode.Space {
	if b.space != nil {
		return b.space
	}
	return b.Backend.Space()
}

func (b *watchedBackend) Apply(ctx context.Context, m powermode.Mode) error {
	defer func() { b.g.stale = true }()
	return b.Backend.Apply(ctx, m)
}

func (b *watchedBackend) Restore(ctx context.Context, s *powermode.Snapshot) error {
	defer func() { b.g.stale = true }()
	return b.Backend.Restore(ctx, s)
}

// Heat passes the Jetson backend's heat readings through (the controller's thermal
// rules type-assert powermode.HeatSensor).
func (b *watchedBackend) Heat(ctx context.Context) (powermode.HeatReading, error) {
	if hs, ok := b.Backend.(powermode.HeatSensor); ok {
		return hs.Heat(ctx)
	}
	return powermode.HeatReading{}, powermode.ErrNoHeat
}

// stepCache is the Jetson backend's file system on virtual time: the simulated tree's
// real files, each read once until it is written again. The physics step writes through
// faketree, which tells the cache each path it rewrote (faketree.Tree.SetInPlace); the
// backend's own writes (Apply) go through WriteFile, which forgets everything. Every read
// answers what the file holds, and the control loop's heat readings (a dozen trip-point
// files that never change) and power readings cost a map lookup instead of opens.
type stepCache struct {
	fs    tegra.OSFS
	files map[string]cachedFile // by real path: a reader's path may go through a symlink
	globs map[string][]string
	real  map[string]string // board path → real host path (the tree's links never change)
}

// realPath resolves a board path's links once.
func (c *stepCache) realPath(p string) string {
	if r, ok := c.real[p]; ok {
		return r
	}
	host := filepath.Join(c.fs.Root, filepath.FromSlash(p))
	r, err := filepath.EvalSymlinks(host)
	if err != nil {
		r = host
	}
	c.real[p] = r
	return r
}

type cachedFile struct {
	data []byte
	err  error
}

func newStepCache(root string) *stepCache {
	return &stepCache{fs: tegra.OSFS{Root: root}, files: map[string]cachedFile{}, globs: map[string][]string{}, real: map[string]string{}}
}

// Glob answers tegra's listings (tegra.Globber) from the cache.
func (c *stepCache) Glob(pattern string) ([]string, error) {
	if m, ok := c.globs[pattern]; ok {
		return slices.Clone(m), nil
	}
	m, err := tegra.Glob(c.fs.Root, pattern)
	if err != nil {
		return nil, err
	}
	c.globs[pattern] = m
	return slices.Clone(m), nil
}

func (c *stepCache) ReadFile(p string) ([]byte, error) {
	r := c.realPath(p)
	f, ok := c.files[r]
	if !ok {
		f.data, f.err = c.fs.ReadFile(p)
		c.files[r] = f
	}
	return bytes.Clone(f.data), f.err
}

func (c *stepCache) WriteFile(p string, data []byte) error {
	c.stepped()
	return c.fs.WriteFile(p, data)
}

// stepped forgets everything read: the backend wrote the tree.
func (c *stepCache) stepped() {
	clear(c.files)
	clear(c.globs)
}

// written forgets one file (faketree's write hook).
func (c *stepCache) written(abs string) { delete(c.files, c.realPath(abs)) }

// recentAfterPlanBroken is the harness's latency rule after the first plan: the
// scheduler's recent-window rule (the p99 of the requests released within the last span,
// over budgetMS with at least minCount of them; sched's window and quantiles), over the
// requests of that window that arrived after the plan (planAt) only. A search's late
// requests released after the plan stay in the scheduler's window for span but are the
// search's, not the plan's: the within rule judges the plans (docs/benchmarks.md).
func (wk *worker) recentAfterPlanBroken(now time.Time, span time.Duration, planAt time.Time, minCount int, budgetMS float64) bool {
	cut := now.Add(-span)
	for wk.recentAt < len(wk.latEnd) && wk.latEnd[wk.recentAt].Before(cut) {
		wk.recentAt++
	}
	var v []float64
	for j := wk.recentAt; j < len(wk.latEnd); j++ {
		if wk.latAt[j].After(planAt) {
			v = append(v, wk.latMS[j])
		}
	}
	if len(v) == 0 || len(v) < minCount {
		return false
	}
	slices.Sort(v)
	return stats.Quantile(v, 0.99) > budgetMS
}
