package control

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
)

// crowdingSched is the real scheduler, except that at the modes saturated reports it
// answers every profile batch as the real one does at a mode where inference keeps a
// request queued for profileCrowdFactor × ProfileWait (sched's
// TestProfileCrowdedOutBySaturatedInference covers that refusal itself): scripted
// workers report batch times without spending them, so they cannot saturate the GPU.
type crowdingSched struct {
	*sched.Scheduler
	board     *fakeBoard
	saturated func(powermode.Mode) bool

	mu      sync.Mutex
	refused map[powermode.Mode]int
}

func (s *crowdingSched) Profile(ctx context.Context, id string, batch int) (time.Duration, error) {
	if m := s.board.current(); s.saturated(m) {
		s.mu.Lock()
		s.refused[m]++
		s.mu.Unlock()
		return 0, fmt.Errorf("profile batch %d on worker %s: %w", batch, id, sched.ErrProfileCrowdedOut)
	}
	return s.Scheduler.Profile(ctx, id, batch)
}

func (s *crowdingSched) refusals() map[powermode.Mode]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[powermode.Mode]int{}
	for m, n := range s.refused {
		out[m] = n
	}
	return out
}

// slowGPU: the modes at which inference saturates the GPU in these tests.
func slowGPU(m powermode.Mode) bool { return m.GPUHz < 900e6 }

func newCrowdedEnv(t *testing.T, cfg Config, b plan.Targets) (*env, *Controller, *crowdingSched) {
	t.Helper()
	e := newEnv(t, sched.RealClock{})
	// fulcrumd's ProfileWait (newEnv's scheduler has none): a profile batch longer than
	// the latency budget runs once overdue at a moment no request is queued.
	e.sched.Close()
	e.sched = sched.New(sched.Config{TrustReportedDurations: true, ProfileWait: 20 * time.Millisecond}, sched.RealClock{}, nil)
	e.sched.SetLatencyBudget(400 * time.Millisecond) // the controller sets its own at New
	cs := &crowdingSched{Scheduler: e.sched, board: e.board, saturated: slowGPU, refused: map[powermode.Mode]int{}}
	c, err := New(Options{Config: cfg, Sched: cs, Board: e.board, Store: e.store, Targets: b})
	if err != nil {
		t.Fatal(err)
	}
	sw := &scriptedWorkers{e: e, power: c.power, grants: map[string]int{}}
	trainID, inferID := e.register(sw.deliver)
	for _, id := range []string{trainID, inferID} {
		if err := e.sched.Acquire(id, 0); err != nil {
			t.Fatal(err)
		}
	}
	e.board.mu.Lock()
	e.board.powerFn = func(m powermode.Mode) float64 { return e.models[tTrain].PowerMW(e.spec, m, 32) }
	e.board.mu.Unlock()
	return e, c, cs
}

// A live search that asks for a mode where inference leaves no room for a profile batch
// (the scheduler refuses it with ErrProfileCrowdedOut) abandons that mode as saturated,
// never asks for it again, stores nothing there, does not choose it, and finishes.
// Before, the refusal did not exist (the search waited ~30 s per such batch and stalled);
// a refusal without this handling ends the search with an error.
func TestLiveSearchAbandonsSaturatedModes(t *testing.T) {
	e, c, cs := newCrowdedEnv(t, Config{MaxProfiles: 10, Live: LiveOptions{Samples: 2, MinTime: time.Millisecond, PowerSettle: time.Millisecond}},
		plan.Targets{LatencyMS: 400, PowerMW: 30000, RateRPS: 20})
	defer e.sched.Close()
	pair := Pair{Train: tTrain, TrainBatch: 32, Infer: tInfer, Batches: []int{1, 2, 4, 8}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, counts, err := c.search(ctx, "gmd", pair, c.targets, 20, 0, false)
	if err != nil {
		sn := e.sched.Snapshot()
		t.Fatalf("the search failed at a saturated mode: %v (turn %q %s, workers %+v)", err, sn.Turn, sn.TurnKind, sn.Workers)
	}
	refused := cs.refusals()
	t.Logf("profiled %d modes, %d saturated, refusals %v, stop %q, choice %s", len(res.Profiled), counts.Saturated, refused, res.Stop, res.Choice.Mode.Human())
	if len(refused) == 0 {
		t.Fatal("the search never asked for a slow-GPU mode: the test does not exercise saturation")
	}
	for m, n := range refused {
		if n != 1 {
			t.Errorf("mode %s: %d profile batches refused; want 1 (abandoned at the first, never retried)", m.Human(), n)
		}
	}
	if counts.Saturated != len(refused) {
		t.Errorf("counts.Saturated = %d; want %d (one per saturated mode)", counts.Saturated, len(refused))
	}
	if !res.Found || slowGPU(res.Choice.Mode) {
		t.Errorf("choice %s (found %v); want a mode with room for training", res.Choice.Mode.Human(), res.Found)
	}
	all, err := e.store.List(store.Filter{Board: e.spec.Name})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range all {
		if slowGPU(p.Mode) {
			t.Errorf("stored a profile at saturated mode %s: %+v", p.Mode.Human(), p.Key())
		}
	}
	var ev string
	for _, x := range c.Events().List(0) {
		if x.Kind == KindProfile && strings.Contains(x.Reason, "inference requests stayed queued") {
			ev = x.Reason
		}
	}
	if ev == "" {
		t.Error("no event says why a saturated mode was abandoned")
	}
	// The live profiler answers the mode again at once, with training unable to fit.
	lp := c.liveProfiler(pair, 30000, 400, nil, "")
	for m := range refused {
		lp.Saturation = &SaturatedModes{}
		lp.Saturation.add(Saturated{Mode: m, PowerMW: 10000})
		mp, err := lp.Profile(ctx, m)
		if err != nil || mp.Train.TimeMS < 800 || cs.refusals()[m] != 1 {
			t.Fatalf("mode %s answered %+v, %v (refusals %d); want its estimate with a ≥ 800 ms minibatch, no batch asked", m.Human(), mp.Train, err, cs.refusals()[m])
		}
	}
}
