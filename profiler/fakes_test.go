package profiler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/profiler/store/storetest"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// fakeBoard is an in-memory powermode.Backend. Its state is the current mode; Power
// returns a scripted value and remembers what it returned; it can report whether a
// minibatch is in flight (the fake runner tells it).
type fakeBoard struct {
	space *powermode.Space

	mu        sync.Mutex
	cur       powermode.Mode
	applied   []powermode.Mode
	restored  []powermode.Mode // modes Restore put back
	powerFn   func(call int, warmup bool) float64
	powerErr  error
	returned  []float64 // every power value returned
	calls     int
	inWarmup  bool
	powerWake chan struct{} // closed and replaced at every Power call
}

func newFakeBoard(t *testing.T) *fakeBoard {
	t.Helper()
	sp, err := powermode.NewSpace(powermode.Levels{
		Cores: []int{4, 8, 12}, CPUKHz: []int64{1113600, 1728000, 2201600},
		GPUHz: []int64{408000000, 612000000, 1300500000}, EMCHz: []int64{2133000000, 3199000000},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &fakeBoard{
		space: sp, cur: powermode.Mode{Cores: 12, CPUKHz: 2201600, GPUHz: 1300500000, EMCHz: 3199000000},
		powerFn:   func(int, bool) float64 { return 20000 },
		powerWake: make(chan struct{}),
	}
}

func (b *fakeBoard) Info() powermode.BoardInfo { return powermode.BoardInfo{Name: "fake-orin"} }
func (b *fakeBoard) Space() *powermode.Space   { return b.space }

func (b *fakeBoard) Current(context.Context) (powermode.Mode, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cur, nil
}

func (b *fakeBoard) Apply(_ context.Context, m powermode.Mode) error {
	if !b.space.Contains(m) {
		return fmt.Errorf("fake: mode %s not allowed", m)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cur = m
	b.applied = append(b.applied, m)
	return nil
}

func (b *fakeBoard) Power(context.Context) (powermode.PowerReading, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	close(b.powerWake)
	b.powerWake = make(chan struct{})
	if b.powerErr != nil {
		return powermode.PowerReading{}, b.powerErr
	}
	v := b.powerFn(b.calls, b.inWarmup)
	b.returned = append(b.returned, v)
	return powermode.PowerReading{At: time.Now(), TotalMW: v}, nil
}

func (b *fakeBoard) Thermal(context.Context) ([]powermode.ThermalZone, error) { return nil, nil }

func (b *fakeBoard) Snapshot(context.Context) (*powermode.Snapshot, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	raw, _ := json.Marshal(b.cur)
	return &powermode.Snapshot{Backend: "fake", Board: "fake-orin", TakenAt: time.Now().UTC(), State: raw}, nil
}

func (b *fakeBoard) Restore(_ context.Context, s *powermode.Snapshot) error {
	var m powermode.Mode
	if err := json.Unmarshal(s.State, &m); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cur = m
	b.restored = append(b.restored, m)
	return nil
}

// wakeAfterPower returns a channel closed by the next Power call.
func (b *fakeBoard) wakeAfterPower() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.powerWake
}

// fakeRunner returns scripted durations. Each measured minibatch (after warmup calls)
// lasts until the board has been read at least once during it, like a real minibatch
// that outlasts the sampling period, so power sampling is exercised without timing.
type fakeRunner struct {
	board   *fakeBoard
	warmup  int
	times   func(i int) time.Duration // i counts measured minibatches from 0
	failAt  int                       // fail the failAt-th call (1-based); 0: never
	calls   int
	modes   []powermode.Mode // board mode seen at each call
	onCall  func(call int)
	batches []int
}

func (r *fakeRunner) RunMinibatch(ctx context.Context, workload string, role truth.Role, batch int) (time.Duration, error) {
	r.calls++
	if r.onCall != nil {
		r.onCall(r.calls)
	}
	m, _ := r.board.Current(ctx)
	r.modes = append(r.modes, m)
	r.batches = append(r.batches, batch)
	if r.failAt == r.calls {
		return 0, errors.New("worker crashed")
	}
	if r.calls <= r.warmup {
		r.board.mu.Lock()
		r.board.inWarmup = true // a power reading now would be a bug: the sampler must be off
		r.board.mu.Unlock()
		defer func() {
			r.board.mu.Lock()
			r.board.inWarmup = false
			r.board.mu.Unlock()
		}()
		return time.Second, nil // warm-up runs are slow; they must not be counted
	}
	select {
	case <-r.board.wakeAfterPower():
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return r.times(r.calls - r.warmup - 1), nil
}

func (r *fakeRunner) Source() string { return store.SourceSim }

func newStore(t *testing.T) *store.Store {
	t.Helper()
	return storetest.Open(t)
}

// fixedClock advances one second per reading so started/finished differ predictably.
type fixedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fixedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}
