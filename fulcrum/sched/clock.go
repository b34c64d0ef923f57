package sched

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Clock is the scheduler's source of time. Only differences between Now readings are
// used, so a real clock's monotonic reading is what counts (wall-clock jumps are
// ignored); tests inject a FakeClock.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine (or, for a fake clock, from Advance) once d
	// has passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it did.
	Stop() bool
}

// RealClock is the system's monotonic clock.
type RealClock struct{}

// Now returns time.Now, which carries a monotonic reading.
func (RealClock) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (RealClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// FakeClock is a manually advanced clock for deterministic tests. Timers fire from
// Advance, in deadline order, on the caller's goroutine, without the clock's lock held.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	seq    int
	timers []*fakeTimer
}

// NewFakeClock starts at an arbitrary fixed instant.
func NewFakeClock() *FakeClock {
	return &FakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

type fakeTimer struct {
	c    *FakeClock
	at   time.Time
	seq  int
	f    func()
	done bool
}

// Now is the fake instant.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f at Now()+d; a d ≤ 0 fires at the next Advance (even of 0).
func (c *FakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{c: c, at: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.done {
		return false
	}
	t.done = true
	return true
}

// Advance moves time forward by d, firing every timer that falls due on the way at its
// own instant.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *fakeTimer
		live := c.timers[:0]
		for _, t := range c.timers {
			if !t.done {
				live = append(live, t)
			}
		}
		c.timers = live
		sort.Slice(c.timers, func(i, j int) bool {
			if !c.timers[i].at.Equal(c.timers[j].at) {
				return c.timers[i].at.Before(c.timers[j].at)
			}
			return c.timers[i].seq < c.timers[j].seq
		})
		if len(c.timers) > 0 && !c.timers[0].at.After(end) {
			next = c.timers[0]
			next.done = true
			if next.at.After(c.now) {
				c.now = next.at
			}
		} else {
			c.now = end
		}
		c.mu.Unlock()
		if next == nil {
			return
		}
		next.f()
	}
}

// Pending is the number of timers not yet fired or stopped.
func (c *FakeClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.done {
			n++
		}
	}
	return n
}

// Event is a one-shot signal one goroutine waits on and another fires (the scheduler's
// "action done" and "profile batch done", the controller's sleeps and searches). Under a
// cooperative clock (Coop) firing marks the waiter ready instead of letting it run
// alongside the one that fired, so a virtual-time run stays deterministic.
type Event interface {
	// Fire signals the event; later calls do nothing.
	Fire()
	// Wait blocks until the event fires (nil) or ctx ends first (ctx's error). A fired
	// event answers nil at once, even with ctx ended.
	Wait(ctx context.Context) error
}

// Coop is implemented by a clock that runs the daemon's goroutines itself, one at a
// time (internal/vclock, virtual time): Go starts a participant, NewEvent makes an Event
// whose Wait gives the turn back to the clock.
type Coop interface {
	Clock
	Go(f func())
	NewEvent() Event
}

// Go runs f in a goroutine of its own: a participant of c when c is a Coop, else a plain
// goroutine.
func Go(c Clock, f func()) {
	if co, ok := c.(Coop); ok {
		co.Go(f)
		return
	}
	go f()
}

// NewEvent returns an Event for c: the clock's own when c is a Coop, else a channel.
func NewEvent(c Clock) Event {
	if co, ok := c.(Coop); ok {
		return co.NewEvent()
	}
	return &chanEvent{ch: make(chan struct{})}
}

type chanEvent struct {
	once sync.Once
	ch   chan struct{}
}

func (e *chanEvent) Fire() { e.once.Do(func() { close(e.ch) }) }

func (e *chanEvent) Wait(ctx context.Context) error {
	select {
	case <-e.ch:
		return nil
	default:
	}
	select {
	case <-e.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
