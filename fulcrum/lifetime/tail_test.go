package lifetime_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon"
	"github.com/fulcrum-edge/fulcrum/fulcrum/lifetime"
	"github.com/fulcrum-edge/fulcrum/internal/testboard"
)

// tailRoomMaxFrac is the learned admission room's bound measured with heavy tails
// (docs/runtime.md "The learned admission room").
const tailRoomMaxFrac = 0.5

// twoStreams is TestTwoStreamsTwoJobs' scenario: two jobs, two streams with their own
// budgets (400 and 300 ms).
func twoStreams(d time.Duration, seed int64) lifetime.Scenario {
	return lifetime.Scenario{Board: testboard.AGXOrin, Train: []string{"resnet18-train", "mobilenetv3-train"},
		Infer:         []lifetime.Stream{{Workload: "resnet50-infer", RateRPS: 8, LatencyMS: 400}, {Workload: "yolov8n-infer", RateRPS: 10, LatencyMS: 300}},
		PowerBudgetMW: 35000, Searcher: "gmd", Duration: d, Seed: seed}
}

// withTail is sc with heavy-tailed workers (tail "pytorch-cpu") or not (""), and the
// learned room bounded at roomMaxFrac (0: off). Live refinement (issue 31) is off: these
// runs compare the learned room alone (issue 28's table in docs/runtime.md was measured
// without it; with it the room-off baseline has fewer late requests, 1.55 % against
// the 2 % the comparison needs, seed 1).
func withTail(sc lifetime.Scenario, tail string, roomMaxFrac float64) lifetime.Scenario {
	sc.Tail = tail
	sc.Configure = func(o *daemon.Options) {
		o.Server.Sched.RoomMaxFrac = roomMaxFrac
		o.Control.Refine.Enabled = false
	}
	return sc
}

func totalSamples(r lifetime.Result) float64 {
	sum := 0.0
	for _, v := range r.TrainSamples {
		sum += v
	}
	return sum
}

func countEvents(r lifetime.Result, k control.Kind) int {
	n := 0
	for _, e := range r.Events {
		if e.Kind == k && e.Err == "" {
			n++
		}
	}
	return n
}

// TestTailRoomCutsLateRequests: issue 28's simulated scenario on virtual time, for a few
// seeds — the pair's workers with heavy-tailed turn times (the fit to real PyTorch).
// With the controller's latency pause off (controller.latency_pause_off, the room the
// only lever) and the learned room off, the fixed admission rule does not see the tails
// and the stream runs far over the 1 % of late requests its p99 budget allows; with the
// room on (room_max_frac 0.5) the late fraction after the first plan is cut at least
// threefold and the p99 comes down, while training goes on. With fulcrumd's defaults
// (room off, the latency rule's last resort on: docs/controller.md rule 4) the p99 is
// within the budget: the last resort pauses training when nothing shorter is stored.
// (Training within 10 % of the same workers without tails is not met: docs/runtime.md.)
func TestTailRoomCutsLateRequests(t *testing.T) {
	for seed := int64(1); seed <= 2; seed++ {
		def := run(t, withTail(pair("gmd", 5*time.Minute, seed), "pytorch-cpu", 0))
		if s := def.Streams[0]; s.ServedAfterPlan < 1000 || s.P99AfterPlanMS > s.LatencyMS || s.LateAfterPlan*100 > s.ServedAfterPlan {
			t.Errorf("seed %d, defaults: p99 after the plan %.0f ms against %.0f, %d of %d late: want within, the last resort pausing training", seed, s.P99AfterPlanMS, s.LatencyMS, s.LateAfterPlan, s.ServedAfterPlan)
		}
		var late [2]float64
		var p99 [2]float64
		for i, room := range []float64{0, tailRoomMaxFrac} {
			sc := withTail(pair("gmd", 5*time.Minute, seed), "pytorch-cpu", room)
			roomOnly := sc.Configure
			sc.Configure = func(o *daemon.Options) { roomOnly(o); o.Control.LatencyPauseOff = true }
			res := run(t, sc)
			if res.FirstPlanS < 0 {
				t.Fatalf("seed %d, room %g: no plan", seed, room)
			}
			s := res.Streams[0]
			if s.ServedAfterPlan < 1000 {
				t.Fatalf("seed %d, room %g: %d requests served after the plan", seed, room, s.ServedAfterPlan)
			}
			late[i], p99[i] = float64(s.LateAfterPlan)/float64(s.ServedAfterPlan), s.P99AfterPlanMS
			if totalSamples(res) <= 0 {
				t.Errorf("seed %d, room %g: no training", seed, room)
			}
		}
		t.Logf("seed %d: late after the plan %.2f %% → %.2f %%, p99 %.0f → %.0f ms (room off → on)", seed, 100*late[0], 100*late[1], p99[0], p99[1])
		if late[0] <= 0.02 {
			t.Errorf("seed %d: with the room off only %.2f %% late: the tails do not reach the p99", seed, 100*late[0])
		}
		if late[1] > late[0]/3 || p99[1] >= p99[0] {
			t.Errorf("seed %d: the learned room took late requests from %.2f %% to %.2f %%, p99 %.0f → %.0f ms", seed, 100*late[0], 100*late[1], p99[0], p99[1])
		}
	}
}

// BenchmarkTailTable prints issue 28's simulated-target table (docs/runtime.md): for
// each seed, the pair and the two streams, with the same workers without tails and with
// the PyTorch tails, the learned room off and on. FULCRUM_TAIL_SEEDS (default 10),
// FULCRUM_TAIL_MIN (virtual minutes per run, default 10), FULCRUM_TAIL_MICRO=1 (the
// trainers declare micro-batches, Scenario.MicroBatches, in both columns):
//
//	go test -run '^$' -bench TailTable -benchtime 1x -v ./fulcrum/lifetime/
func BenchmarkTailTable(b *testing.B) {
	seeds, mins := envInt("FULCRUM_TAIL_SEEDS", 10), envInt("FULCRUM_TAIL_MIN", 10)
	micro := envInt("FULCRUM_TAIL_MICRO", 0) == 1
	d := time.Duration(mins) * time.Minute
	for b.Loop() {
		for _, sn := range []struct {
			name string
			sc   func(time.Duration, int64) lifetime.Scenario
		}{{"pair", func(d time.Duration, s int64) lifetime.Scenario { return pair("gmd", d, s) }}, {"two streams", twoStreams}} {
			for _, room := range []float64{0, tailRoomMaxFrac} {
				var out strings.Builder
				fmt.Fprintf(&out, "\n%s, %s of virtual time, room_max_frac %g, micro-batches %v\n", sn.name, d, room, micro)
				within, lateMax, lateSum, ratioMin, ratioMax := 0, 0.0, 0.0, math.Inf(1), 0.0
				fmt.Fprintf(&out, "| seed | p99 after plan ms (no tail / tail) | late after plan (tail) | training samples (no tail / tail) | tail ÷ no tail | paused s (no tail / tail) | replans (no tail / tail) | step-downs (no tail / tail) | micro-batch turns (no tail / tail) |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
				for seed := int64(1); seed <= int64(seeds); seed++ {
					var r [2]lifetime.Result
					for i, tail := range []string{"", "pytorch-cpu"} {
						sc := withTail(sn.sc(d, seed), tail, room)
						sc.MicroBatches = micro
						res, err := lifetime.Run(context.Background(), sc)
						if err != nil {
							b.Fatal(err)
						}
						r[i] = res
					}
					var p99, late []string
					ok := true
					for i := range r[1].Streams {
						a, t := r[0].Streams[i], r[1].Streams[i]
						p99 = append(p99, fmt.Sprintf("%.0f / %.0f", a.P99AfterPlanMS, t.P99AfterPlanMS))
						lf := 100 * float64(t.LateAfterPlan) / max(float64(t.ServedAfterPlan), 1)
						late = append(late, fmt.Sprintf("%.2f %%", lf))
						ok = ok && t.ServedAfterPlan > 0 && t.P99AfterPlanMS <= t.LatencyMS
						lateMax, lateSum = max(lateMax, lf), lateSum+lf/float64(len(r[1].Streams))
					}
					if ok {
						within++
					}
					n0, n1 := totalSamples(r[0]), totalSamples(r[1])
					ratioMin, ratioMax = min(ratioMin, n1/max(n0, 1)), max(ratioMax, n1/max(n0, 1))
					fmt.Fprintf(&out, "| %d | %s | %s | %.0f / %.0f | %.2f | %.0f / %.0f | %d / %d | %d / %d | %d / %d |\n", seed,
						strings.Join(p99, "; "), strings.Join(late, "; "), n0, n1, n1/max(n0, 1), r[0].TrainPausedS, r[1].TrainPausedS,
						countEvents(r[0], control.KindReplan), countEvents(r[1], control.KindReplan),
						countEvents(r[0], control.KindStepDown), countEvents(r[1], control.KindStepDown), r[0].MicroTurns, r[1].MicroTurns)
				}
				fmt.Fprintf(&out, "with tails: every stream's p99 after the plan within its budget in %d of %d seeds; late after the plan mean %.2f %%, max %.2f %%; training tail ÷ no tail %.2f–%.2f\n",
					within, seeds, lateSum/float64(seeds), lateMax, ratioMin, ratioMax)
				b.Log(out.String())
			}
		}
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestTailTurnPastTheHoldLimit: a tail can hold a turn past the scheduler's hold limit
// (inference's reaches 28× the median, hold_factor is 10; seed 9 of the two streams did
// in the table of docs/runtime.md). fulcrumd takes the turn back and drops the worker, and
// the simulated worker registers again as a real one reconnects: the run goes on (it
// failed with "turn_expired" before) and counts it. A hold limit of 2× the expected time
// makes it happen within minutes here.
func TestTailTurnPastTheHoldLimit(t *testing.T) {
	sc := withTail(pair("gmd", 3*time.Minute, 1), "pytorch-cpu", 0)
	sc.Configure = func(o *daemon.Options) {
		o.Server.Sched.HoldFactor, o.Server.Sched.HoldMin = 2, time.Millisecond
	}
	res := run(t, sc)
	if res.HoldExpired == 0 {
		t.Fatal("no turn past a hold limit of 2× the expected time under the tails")
	}
	if s := res.Streams[0]; s.Served < s.Requests/2 || totalSamples(res) <= 0 {
		t.Errorf("after %d turns taken back: served %d of %d requests, trained %v", res.HoldExpired, s.Served, s.Requests, res.TrainSamples)
	}
	t.Logf("%d turns taken back", res.HoldExpired)
}
