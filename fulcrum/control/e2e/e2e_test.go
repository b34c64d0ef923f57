// Package e2e_test is the controller's end-to-end test (issue 6): a simulated AGX Orin,
// an in-process fulcrumd (worker socket, scheduler, controller, control API), one
// training and one inference synthetic worker, budgets set through fulcrumctl (the control API).
package e2e_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
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

const (
	trainWL     = "resnet18-train"
	inferWL     = "resnet50-infer"
	latencyMS   = 400.0 // generous against ~100-320 ms training minibatches: CI hosts are slow
	powerW      = 35.0
	rateRPS     = 15.0
	doubleAt    = 36 * time.Second // the arrival rate doubles this long after the workers start
	window      = 30 * time.Second // measurement window after convergence
	settle      = 2 * time.Second
	sampleEvery = 50 * time.Millisecond
	// smokeTimeout bounds the smoke tests' waits for something to happen at all (a plan,
	// an applied mode): long enough for a stalled host, never a measurement.
	smokeTimeout = 60 * time.Second
)

// seedModes are the modes pre-profiled from the simulator's noise-free truth: the
// nvpmodel presets and a GPU sweep at full CPU and memory clocks.
func seedModes(spec *powermode.BoardSpec) []powermode.Mode {
	sp, _ := spec.Space()
	var out []powermode.Mode
	for _, p := range spec.NVP.Presets {
		out = append(out, sp.Snap(spec.PresetMode(p)))
	}
	for _, g := range []int64{510e6, 714e6, 918e6, 1020e6, 1122e6, 1224e6} {
		out = append(out, powermode.Mode{Cores: 12, CPUKHz: 2201600, GPUHz: g, EMCHz: 3199000000})
	}
	return out
}

func seed(t *testing.T, dbPath string, spec *powermode.BoardSpec, models map[string]*sim.Workload) int {
	t.Helper()
	st := storetest.OpenAt(t, dbPath, store.Options{})
	defer st.Close()
	modes := seedModes(spec)
	for _, m := range modes {
		putTruth(t, st, spec, models[trainWL], truth.Train, m, models[trainWL].Batch)
		for _, b := range models[inferWL].BatchSizes() {
			putTruth(t, st, spec, models[inferWL], truth.Infer, m, b)
		}
	}
	return len(modes)
}

// putTruth stores the simulator's noise-free profile of w at mode m and batch b.
func putTruth(t *testing.T, st *store.Store, spec *powermode.BoardSpec, w *sim.Workload, role truth.Role, m powermode.Mode, b int) {
	t.Helper()
	if err := st.Put(truthProfile(spec, w, role, m, b, time.Now().UTC())); err != nil {
		t.Fatal(err)
	}
}

// truthProfile is the simulator's noise-free profile of w at mode m and batch b, taken
// at now.
func truthProfile(spec *powermode.BoardSpec, w *sim.Workload, role truth.Role, m powermode.Mode, b int, now time.Time) store.Profile {
	ms, mw := w.TimeMS(spec, m, b), w.PowerMW(spec, m, b)
	return store.Profile{Board: spec.Name, Workload: w.Name, Role: role, Mode: m, Batch: b,
		TimeMS: store.TimeStats{Mean: ms, P50: ms, P95: ms}, PowerMW: store.PowerStats{Mean: mw},
		Samples: 1, PowerSamples: 1, StartedAt: now, FinishedAt: now, Source: store.SourceSim}
}

// powerLog samples board power like the controller does, independently of it.
type powerLog struct {
	mu sync.Mutex
	at []time.Time
	mw []float64
}

func (p *powerLog) run(ctx context.Context, b *daemon.Board) {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		if r, err := b.Power(ctx); err == nil {
			p.mu.Lock()
			p.at = append(p.at, time.Now())
			p.mw = append(p.mw, r.TotalMW)
			p.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// maxAvg is the highest 1 s moving average of power over [from, to], windows ending
// every 100 ms.
func (p *powerLog) maxAvg(from, to time.Time) (maxW float64, windows int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for end := from.Add(time.Second); !end.After(to); end = end.Add(100 * time.Millisecond) {
		s, n := 0.0, 0
		for i, at := range p.at {
			if at.After(end.Add(-time.Second)) && !at.After(end) {
				s += p.mw[i]
				n++
			}
		}
		if n > 0 {
			maxW = math.Max(maxW, s/float64(n)/1000)
			windows++
		}
	}
	return maxW, windows
}

func (p *powerLog) avg(to time.Time) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, n := 0.0, 0
	for i, at := range p.at {
		if at.After(to.Add(-time.Second)) && !at.After(to) {
			s += p.mw[i]
			n++
		}
	}
	return s / math.Max(float64(n), 1) / 1000
}

// trace is Poisson arrivals at rate r until doubleAt, then at 2r until end.
func trace(r float64, end time.Duration, seed uint64) []time.Duration {
	rng := rand.New(rand.NewPCG(seed, 7))
	var out []time.Duration
	at := 0.0
	for {
		rate := r
		if at >= doubleAt.Seconds() {
			rate = 2 * r
		}
		at += rng.ExpFloat64() / rate
		if at > end.Seconds() {
			return out
		}
		out = append(out, time.Duration(at*float64(time.Second)))
	}
}

// waitEvent polls the control API's event log for the first event of kind after seq
// that satisfies ok, until deadline.
func waitEvent(ctx context.Context, t *testing.T, c *client.Client, since uint64, kind string, deadline time.Time, ok func(api.Event) bool) (api.Event, bool) {
	t.Helper()
	for time.Now().Before(deadline) {
		r, err := c.Events(ctx, since)
		if err != nil {
			t.Fatalf("events: %v", err)
		}
		for _, e := range r.Events {
			if e.Kind == kind && (ok == nil || ok(e)) {
				return e, true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return api.Event{}, false
}

func lastSeq(ctx context.Context, t *testing.T, c *client.Client) uint64 {
	r, err := c.Events(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Events) == 0 {
		return 0
	}
	return r.Events[len(r.Events)-1].Seq
}

// TestControllerEndToEnd is the controller's smoke test on real time: fulcrumd with its
// sockets, the simulated board's physics loop, the synthetic worker processes' protocol
// and the real fulcrumctl binary. Its timings are reported; the timing assertions run
// on virtual time (TestControllerOnVirtualTime).
func TestControllerEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end controller test runs ~40 s; run without -short")
	}
	spec := testboard.Spec(t, testboard.AGXOrin)
	models := testboard.Workloads(t)
	dir := t.TempDir()
	// The operator's tool: budgets are set with the real fulcrumctl binary.
	ctl := filepath.Join(dir, "fulcrumctl")
	if out, err := exec.Command("go", "build", "-o", ctl, "github.com/fulcrum-edge/fulcrum/cmd/fulcrumctl").CombinedOutput(); err != nil {
		t.Fatalf("build fulcrumctl: %v\n%s", err, out)
	}
	root := filepath.Join(dir, "board")
	testboard.Start(t, testboard.Sim(t, root, spec, sim.Options{Workloads: models, Interval: 50 * time.Millisecond}))

	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	seeded := seed(t, filepath.Join(state, "profiles.db"), spec, models)

	log, logs := captureLog(&slog.HandlerOptions{Level: slog.LevelInfo})
	ctlCfg := control.DefaultConfig()
	ctlCfg.Period = 100 * time.Millisecond
	ctlCfg.PowerSample = 50 * time.Millisecond
	ctlCfg.RateTau = 1500 * time.Millisecond
	ctlCfg.RateWarmup = 1500 * time.Millisecond
	ctlCfg.DriftHold = 2 * time.Second
	ctlCfg.Hold = 3 * time.Second
	ctlCfg.Cooldown = 500 * time.Millisecond
	ctlCfg.LatencyCooldown = 3 * time.Second
	ctx := context.Background()
	d, err := daemon.Open(ctx, daemon.Options{
		Server: daemon.Config{RuntimeDir: filepath.Join(dir, "run"),
			Sched: sched.Config{DefaultTrain: 150 * time.Millisecond,
				DefaultInfer: 30 * time.Millisecond, DevK: 2, Margin: 60 * time.Millisecond,
				Window: window, RecentWindow: 3 * time.Second}},
		StateDir: state, Board: "sim:agx-orin-64gb", BoardRoot: root, Log: log,
		Control: ctlCfg, Targets: plan.Targets{LatencyMS: 1000, PowerMW: 60000},
		API:           server.Config{Group: "-", AllowUIDs: []int{os.Getuid()}},
		MetricsListen: "127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	before, err := d.Board.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dctx, stopDaemon := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- d.Run(dctx) }()
	defer func() {
		stopDaemon()
		if err := <-ran; err != nil {
			t.Errorf("daemon: %v", err)
		}
		// After a clean stop the board is back where it was and no snapshot is left.
		if _, err := os.Stat(filepath.Join(state, powermode.SnapshotFile)); !os.IsNotExist(err) {
			t.Errorf("board snapshot left in the state directory after a clean stop: %v", err)
		}
		if after, err := d.Board.Backend.Current(context.Background()); err != nil || after != before {
			t.Errorf("board after stop: %s (%v), want it restored to %s", after, err, before)
		}
		if t.Failed() {
			t.Logf("fulcrumd log:\n%s", logs)
		}
	}()

	cl := client.New(filepath.Join(dir, "run", api.SocketName))
	defer cl.Close()
	setCmd := exec.Command(ctl, "budget", "set", "--socket", filepath.Join(dir, "run", api.SocketName),
		"--latency", fmt.Sprintf("%gms", latencyMS), "--power", fmt.Sprintf("%gW", powerW), "--rate", "auto")
	if out, err := setCmd.CombinedOutput(); err != nil {
		t.Fatalf("fulcrumctl budget set: %v\n%s", err, out)
	} else {
		t.Logf("fulcrumctl budget set: %s", strings.TrimSpace(string(out)))
	}
	if b, err := cl.Budgets(ctx); err != nil || b.LatencyMS != latencyMS || b.PowerMW != powerW*1000 || !b.RateAuto {
		t.Fatalf("budgets after fulcrumctl budget set: %+v, %v", b, err)
	}

	pl := &powerLog{}
	plCtx, stopPL := context.WithCancel(ctx)
	defer stopPL()
	go pl.run(plCtx, d.Board)

	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	var wg sync.WaitGroup
	var trainErr, inferErr error
	var trainRep, inferRep simworker.Report
	t0 := time.Now()
	wg.Add(2)
	go func() {
		defer wg.Done()
		trainRep, trainErr = simworker.Run(wctx, simworker.Options{Role: proto.RoleTrain, Workload: models[trainWL], Spec: spec, Root: root,
			Socket: d.Server.SocketPath(), Seed: 1})
	}()
	go func() {
		defer wg.Done()
		inferRep, inferErr = simworker.Run(wctx, simworker.Options{Role: proto.RoleInfer, Workload: models[inferWL], Spec: spec, Root: root,
			Socket: d.Server.SocketPath(), Batch: 1, Trace: trace(rateRPS, 60*time.Second, 3),
			LatencyBudget: time.Duration(latencyMS) * time.Millisecond, Seed: 2})
	}()
	defer func() {
		stopWorkers()
		wg.Wait()
		t.Logf("train worker %+v (err %v)", trainRep, trainErr)
		t.Logf("infer worker %+v (err %v)", inferRep, inferErr)
	}()

	// What is not timing is asserted: a plan from the stored profiles (no profiling),
	// applied to the board, both workers registered, requests answered, training on, the
	// budgets set through fulcrumctl and the control API, the board restored at the stop.
	// How long each step took and the latencies and power are reported, not asserted: a
	// busy host stretches them (their assertions run on virtual time:
	// TestControllerOnVirtualTime). The waits below are timeouts for a host stalled for
	// a minute, not measurements.
	plan, ok := waitEvent(ctx, t, cl, 0, string(control.KindPlan), t0.Add(smokeTimeout), nil)
	if !ok {
		t.Fatalf("no plan event within %s of the workers starting", smokeTimeout)
	}
	t.Logf("plan after %.1fs: %s", plan.Time.Sub(t0).Seconds(), plan.Message)
	if _, ok := waitEvent(ctx, t, cl, plan.Seq, string(control.KindApply), time.Now().Add(smokeTimeout), nil); !ok {
		t.Fatalf("the plan was not applied")
	}
	st := d.Controller.Status()
	if st.Live.Profiled != 0 || st.StoredProfiles != seeded {
		t.Errorf("planning at start profiled %d modes live and saw %d stored profiles; want 0 and %d", st.Live.Profiled, st.StoredProfiles, seeded)
	}
	if st.Current == nil {
		t.Fatalf("no configuration in force after the plan was applied: %+v", st)
	}
	cur, _ := d.Board.Current(ctx)
	as, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The control API reports the board and the plan in force (the controller may have
	// moved since: compare the API's own view).
	if as.Board != spec.Name || as.Plan == nil || len(as.Workers) != 2 || as.Budgets.PowerMW != powerW*1000 || !as.Budgets.RateAuto {
		t.Fatalf("control API status %+v", as)
	}
	t.Logf("status: board at %s, plan %s (feasible %v), degraded %v", cur.Human(), as.Plan.Mode.Human(), as.Plan.Feasible, as.Degraded)

	// Reported: the window's p99 and power.
	wStart := time.Now().Add(settle)
	wEnd := wStart.Add(window)
	if wEnd.After(t0.Add(doubleAt)) {
		wEnd = t0.Add(doubleAt)
		t.Logf("the plan came late (%.1fs): the window is cut short by the rate doubling at %s", plan.Time.Sub(t0).Seconds(), doubleAt)
	}
	time.Sleep(time.Until(wEnd))
	snap := d.Server.Snapshot()
	wl, _ := snap.Workload(proto.RoleInfer, inferWL)
	maxW, nWin := pl.maxAvg(wStart, wEnd)
	t.Logf("window %s: %d requests served, p50 %.1f ms, p99 %.1f ms (budget %.0f); max 1 s power %.2f W over %d windows (budget %.0f W); mode %s batch %d",
		wEnd.Sub(wStart).Round(time.Second), wl.Latency.Count, wl.Latency.P50MS, wl.Latency.P99MS, latencyMS, maxW, nWin, powerW, st.Current.Mode.Human(), st.Current.Batch())
	if wl.Served == 0 || wl.Failed != 0 {
		t.Errorf("inference: %d requests served, %d failed; want requests answered", wl.Served, wl.Failed)
	}
	if tr, _ := snap.Workload(proto.RoleTrain, trainWL); tr.Minibatches == 0 {
		t.Errorf("training ran no minibatch")
	}

	// Reported: the re-plan after the arrival rate doubles.
	time.Sleep(time.Until(t0.Add(doubleAt)))
	since := lastSeq(ctx, t, cl)
	if rp, ok := waitEvent(ctx, t, cl, since, string(control.KindReplan), t0.Add(doubleAt+10*time.Second), func(e api.Event) bool {
		return strings.Contains(e.Message, "arrival rate drifted")
	}); ok {
		t.Logf("re-plan %.1fs after the doubling: %s", rp.Time.Sub(t0.Add(doubleAt)).Seconds(), rp.Message)
	} else {
		t.Logf("no re-plan within 10 s of the arrival rate doubling (status %+v)", d.Controller.Status().Measured)
	}
	hStart := time.Now().Add(time.Second)
	time.Sleep(4 * time.Second)
	hEnd := time.Now()
	wl, _ = d.Server.Snapshot().Workload(proto.RoleInfer, inferWL)
	maxW, nWin = pl.maxAvg(hStart, hEnd)
	t.Logf("after the doubling: recent p99 %.1f ms over %d requests, max 1 s power %.2f W over %d windows", wl.LatencyRecent.P99MS, wl.LatencyRecent.Count, maxW, nWin)

	// The power budget drops below the present draw through the control API: the
	// budgets change (asserted), the step down is reported.
	now := pl.avg(time.Now())
	newW := math.Max(now*0.8, 20)
	since = lastSeq(ctx, t, cl)
	npw := newW * 1000
	set := time.Now()
	if _, err := cl.SetBudgets(ctx, api.BudgetsUpdate{PowerMW: &npw}); err != nil {
		t.Fatal(err)
	}
	if b, err := cl.Budgets(ctx); err != nil || b.PowerMW != npw {
		t.Fatalf("budgets after lowering the power budget to %.1f W: %+v, %v", newW, b, err)
	}
	if sd, ok := waitEvent(ctx, t, cl, since, string(control.KindStepDown), set.Add(3*time.Second), nil); ok {
		t.Logf("step_down %.2fs after lowering the budget to %.1f W (draw %.1f W): %s", sd.Time.Sub(set).Seconds(), newW, now, sd.Message)
		time.Sleep(3 * time.Second)
		maxW, nWin = pl.maxAvg(time.Now().Add(-1500*time.Millisecond), time.Now())
		t.Logf("after the step down: max 1 s power %.2f W over %d windows (new budget %.1f W)", maxW, nWin, newW)
	} else {
		t.Logf("no step_down within 3 s of lowering the power budget from %.0f W to %.1f W (present draw %.1f W)", powerW, newW, now)
	}
	// The Prometheus metrics saw the served requests and the plan.
	rec := httptest.NewRecorder()
	d.Metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{`fulcrum_inference_latency_seconds_count{workload="resnet50-infer"}`, `fulcrum_controller_decisions_total{kind="plan"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if r, err := cl.Events(ctx, 0); err == nil {
		for _, e := range r.Events {
			t.Logf("event %d +%.2fs %s: %s", e.Seq, e.Time.Sub(t0).Seconds(), e.Kind, e.Message)
		}
	}
}

// daemonLog keeps fulcrumd's log, shown when a test fails.
type daemonLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *daemonLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *daemonLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// captureLog is a text logger into a daemonLog (opts may be nil).
func captureLog(opts *slog.HandlerOptions) (*slog.Logger, *daemonLog) {
	l := &daemonLog{}
	return slog.New(slog.NewTextHandler(l, opts)), l
}
