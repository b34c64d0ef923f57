package control

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// TestTrialOfTheConfirmedKeysBestTurns: a confirmed configuration that runs training
// turns other than its key's best claimed ones (a plan chose them before the live
// evidence made larger turns claimable) tries those turns as a trial of their own; an
// abandoned one backs off those turns alone — the key stays confirmed, no inference
// batch is marked — and with trial_gain out of reach nothing is tried. Before, trials
// went to other keys only and the configuration ran its first turns for good (AGX
// lifetime sweep, 30 req/s, 75 ms, 20 W: micro-batches of 4 for the hour where 8 were
// claimed, ratio 0.797).
func TestTrialOfTheConfirmedKeysBestTurns(t *testing.T) {
	for _, gain := range []float64{0.02, 10} {
		e := newEnv(t, sched.NewFakeClock())
		e.seed()
		e.seedMicro(4, 8)
		o := DefaultRefineOptions()
		o.TrialGain = gain
		c := e.controller(Config{Refine: o}, plan.Targets{LatencyMS: 60, PowerMW: 60000, RateRPS: 20})
		e.board.set(20000, nil)
		if _, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleTrain, Workload: tTrain, Batch: 32, MicroBatches: []int{4, 8}}, func(sched.Grant) {}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.sched.Register(sched.WorkerSpec{Role: proto.RoleInfer, Workload: tInfer, Batch: 1, BatchSizes: []int{1, 2, 4, 8}}, func(sched.Grant) {}); err != nil {
			t.Fatal(err)
		}
		e.tick(c, 300*time.Millisecond)
		ctx := context.Background()
		c.mu.Lock()
		if c.cur == nil {
			c.mu.Unlock()
			t.Fatal("no plan")
		}
		now := e.clock.Now()
		rates, _ := c.streamRates(now)
		key := keyOfChoice(*c.cur)
		best, ok := c.scoreKey(key, rates)
		if !ok || !c.refineDecider(rates).Claims(best) || len(best.MicroBatches) == 0 {
			c.mu.Unlock()
			t.Fatalf("the plan's key %s has no claimed micro-batch turns: %+v", c.keyWords(key), best)
		}
		// Run the key with the other micro-batch size, confirmed there.
		other := []int{4}
		if best.MicroBatches[0] == 4 {
			other = []int{8}
		}
		in, ok := c.scoreTurns(key, other, rates)
		if !ok {
			c.mu.Unlock()
			t.Fatalf("no score of %s with micro-batches of %d", c.keyWords(key), other[0])
		}
		c.decideRefined(ctx, KindReplan, "the test's turns", in.MultiEval, rates)
		if !sameTurns(microOfChoice(*c.cur), other) {
			c.mu.Unlock()
			t.Fatalf("applied %+v, want micro-batches of %d", c.cur.Train, other[0])
		}
		c.ref.confirmed = &refinePoint{key: key, eval: in.MultiEval, at: now}
		started := c.tryTurns(ctx, key, best, in, now, rates)
		gainOK := best.ObjectiveSPS >= in.ObjectiveSPS*(1+gain)
		if gain < 1 && !gainOK {
			c.mu.Unlock()
			t.Fatalf("the test's premise: micro-batches of %v train %.1f, of %d %.1f: not %g more", best.MicroBatches, best.ObjectiveSPS, other[0], in.ObjectiveSPS, gain)
		}
		if started != gainOK {
			c.mu.Unlock()
			t.Fatalf("trial_gain %g: best turns %v train %.1f, in force %.1f: started %v", gain, best.MicroBatches, best.ObjectiveSPS, in.ObjectiveSPS, started)
		}
		if !started {
			c.mu.Unlock()
			continue
		}
		if tr := c.ref.trial; tr == nil || !tr.turns || tr.key != key || keyOfChoice(*c.cur) != key || !sameTurns(microOfChoice(*c.cur), best.MicroBatches) {
			c.mu.Unlock()
			t.Fatalf("the trial: %+v, in force %+v", c.ref.trial, c.cur)
		}
		c.abandon(ctx, "a budget broke in the test", now, rates)
		back := sameTurns(microOfChoice(*c.cur), other) && keyOfChoice(*c.cur) == key
		keyFailed := c.ref.failed[key] != nil
		again := c.tryTurns(ctx, key, best, in, now, rates)
		confirmed := c.ref.confirmed != nil && c.ref.confirmed.key == key
		bad := c.isBad(tInfer, key.m, key.first())
		c.mu.Unlock()
		if !back || keyFailed || again || !confirmed || bad {
			t.Fatalf("after the abandon: back %v, key backed off %v, tried again at once %v, key confirmed %v, batch marked %v", back, keyFailed, again, confirmed, bad)
		}
		var trial, abandon bool
		for _, ev := range c.Events().List(0) {
			trial = trial || ev.Kind == KindTrial && strings.Contains(ev.Reason, "micro-batches of")
			abandon = abandon || ev.Kind == KindAbandon && strings.Contains(ev.Reason, "micro-batches of")
		}
		if !trial || !abandon {
			t.Fatalf("events name the turns: trial %v, abandon %v", trial, abandon)
		}
	}
}
