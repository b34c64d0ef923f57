package control

import (
	"testing"
	"time"
)

// Rule 6's hold doubles after a step up that a latency break followed soon after
// (upbackoff.go): the streams break their budget at whatever a step up lands on and sit
// below the hysteresis band wherever a step down lands. With a fixed hold the controller
// went down and up every ~10 s, each round a window of late requests (two streams with
// heavy-tailed micro-batches, docs/runtime.md); now each round waits twice as long below
// the band before the next step up.
func TestStepUpHoldDoublesAfterBrokenStepUps(t *testing.T) {
	e, c, _ := overshootRun(t, 1.03)
	streams := []*slowStream{e.slowStream(tInfer), e.slowStream(tInfer2)}
	var downAt []time.Time
	var waits []time.Duration // from a step down to the step up after it
	evs := c.Events().List(0)
	seen := len(evs)
	broken := false // the configuration in force came from a step up
	for _, ev := range evs {
		broken = ev.Kind == KindStepUp || (broken && ev.Kind != KindStepDown)
	}
	for range 240 {
		lat := 255.0
		if broken {
			lat = 309
		}
		cur := c.Status().Current
		for i, s := range streams {
			s.serveBatches(t, e.sched, 4, max(cur.Streams[i].Batch, 1), lat)
		}
		e.tick(c, time.Second)
		evs := c.Events().List(0)
		for _, ev := range evs[seen:] {
			switch ev.Kind {
			case KindStepDown:
				broken = false
				downAt = append(downAt, ev.Time)
			case KindStepUp:
				broken = true
				if len(downAt) > 0 {
					waits = append(waits, ev.Time.Sub(downAt[len(downAt)-1]))
				}
			}
			t.Logf("%s: %s", ev.Kind, ev.Reason)
		}
		seen = len(evs)
	}
	if len(waits) < 3 {
		t.Fatalf("%d step ups after a step down (waits %v): the premise needs three rounds", len(waits), waits)
	}
	t.Logf("waits below the band before each step up: %v", waits)
	for i := 1; i < 3; i++ {
		if waits[i] < waits[i-1]+c.cfg.Hold/2 {
			t.Errorf("step up %d waited %s after its step down, step up %d %s: want the hold doubled after a step up broken soon after", i+1, waits[i], i, waits[i-1])
		}
	}
}
