package control

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// wantTurnBoard is the fake board whose mode change also makes the trainer ask for a
// turn: the change runs between turns, so the trainer's next grant is the first thing
// the scheduler does after it, whenever the worker's own goroutine asks.
type wantTurnBoard struct {
	*fakeBoard
	acquire func()
}

func (b *wantTurnBoard) Apply(ctx context.Context, m powermode.Mode) error {
	err := b.fakeBoard.Apply(ctx, m)
	b.acquire()
	return err
}

// A plan's micro-batch and expected turn times are in force from the first turn at its
// mode: the scheduler grants the next turn the moment the mode change ends, and apply set
// them only after BetweenTurns returned, so the first training turn at a new mode ran at
// the old micro-batch, judged on the old mode's times (a 197 ms whole minibatch after a
// plan of 16-sample turns: seed 2 of the lifetime sweep, 30 req/s, 150 ms, 20 W).
func TestFirstTurnAtANewModeRunsThePlansMicroBatch(t *testing.T) {
	e := newEnv(t, sched.RealClock{})
	defer e.sched.Close()
	e.seed()
	e.seedMicro16(0.4) // 16-sample turns take 40 % of a minibatch's time
	w := e.models[tTrain]
	var mu sync.Mutex
	var trainerID string
	type seen struct {
		mode  powermode.Mode
		micro int
	}
	var grants []seen
	deliver := func(g sched.Grant) {
		if !strings.HasPrefix(g.Worker, proto.RoleTrain) || g.Kind != proto.KindTrain {
			go func() { _ = e.sched.Release(g.Worker, sched.Release{Grant: g.ID, Duration: time.Millisecond}) }()
			return
		}
		mu.Lock()
		grants = append(grants, seen{e.board.current(), g.MicroBatch})
		mu.Unlock()
		go func() {
			time.Sleep(time.Millisecond)
			if err := e.sched.Release(g.Worker, sched.Release{Grant: g.ID, Duration: time.Duration(w.TimeMS(e.spec, e.board.current(), max(g.MicroBatch, 1)) * float64(time.Millisecond))}); err != nil {
				return
			}
			_ = e.sched.Acquire(g.Worker, 0)
		}()
	}
	board := &wantTurnBoard{fakeBoard: e.board, acquire: func() {
		mu.Lock()
		id := trainerID
		mu.Unlock()
		_ = e.sched.Acquire(id, 0) // refused while it waits already
	}}
	c, err := New(Options{Config: Config{}, Sched: e.sched, Board: board, Store: e.store, Targets: plan.Targets{LatencyMS: 120, PowerMW: 60000, RateRPS: 5}})
	if err != nil {
		t.Fatal(err)
	}
	e.board.set(20000, nil)
	id, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleTrain, Workload: tTrain, Batch: 32, MicroBatches: []int{16}}, deliver)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	trainerID = id
	mu.Unlock()
	if _, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleInfer, Workload: tInfer, Batch: 1, BatchSizes: []int{1, 2, 4, 8}}, deliver); err != nil {
		t.Fatal(err)
	}
	if err := e.sched.Acquire(id, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // a few whole minibatches at the board's first mode
	c.Step(context.Background())
	cur := c.Status().Current
	if cur == nil || cur.MicroBatch() != 16 {
		t.Fatalf("test premise: want a plan of 16-sample turns, got %+v", cur)
	}
	mu.Lock() // the grant after the mode change was delivered before Step returned
	defer mu.Unlock()
	for i, g := range grants {
		if g.mode != cur.Mode {
			continue
		}
		if g.micro != 16 {
			t.Errorf("training grant %d, the first at the plan's mode %s: micro-batch %d, want the plan's 16", i, cur.Mode.Human(), g.micro)
		}
		return
	}
	t.Fatalf("no training grant at the plan's mode %s (%d grants)", cur.Mode.Human(), len(grants))
}
