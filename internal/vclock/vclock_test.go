package vclock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// at is the virtual time since Epoch in ms.
func at(c *Clock) int { return int(c.Now().Sub(Epoch) / time.Millisecond) }

func TestTimersFireInDeadlineThenCreationOrder(t *testing.T) {
	c := New(0)
	var got []string
	add := func(name string, d int) {
		c.AfterFunc(ms(d), func() { got = append(got, fmt.Sprintf("%s@%d", name, at(c))) })
	}
	add("c", 30)
	add("a1", 10)
	add("a2", 10)
	add("b", 20)
	stopped := c.AfterFunc(ms(15), func() { got = append(got, "stopped") })
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop: want true once, then false")
	}
	// A timer set from a callback at the same instant runs after those already due.
	c.AfterFunc(ms(10), func() { c.AfterFunc(0, func() { got = append(got, fmt.Sprintf("z@%d", at(c))) }) })
	if err := c.RunUntil(Epoch.Add(ms(25))); err != nil {
		t.Fatal(err)
	}
	if at(c) != 25 {
		t.Fatalf("Now after RunUntil(25ms) = %d ms", at(c))
	}
	if err := c.RunFor(ms(100)); err != nil {
		t.Fatal(err)
	}
	want := []string{"a1@10", "a2@10", "z@10", "b@20", "c@30"}
	if !slices.Equal(got, want) {
		t.Fatalf("fired %v, want %v", got, want)
	}
}

// TestParticipantsTakeTurns: participants run one at a time, in a fixed order, and time
// moves only while every one of them is parked.
func TestParticipantsTakeTurns(t *testing.T) {
	run := func() []string {
		c := New(0)
		var trace []string
		inside := 0 // participants running at once; no lock: the race detector checks the hand-overs
		worker := func(name string, period, n int) func() {
			return func() {
				for i := range n {
					inside++
					if inside != 1 {
						trace = append(trace, "OVERLAP")
					}
					runtime.Gosched()
					trace = append(trace, fmt.Sprintf("%s%d@%d", name, i, at(c)))
					inside--
					if !c.Sleep(context.Background(), ms(period)) {
						trace = append(trace, name+" woken early")
					}
				}
			}
		}
		c.Go(worker("a", 10, 3))
		c.Go(worker("b", 15, 2))
		if err := c.RunFor(time.Second); err != nil {
			t.Fatal(err)
		}
		if c.Alive() != 0 {
			t.Fatalf("%d participants alive after both returned", c.Alive())
		}
		return trace
	}
	want := []string{"a0@0", "b0@0", "a1@10", "b1@15", "a2@20"}
	for i := range 3 {
		if got := run(); !slices.Equal(got, want) {
			t.Fatalf("run %d: %v, want %v", i, got, want)
		}
	}
}

func TestEventWakesWaitersInOrderAndOnlyWhenFired(t *testing.T) {
	c := New(0)
	e := c.NewEvent()
	var got []string
	for _, name := range []string{"w1", "w2", "w3"} {
		c.Go(func() {
			if err := e.Wait(context.Background()); err != nil {
				got = append(got, name+" "+err.Error())
				return
			}
			got = append(got, fmt.Sprintf("%s@%d", name, at(c)))
		})
	}
	c.AfterFunc(ms(40), e.Fire)
	if err := c.RunUntil(Epoch.Add(ms(39))); err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("waiters ran before the event fired: %v", got)
	}
	if err := c.RunFor(ms(10)); err != nil {
		t.Fatal(err)
	}
	want := []string{"w1@40", "w2@40", "w3@40"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// Fired: a later Wait answers at once, even with its context ended.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.Go(func() {
		if err := e.Wait(ctx); err != nil {
			t.Errorf("Wait on a fired event: %v", err)
		}
	})
	if err := c.RunFor(0); err != nil {
		t.Fatal(err)
	}
}

func TestCancelledContextWakesTheWaiter(t *testing.T) {
	c := New(0)
	ctx, cancel := context.WithCancel(context.Background())
	var got []string
	c.Go(func() {
		ok := c.Sleep(ctx, time.Hour)
		got = append(got, fmt.Sprintf("sleeper ok=%v@%d err=%v", ok, at(c), ctx.Err()))
	})
	c.Go(func() {
		c.Sleep(context.Background(), ms(5))
		cancel() // by another participant: seen at the next hand-over
		got = append(got, fmt.Sprintf("canceller@%d", at(c)))
	})
	if err := c.Settle(time.Minute); err != nil {
		t.Fatal(err)
	}
	want := []string{"canceller@5", "sleeper ok=false@5 err=context canceled"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestSettleNamesParticipantsNothingCanWake(t *testing.T) {
	c := New(0)
	e := c.NewEvent()
	c.Go(func() { _ = e.Wait(context.Background()) })
	err := c.Settle(time.Minute)
	if !errors.Is(err, ErrStuck) || !strings.Contains(err.Error(), "TestSettleNamesParticipantsNothingCanWake") {
		t.Fatalf("Settle = %v, want ErrStuck naming the test that started the participant", err)
	}
	e.Fire()
	if err := c.Settle(time.Minute); err != nil {
		t.Fatalf("after Fire: %v", err)
	}
}

func TestWatchdogNamesAStuckParticipant(t *testing.T) {
	c := New(200 * time.Millisecond)
	block := make(chan struct{})
	defer close(block)
	c.Go(func() { <-block }) // a plain channel: never gives the turn back
	err := c.RunFor(time.Second)
	if err == nil {
		t.Fatal("RunFor returned nil with a participant blocked on a channel")
	}
	for _, want := range []string{"participant 1", "TestWatchdogNamesAStuckParticipant", "goroutine"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("watchdog error lacks %q: %.300s", want, err)
		}
	}
	if err2 := c.RunFor(time.Second); err2 == nil {
		t.Fatal("the clock went on after its watchdog fired")
	}
}

func TestWaitOutsideAParticipantPanics(t *testing.T) {
	c := New(0)
	e := c.NewEvent()
	defer func() {
		if r := recover(); r != ErrNotParticipant {
			t.Fatalf("recovered %v, want ErrNotParticipant", r)
		}
	}()
	_ = e.Wait(context.Background())
}
