// Package vclock is a deterministic, cooperative virtual clock: fulcrumd's scheduler,
// controller, live profiler and searchers run on it unchanged (it implements sched.Clock
// and sched.Coop), hours of their time pass in seconds, and a run is the same for the
// same inputs (docs/design.md §9, "The daemon on virtual time").
//
// Exactly one thing runs at a time. Timer callbacks run on the driver's goroutine (the
// one calling RunUntil or Settle). Goroutines started with Go are participants: each is
// a coroutine that runs only when the driver hands it the turn and gives the turn back
// only by parking in an Event's Wait (Sleep is one) or by returning. Firing an Event
// puts its waiters at the back of a FIFO ready queue instead of letting them run beside
// the goroutine that fired it. The driver runs every ready participant, one at a time,
// then pops the earliest timer (deadline, then creation order), moves Now to its
// deadline and calls it; and again, up to the run's end.
//
// What a participant must not do: block on anything but this clock's Events (a channel,
// a sync.WaitGroup, a mutex another parked participant holds). The driver would wait for
// it forever; instead a watchdog (real time, Watchdog) fails the run with every
// goroutine's stack and where the stuck participant was started.
package vclock

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// DefaultWatchdog is how long (real time) the driver waits for a participant to park or
// return before it declares the run stuck.
const DefaultWatchdog = 10 * time.Second

// Epoch is where every Clock's time starts: fixed, so that a run's event log (which
// carries times) is the same twice.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock is the virtual clock. Create it with New.
type Clock struct {
	watchdog time.Duration

	mu      sync.Mutex
	now     time.Time
	seq     uint64
	timers  timerHeap
	ready   []*proc // FIFO
	parked  []*proc // in the order they parked
	alive   int     // participants started and not returned
	running *proc   // the participant holding the turn (nil: the driver)
	nextID  int
	failed  error

	yield chan struct{} // a participant parked or returned
	dog   *time.Timer
}

// New returns a clock at Epoch. watchdog ≤ 0 takes DefaultWatchdog.
func New(watchdog time.Duration) *Clock {
	if watchdog <= 0 {
		watchdog = DefaultWatchdog
	}
	return &Clock{watchdog: watchdog, now: Epoch, yield: make(chan struct{})}
}

var (
	_ sched.Clock = (*Clock)(nil)
	_ sched.Coop  = (*Clock)(nil)
)

// Now is the virtual instant.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

type timer struct {
	c     *Clock
	at    time.Time
	seq   uint64
	f     func()
	index int // in the heap; -1 once fired or stopped
}

// AfterFunc calls f on the driver's goroutine once d of virtual time has passed (d ≤ 0:
// at the current instant, after what is already due). f must not block.
func (c *Clock) AfterFunc(d time.Duration, f func()) sched.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &timer{c: c, at: c.now.Add(max(d, 0)), seq: c.seq, f: f}
	heap.Push(&c.timers, t)
	return t
}

// Stop removes the timer if it has not fired; it reports whether it did.
func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&t.c.timers, t.index)
	return true
}

type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*timer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}

// proc is a participant.
type proc struct {
	id      int
	where   string // who called Go
	f       func()
	started bool
	wake    chan struct{}
	// While parked: the event and context it waits on; byCtx says its context, not the
	// event, woke it.
	ev    *event
	ctx   context.Context
	byCtx bool
}

func (p *proc) String() string { return fmt.Sprintf("participant %d (started at %s)", p.id, p.where) }

// Go starts f as a participant: it runs when the driver hands it the turn, after the
// participants already ready.
func (c *Clock) Go(f func()) {
	p := &proc{f: f, wake: make(chan struct{}), where: caller()}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextID++
	p.id = c.nextID
	c.alive++
	c.ready = append(c.ready, p)
}

// caller names the first frame outside this package and sched's Go: where a
// participant came from, for the watchdog's message.
func caller() string {
	pcs := make([]uintptr, 8)
	n := runtime.Callers(2, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		own := strings.HasSuffix(f.Function, "internal/vclock.caller") || strings.Contains(f.Function, "internal/vclock.(*Clock).")
		if !own && !strings.HasSuffix(f.Function, "sched.Go") {
			return fmt.Sprintf("%s (%s:%d)", f.Function, f.File, f.Line)
		}
		if !more {
			return "unknown"
		}
	}
}

// event is the clock's sched.Event.
type event struct {
	c       *Clock
	fired   bool
	waiters []*proc
}

// NewEvent returns a one-shot event of this clock.
func (c *Clock) NewEvent() sched.Event { return &event{c: c} }

// Fire marks the event's waiters ready (in the order they began waiting).
func (e *event) Fire() {
	c := e.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.fired {
		return
	}
	e.fired = true
	for _, p := range e.waiters {
		c.wakeLocked(p, false)
	}
	e.waiters = nil
}

// ErrNotParticipant: Wait was called where it cannot give the turn back (a timer
// callback, or the driver itself).
var ErrNotParticipant = errors.New("vclock: an Event was waited on outside a participant (a timer callback or the driver must not block; start the code with Go)")

// Wait parks the calling participant until the event fires or ctx ends.
func (e *event) Wait(ctx context.Context) error {
	c := e.c
	c.mu.Lock()
	if e.fired {
		c.mu.Unlock()
		return nil
	}
	if err := ctx.Err(); err != nil {
		c.mu.Unlock()
		return err
	}
	p := c.running
	if p == nil {
		c.mu.Unlock()
		panic(ErrNotParticipant)
	}
	p.ev, p.ctx, p.byCtx = e, ctx, false
	e.waiters = append(e.waiters, p)
	c.parked = append(c.parked, p)
	c.running = nil
	c.mu.Unlock()
	c.yield <- struct{}{}
	<-p.wake
	if p.byCtx {
		return ctx.Err()
	}
	return nil
}

// wakeLocked moves parked p to the ready queue. Called with c.mu held.
func (c *Clock) wakeLocked(p *proc, byCtx bool) {
	if p.ev == nil {
		return
	}
	if byCtx {
		ws := p.ev.waiters
		for i, q := range ws {
			if q == p {
				p.ev.waiters = append(ws[:i:i], ws[i+1:]...)
				break
			}
		}
	}
	p.ev, p.ctx, p.byCtx = nil, nil, byCtx
	for i, q := range c.parked {
		if q == p {
			c.parked = append(c.parked[:i:i], c.parked[i+1:]...)
			break
		}
	}
	c.ready = append(c.ready, p)
}

// pollCtx wakes the parked participants whose context has ended (a cancel is seen at
// the next hand-over, in park order, so it is deterministic too). Called with c.mu held.
func (c *Clock) pollCtx() {
	for i := 0; i < len(c.parked); {
		p := c.parked[i]
		if p.ctx != nil && p.ctx.Err() != nil {
			c.wakeLocked(p, true)
			continue
		}
		i++
	}
}

// Sleep parks the calling participant for d of virtual time; false when ctx ended first.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) bool {
	e := c.NewEvent()
	t := c.AfterFunc(d, e.Fire)
	if e.Wait(ctx) != nil {
		t.Stop()
		return false
	}
	return true
}

// runReady hands the turn to each ready participant in order until none is ready.
func (c *Clock) runReady() error {
	for {
		c.mu.Lock()
		if c.failed != nil {
			c.mu.Unlock()
			return c.failed
		}
		c.pollCtx()
		if len(c.ready) == 0 {
			c.mu.Unlock()
			return nil
		}
		p := c.ready[0]
		c.ready[0] = nil
		c.ready = c.ready[1:]
		c.running = p
		c.mu.Unlock()
		if !p.started {
			p.started = true
			go c.body(p)
		} else {
			p.wake <- struct{}{}
		}
		if err := c.await(p); err != nil {
			return err
		}
	}
}

func (c *Clock) body(p *proc) {
	defer func() {
		c.mu.Lock()
		c.running = nil
		c.alive--
		c.mu.Unlock()
		c.yield <- struct{}{}
	}()
	p.f()
}

// await waits (real time, up to the watchdog) for p to park or return.
func (c *Clock) await(p *proc) error {
	if c.dog == nil {
		c.dog = time.NewTimer(c.watchdog)
	} else {
		c.dog.Reset(c.watchdog)
	}
	select {
	case <-c.yield:
		c.dog.Stop()
		return nil
	case <-c.dog.C:
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		err := fmt.Errorf("vclock: %s held the turn for %s of real time without parking or returning at virtual %s "+
			"(it blocks on something that is not this clock's Event: a channel, a WaitGroup or a mutex a parked participant holds); goroutines:\n%s",
			p, c.watchdog, c.Now().Sub(Epoch), buf)
		c.mu.Lock()
		c.failed = err
		c.mu.Unlock()
		return err
	}
}

// RunUntil drives the clock: ready participants, then timers in deadline order, until no
// timer is due by end; Now is then end. It returns the watchdog's error if a participant
// got stuck (the clock is then unusable).
func (c *Clock) RunUntil(end time.Time) error {
	for {
		if err := c.runReady(); err != nil {
			return err
		}
		c.mu.Lock()
		if len(c.timers) == 0 || c.timers[0].at.After(end) {
			if c.now.Before(end) {
				c.now = end
			}
			c.mu.Unlock()
			return nil
		}
		t := heap.Pop(&c.timers).(*timer)
		if t.at.After(c.now) {
			c.now = t.at
		}
		c.mu.Unlock()
		t.f()
	}
}

// RunFor is RunUntil(Now()+d).
func (c *Clock) RunFor(d time.Duration) error { return c.RunUntil(c.Now().Add(d)) }

// ErrStuck: Settle found participants parked with nothing left that could wake them.
var ErrStuck = errors.New("vclock: participants are parked on events nothing can fire any more")

// Settle drives the clock until every participant has returned (after a run's context
// was cancelled, say), for at most limit of further virtual time. It fails naming the
// participants still alive when none is ready and no timer is left (ErrStuck), or when
// limit passes.
func (c *Clock) Settle(limit time.Duration) error {
	end := c.Now().Add(limit)
	for {
		if err := c.runReady(); err != nil {
			return err
		}
		c.mu.Lock()
		if c.alive == 0 {
			c.mu.Unlock()
			return nil
		}
		if len(c.timers) == 0 || c.timers[0].at.After(end) {
			names := make([]string, 0, len(c.parked))
			for _, p := range c.parked {
				names = append(names, p.String())
			}
			c.mu.Unlock()
			if len(c.timers) == 0 {
				return fmt.Errorf("%w: %s", ErrStuck, strings.Join(names, "; "))
			}
			return fmt.Errorf("vclock: participants still running %s after the settle began: %s", limit, strings.Join(names, "; "))
		}
		t := heap.Pop(&c.timers).(*timer)
		if t.at.After(c.now) {
			c.now = t.at
		}
		c.mu.Unlock()
		t.f()
	}
}

// Alive is the number of participants started and not yet returned.
func (c *Clock) Alive() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.alive
}
