package control

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/fulcrum/search"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// capture runs GMD and keeps what its profiler knew when it answered: the profiles the
// benchmark then decides over.
type capture struct {
	search.Searcher
	known map[string][]plan.ModeProfile // by budgets
}

func (c *capture) Search(ctx context.Context, p search.Problem, prof search.Profiler) (search.Result, error) {
	res, err := c.Searcher.Search(ctx, p, prof)
	c.known[fmt.Sprint(p.Budgets)] = prof.Known()
	return res, err
}

// The daemon and the benchmark decide alike (issue 15): the benchmark runs GMD on a
// noisy replay of the simulator's truth with fulcrumd's default decision rules; the
// profiles GMD took (repeats pooled) are written to a real store, and a controller over
// a scheduler with fulcrumd's defaults plans from that store. It must apply the
// configuration the benchmark scored, and claim it (or pause training) alike.
func TestControllerDecidesAsBench(t *testing.T) {
	// fresh is an env whose scheduler has fulcrumd's default configuration.
	fresh := func() *env {
		e := newEnv(t, sched.NewFakeClock())
		sc := sched.DefaultConfig()
		sc.TrustReportedDurations = true
		e.sched = sched.New(sc, e.clock, nil)
		return e
	}
	e := fresh()
	lv := e.board.sp.Levels()
	var rows []truth.Row
	for _, g := range lv.GPUHz {
		for _, emc := range lv.EMCHz {
			m := powermode.Mode{Cores: slices.Max(lv.Cores), CPUKHz: slices.Max(lv.CPUKHz), GPUHz: g, EMCHz: emc}
			rows = append(rows, truth.Row{Workload: tTrain, Role: truth.Train, Mode: m, Batch: 32,
				TimeMS: e.models[tTrain].TimeMS(e.spec, m, 32), PowerMW: e.models[tTrain].PowerMW(e.spec, m, 32)})
			for _, b := range []int{1, 2, 4, 8} {
				rows = append(rows, truth.Row{Workload: tInfer, Role: truth.Infer, Mode: m, Batch: b,
					TimeMS: e.models[tInfer].TimeMS(e.spec, m, b), PowerMW: e.models[tInfer].PowerMW(e.spec, m, b)})
			}
		}
	}
	tab, err := truth.NewTable(rows)
	if err != nil {
		t.Fatal(err)
	}
	rules := DecisionRules(DefaultConfig(), sched.DefaultConfig())
	cap := &capture{known: map[string][]plan.ModeProfile{}}
	budgets := []plan.Budgets{
		{RateRPS: 20, LatencyMS: 150, PowerMW: 30000},
		{RateRPS: 20, LatencyMS: 400, PowerMW: 45000},
		{RateRPS: 30, LatencyMS: 100, PowerMW: 25000},
		{RateRPS: 20, LatencyMS: 40, PowerMW: 15000}, // nothing fits
	}
	var feasible, paused int
	for _, b := range budgets {
		rep, err := bench.RunBench(context.Background(), bench.BenchSpec{
			Truth: tab, RatesRPS: []float64{b.RateRPS}, LatenciesMS: []float64{b.LatencyMS}, PowersMW: []float64{b.PowerMW},
			Searchers: []string{"gmd"}, Noise: rules.NoiseRel, Seed: 7, Parallel: 1, Rules: rules,
			Build: func(string) (search.Searcher, error) {
				g, err := search.New("gmd", search.Env{})
				cap.Searcher = g
				return cap, err
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		o := rep.Outcomes[0][0]
		known := cap.known[fmt.Sprint(o.Budgets)]
		if len(known) < 3 {
			t.Fatalf("%+v: GMD profiled %d modes", b, len(known))
		}
		repeated := 0
		// A fresh env (and store) per configuration, holding exactly what GMD measured.
		e := fresh()
		st := e.store
		now := time.Now().UTC()
		put := func(w string, role truth.Role, m powermode.Mode, batch, reps int, ms, mw float64) {
			if err := st.Put(store.Profile{Board: e.spec.Name, Workload: w, Role: role, Mode: m, Batch: batch,
				TimeMS: store.TimeStats{Mean: ms, P50: ms, P95: ms}, PowerMW: store.PowerStats{Mean: mw},
				Samples: 5, StartedAt: now, FinishedAt: now, Source: store.SourceSim, Repeats: reps}); err != nil {
				t.Fatal(err)
			}
		}
		for _, mp := range known {
			if mp.Repeats > 1 {
				repeated++
			}
			put(tTrain, truth.Train, mp.Mode, mp.Train.Batch, mp.Repeats, mp.Train.TimeMS, mp.Train.PowerMW)
			for _, ip := range mp.Infer {
				put(tInfer, truth.Infer, mp.Mode, ip.Batch, mp.Repeats, ip.TimeMS, ip.PowerMW)
			}
		}
		// Serving alone off: a paused plan runs the decision's configuration as the bench
		// scored it (with it on, a paused plan may serve the streams elsewhere:
		// TestPausedPlanServesTheStreamsAlone).
		ctl := e.controller(Config{ServeAloneOff: true}, plan.Targets{RateRPS: b.RateRPS, LatencyMS: b.LatencyMS, PowerMW: b.PowerMW})
		if got := ctl.Rules(); got != rules {
			t.Fatalf("controller rules %+v, bench's %+v", got, rules)
		}
		_, _ = e.register(nil)
		e.board.set(10000, nil)
		e.tick(ctl, 100*time.Millisecond)
		cur := ctl.Status().Current
		if cur == nil {
			t.Fatalf("%+v: the controller planned nothing from %d stored profiles; events %v", b, len(known), kinds(ctl.Events().List(0)))
		}
		d := o.Decision
		if cur.Mode != d.Best.Mode || cur.Batch() != d.Best.Batch || cur.Predicted.Feasible != d.Feasible {
			t.Errorf("%+v: controller applied %s batch %d (claimed %v), bench scored %s batch %d (claimed %v)", b,
				cur.Mode.Human(), cur.Batch(), cur.Predicted.Feasible, d.Best.Mode.Human(), d.Best.Batch, d.Feasible)
		}
		if paused := e.sched.Snapshot().TrainingPaused; paused != !d.Feasible {
			t.Errorf("%+v: training paused %v, decision claimed %v", b, paused, d.Feasible)
		}
		if d.Feasible {
			feasible++
		} else {
			paused++
		}
		t.Logf("%+v: %d profiles (%d repeated), %s batch %d, P %.4f, bench status %s", b, len(known), repeated, d.Best.Mode.Human(), d.Best.Batch, d.PFeasible, o.Status)
	}
	if feasible == 0 || paused == 0 {
		t.Errorf("%d claimed, %d paused: the cases should cover both", feasible, paused)
	}
}
