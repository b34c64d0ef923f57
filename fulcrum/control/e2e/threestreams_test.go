package e2e_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon"
	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon/simworker"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/profiler/store/storetest"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// reproEnv runs the three-stream measurements (docs/controller.md "Three streams after a
// search"): they log figures for a person to read and assert only that a plan is made;
// the search variant can stall (left to do there), so CI does not run them.
const reproEnv = "FULCRUM_E2E_THREE_STREAMS"

func TestThreeStreamsSeeded(t *testing.T) {
	if os.Getenv(reproEnv) == "" {
		t.Skip("a 65 s measurement (mode changes, predicted vs measured power): set " + reproEnv + "=1 to run it")
	}
	threeStreams(t, true)
}

func TestThreeStreamsAfterSearch(t *testing.T) {
	if os.Getenv(reproEnv) == "" {
		t.Skip("a live three-stream search then 60 s (up to 7 min): set " + reproEnv + "=1 to run it")
	}
	threeStreams(t, false)
}

// Three inference streams and one trainer on the simulated AGX Orin (issue 34 item 3):
// from the simulator's truth at 13 modes, or from a live search on an empty store, then
// 60 s of watching: the mode changes, predicted against measured power, and the live
// profiles' power against the truth.
func threeStreams(t *testing.T, seeded bool) {
	spec := testboard.Spec(t, testboard.AGXOrin)
	models := testboard.Workloads(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "board")
	testboard.Start(t, testboard.Sim(t, root, spec, sim.Options{Workloads: models, Interval: 50 * time.Millisecond}))
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	// What a three-stream search leaves: every workload profiled at 13 modes, here the
	// simulator's noise-free truth, so that what follows is the controller's doing.
	st := storetest.OpenAt(t, filepath.Join(state, "profiles.db"), store.Options{})
	modes := threeStreamModes(spec)
	if !seeded {
		modes = nil
	}
	for _, m := range modes {
		putTruth(t, st, spec, models[trainWL], truth.Train, m, models[trainWL].Batch)
		for _, n := range []string{inferWL, streamWL, thirdWL} {
			for _, b := range models[n].BatchSizes() {
				putTruth(t, st, spec, models[n], truth.Infer, m, b)
			}
		}
	}
	st.Close()
	log, logs := captureLog(&slog.HandlerOptions{Level: slog.LevelInfo})
	ctlCfg := control.DefaultConfig()
	ctlCfg.MaxProfiles = 8
	ctlCfg.Live = control.LiveOptions{Warmup: 1, Samples: 3, MinTime: 200 * time.Millisecond}
	ctx := context.Background()
	sc := sched.DefaultConfig() // fulcrumd's: ProfileWait lets long profile batches in
	d, err := daemon.Open(ctx, daemon.Options{
		Server:   daemon.Config{RuntimeDir: filepath.Join(dir, "run"), Sched: sc},
		StateDir: state, Board: "sim:agx-orin-64gb", BoardRoot: root, Log: log,
		Control: ctlCfg, Targets: plan.Targets{LatencyMS: latencyMS, PowerMW: 30000},
		API: server.Config{Group: "-", AllowUIDs: []int{os.Getuid()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	dctx, stopDaemon := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- d.Run(dctx) }()
	defer func() {
		stopDaemon()
		<-ran
		if t.Failed() {
			t.Logf("fulcrumd log:\n%s", logs)
		}
	}()
	cl := client.New(filepath.Join(dir, "run", api.SocketName))
	defer cl.Close()
	pl := &powerLog{}
	plCtx, stopPL := context.WithCancel(ctx)
	defer stopPL()
	go pl.run(plCtx, d.Board)

	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	var wg sync.WaitGroup
	run := 100 * time.Second
	if !seeded {
		run = 400 * time.Second
	}
	// A live search profiles at modes (115 MHz CPU) where busy streams keep the profile
	// batches out: such a mode is abandoned as saturated after 3 × profile_wait_ms
	// (docs/controller.md "The live profiler"), so the search runs at the full rates
	// (before, it ran at a quarter of them: at the full rates it took minutes).
	t0 := time.Now()
	for i, w := range []struct {
		name string
		rate float64
	}{{inferWL, 8}, {streamWL, 20}, {thirdWL, 15}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = simworker.Run(wctx, simworker.Options{Role: proto.RoleInfer, Workload: models[w.name], Spec: spec, Root: root,
				Socket: d.Server.SocketPath(), Batch: 1, Trace: steady(w.rate, run, uint64(10+i)),
				LatencyBudget: time.Duration(latencyMS) * time.Millisecond, Seed: uint64(20 + i)})
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = simworker.Run(wctx, simworker.Options{Role: proto.RoleTrain, Workload: models[trainWL], Spec: spec, Root: root,
			Socket: d.Server.SocketPath(), Seed: 1})
	}()
	defer func() { stopWorkers(); wg.Wait() }()

	done, ok := waitEvent(ctx, t, cl, 0, string(control.KindPlan), t0.Add(run-70*time.Second), nil)
	if !ok {
		t.Fatalf("no plan")
	}
	t.Logf("plan after %.1fs: %s", done.Time.Sub(t0).Seconds(), done.Message)
	time.Sleep(60 * time.Second)
	r, err := cl.Events(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	changes := 0
	var last string
	for _, e := range r.Events {
		t.Logf("event %d +%.2fs %s: %s %s", e.Seq, e.Time.Sub(t0).Seconds(), e.Kind, e.Message, e.Data)
		if e.Seq >= done.Seq && e.Kind == string(control.KindApply) && strings.Contains(e.Message, "applied in") {
			if m, _, _ := strings.Cut(e.Message, " and "); m != last {
				changes++
				last = m
				t.Logf("  power measured 1 s after +%.1fs: %.1f W", e.Time.Add(2*time.Second).Sub(t0).Seconds(), pl.avg(e.Time.Add(2*time.Second)))
			}
		}
	}
	// The stored profiles against the simulator's truth: what the live profiler measured.
	if ps, err := d.Store.List(store.Filter{Board: spec.Name}); err == nil {
		type span struct{ lo, hi float64 }
		ratios := map[string]*span{}
		for _, p := range ps {
			w := models[p.Workload]
			if w == nil || p.Source != store.SourceLive {
				continue
			}
			r := p.PowerMW.Mean / w.PowerMW(spec, p.Mode, p.Batch)
			key := string(p.Role)
			if p.Role == truth.Infer && p.TimeMS.Mean < 100 {
				key += " (batch under 100 ms)"
			}
			if sp := ratios[key]; sp == nil {
				ratios[key] = &span{r, r}
			} else {
				sp.lo, sp.hi = min(sp.lo, r), max(sp.hi, r)
			}
		}
		for k, sp := range ratios {
			t.Logf("live-profiled power / simulator truth, %s: %.2f to %.2f", k, sp.lo, sp.hi)
		}
	}
	as, _ := cl.Status(ctx)
	var b strings.Builder
	fmt.Fprintf(&b, "%+v", as)
	t.Logf("status: %s", b.String())
	t.Logf("mode changes in the 60 s after the plan: %d", changes)
}

// steady is Poisson arrivals at rate r until end.
func steady(r float64, end time.Duration, seed uint64) []time.Duration {
	var out []time.Duration
	for _, at := range trace(r, end, seed) {
		if at < doubleAt {
			out = append(out, at)
		}
	}
	// past doubleAt the trace doubles its rate: keep the rate steady by thinning
	for i, at := range trace(r, end, seed) {
		if at >= doubleAt && i%2 == 0 {
			out = append(out, at)
		}
	}
	return out
}

const thirdWL = "mobilenetv3-infer"

// threeStreamModes are 13 modes as a search walks them: the seeded presets and GPU sweep,
// and fewer cores at lower clocks.
func threeStreamModes(spec *powermode.BoardSpec) []powermode.Mode {
	out := seedModes(spec)
	for _, c := range []int{1, 2, 4, 8} {
		out = append(out, powermode.Mode{Cores: c, CPUKHz: 1728000, GPUHz: 918e6, EMCHz: 3199000000})
	}
	return out
}
