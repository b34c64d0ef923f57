package lifetime_test

import (
	"context"
	"fmt"
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
// learned room bounded at roomMaxFrac (0: off).
func withTail(sc lifetime.Scenario, tail string, roomMaxFrac float64) lifetime.Scenario {
	sc.Tail = tail
	sc.Configure = func(o *daemon.Options) { o.Server.Sched.RoomMaxFrac = roomMaxFrac }
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

// TestTailRoomHoldsTheP99: issue 28's simulated target on virtual time, for a few seeds
// — with heavy-tailed workers (the fit to real PyTorch) and the learned room on, the
// pair's stream is served within its budget after the first plan (p99 ≤ 400 ms), and
// training goes on.
func TestTailRoomHoldsTheP99(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		sc := withTail(pair("gmd", 6*time.Minute, seed), "pytorch-cpu", tailRoomMaxFrac)
		res := run(t, sc)
		if res.FirstPlanS < 0 {
			t.Fatalf("seed %d: no plan", seed)
		}
		s := res.Streams[0]
		if s.P99AfterPlanMS <= 0 || s.P99AfterPlanMS > sc.Infer[0].LatencyMS {
			t.Errorf("seed %d: p99 after the plan %.1f ms, budget %.0f ms (%d of %d late)", seed, s.P99AfterPlanMS, sc.Infer[0].LatencyMS, s.LateAfterPlan, s.ServedAfterPlan)
		}
		if totalSamples(res) <= 0 {
			t.Errorf("seed %d: no training", seed)
		}
	}
}

// BenchmarkTailTable prints issue 28's simulated-target table (docs/runtime.md): for
// each seed, the pair and the two streams, with the same workers without tails and with
// the PyTorch tails, the learned room off and on. FULCRUM_TAIL_SEEDS (default 10),
// FULCRUM_TAIL_MIN (virtual minutes per run, default 10):
//
//	go test -run '^$' -bench TailTable -benchtime 1x -v ./fulcrum/lifetime/
func BenchmarkTailTable(b *testing.B) {
	seeds, mins := envInt("FULCRUM_TAIL_SEEDS", 10), envInt("FULCRUM_TAIL_MIN", 10)
	d := time.Duration(mins) * time.Minute
	for b.Loop() {
		for _, sn := range []struct {
			name string
			sc   func(time.Duration, int64) lifetime.Scenario
		}{{"pair", func(d time.Duration, s int64) lifetime.Scenario { return pair("gmd", d, s) }}, {"two streams", twoStreams}} {
			for _, room := range []float64{0, tailRoomMaxFrac} {
				var out strings.Builder
				fmt.Fprintf(&out, "\n%s, %s of virtual time, room_max_frac %g\n", sn.name, d, room)
				fmt.Fprintf(&out, "| seed | p99 after plan ms (no tail / tail) | late after plan (tail) | training samples (no tail / tail) | tail ÷ no tail | paused s (no tail / tail) | replans (no tail / tail) | step-downs (no tail / tail) |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")
				for seed := int64(1); seed <= int64(seeds); seed++ {
					var r [2]lifetime.Result
					for i, tail := range []string{"", "pytorch-cpu"} {
						res, err := lifetime.Run(context.Background(), withTail(sn.sc(d, seed), tail, room))
						if err != nil {
							b.Fatal(err)
						}
						r[i] = res
					}
					var p99, late []string
					for i := range r[1].Streams {
						a, t := r[0].Streams[i], r[1].Streams[i]
						p99 = append(p99, fmt.Sprintf("%.0f / %.0f", a.P99AfterPlanMS, t.P99AfterPlanMS))
						late = append(late, fmt.Sprintf("%.2f %%", 100*float64(t.LateAfterPlan)/max(float64(t.ServedAfterPlan), 1)))
					}
					n0, n1 := totalSamples(r[0]), totalSamples(r[1])
					fmt.Fprintf(&out, "| %d | %s | %s | %.0f / %.0f | %.2f | %.0f / %.0f | %d / %d | %d / %d |\n", seed,
						strings.Join(p99, "; "), strings.Join(late, "; "), n0, n1, n1/max(n0, 1), r[0].TrainPausedS, r[1].TrainPausedS,
						countEvents(r[0], control.KindReplan), countEvents(r[1], control.KindReplan),
						countEvents(r[0], control.KindStepDown), countEvents(r[1], control.KindStepDown))
				}
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
