package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/apitest"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
)

var allowAll = server.Config{Policy: server.PolicyFunc(func(api.Caller) error { return nil })}

// fulcrumctl runs the whole CLI in-process and returns stdout, stderr and the error.
func fulcrumctl(ctx context.Context, args ...string) (string, string, error) {
	root := newRootCmd()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), errb.String(), err
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, err := fulcrumctl(context.Background(), args...)
	if err != nil {
		t.Fatalf("fulcrumctl %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return out
}

func TestBudgetCommands(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	sock := apitest.Serve(t, allowAll, fake)
	out := mustRun(t, "budget", "set", "--socket", sock, "--latency", "80ms", "--power", "25W", "--rate", "40", "--quantile", "p95")
	if !strings.Contains(out, "budgets set: latency 80ms (p95), power 25W, rate 40 req/s") {
		t.Fatalf("budget set printed %q", out)
	}
	want := api.Budgets{LatencyMS: 80, PowerMW: 25000, RateRPS: 40, Quantile: 0.95, RhoMax: 0.95}
	if b, _ := fake.Budgets(context.Background()); !reflect.DeepEqual(b, want) {
		t.Fatalf("budgets %+v, want %+v", b, want)
	}
	// Only the flags given change; milliwatts and "auto" are understood.
	mustRun(t, "budget", "set", "--socket", sock, "--power", "30000mW", "--rate", "auto", "--latency", "0.1s")
	want = api.Budgets{LatencyMS: 100, PowerMW: 30000, RateAuto: true, Quantile: 0.95, RhoMax: 0.95}
	if b, _ := fake.Budgets(context.Background()); !reflect.DeepEqual(b, want) {
		t.Fatalf("budgets %+v, want %+v", b, want)
	}
	if out := mustRun(t, "budget", "get", "--socket", sock); strings.TrimSpace(out) != "latency 100ms (p95), power 30W, rate auto" {
		t.Fatalf("budget get printed %q", out)
	}
	var b api.Budgets
	if err := json.Unmarshal([]byte(mustRun(t, "budget", "get", "--socket", sock, "--json")), &b); err != nil || !reflect.DeepEqual(b, want) {
		t.Fatalf("budget get --json: %+v %v", b, err)
	}

	// Rejections: by the daemon (its message, not a JSON dump) or before asking it.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--latency", "-5ms"}, "--latency -5ms is out of range (valid 0.1 ms to 600000 ms)"},
		{[]string{"--latency", "80"}, "--latency 80: give a unit, e.g. 80ms or 80s"},
		{[]string{"--power", "30000"}, "did you mean 30000mW (30 W)?"},
		{[]string{"--power", "2kW"}, "--power 2kW (2000 W) is out of range (valid 1 W to 1000 W, or none)"},
		{[]string{"--power", "0.5W"}, "--power 0.5W (0.5 W) is out of range"},
		{[]string{"--rate", "fast"}, `--rate fast: want auto`},
		{[]string{"--quantile", "p20"}, "--quantile p20: want a fraction like 0.99 or p99 (valid 0.5 to 0.99999)"},
		{[]string{}, "give at least one of --latency"},
	} {
		_, _, err := fulcrumctl(context.Background(), append([]string{"budget", "set", "--socket", sock}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("budget set %v: %v, want %q", tc.args, err, tc.want)
		}
		if strings.Contains(fmt.Sprint(err), "{") {
			t.Errorf("budget set %v: error shows JSON: %v", tc.args, err)
		}
	}
	if b, _ := fake.Budgets(context.Background()); !reflect.DeepEqual(b, want) {
		t.Fatalf("a rejected set changed the budgets: %+v", b)
	}
}

// Per-stream budgets: set through --workload, shown by budget get, dropped by --shared;
// board-wide flags with --workload are refused before asking the daemon.
func TestBudgetSetWorkload(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	sock := apitest.Serve(t, allowAll, fake)
	mustRun(t, "budget", "set", "--socket", sock, "--workload", "cam", "--latency", "50ms", "--rate", "30")
	if out := mustRun(t, "budget", "get", "--socket", sock); !strings.Contains(out, "stream cam: latency 50ms, rate 30 req/s") {
		t.Fatalf("budget get printed %q", out)
	}
	b, _ := fake.Budgets(context.Background())
	if !reflect.DeepEqual(b.Streams, []api.StreamBudgets{{Workload: "cam", LatencyMS: 50, RateRPS: 30}}) {
		t.Fatalf("streams %+v", b.Streams)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workload", "cam", "--power", "20W"}, "--power is shared by every workload"},
		{[]string{"--shared"}, "give --workload NAME"},
		{[]string{"--weight", "2"}, "give --workload NAME"},
		{[]string{"--workload", "trainer", "--weight", "0"}, "--weight 0: want a share weight from 0.01 to 1000"},
		{[]string{"--workload", "cam"}, "give --latency, --rate, --weight or --shared"},
		{[]string{"--workload", "cam", "--shared", "--latency", "50ms"}, "--shared drops the workload's own budgets"},
	} {
		_, _, err := fulcrumctl(context.Background(), append([]string{"budget", "set", "--socket", sock}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("budget set %v: %v, want %q", tc.args, err, tc.want)
		}
	}
	mustRun(t, "budget", "set", "--socket", sock, "--workload", "trainer", "--weight", "2")
	if out := mustRun(t, "budget", "get", "--socket", sock); !strings.Contains(out, "trainer: training weight 2") {
		t.Fatalf("budget get printed %q", out)
	}
	mustRun(t, "budget", "set", "--socket", sock, "--workload", "cam", "--shared")
	mustRun(t, "budget", "set", "--socket", sock, "--workload", "trainer", "--shared")
	if b, _ := fake.Budgets(context.Background()); b.Streams != nil {
		t.Fatalf("after --shared: streams %+v", b.Streams)
	}
}

func TestQuantileParsing(t *testing.T) {
	if q, err := budgetQuantile("p99.9"); err != nil || q < 0.99899 || q > 0.99901 {
		t.Errorf("quantile p99.9 = %v, %v", q, err)
	}
}

func TestNoDaemonMessage(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "control.sock")
	for _, args := range [][]string{{"status"}, {"budget", "get"}, {"workers"}, {"events"}, {"watch", "--count", "3", "--interval", "100ms"}} {
		_, _, err := fulcrumctl(context.Background(), append(args, "--socket", sock)...)
		if err == nil || !strings.Contains(err.Error(), "is fulcrumd running? (systemctl status fulcrumd) — or pass --socket") {
			t.Errorf("%v: %v", args, err)
		}
	}
	// FULCRUM_SOCKET is the default socket.
	t.Setenv(socketEnv, sock)
	if _, _, err := fulcrumctl(context.Background(), "status"); err == nil || !strings.Contains(err.Error(), sock) {
		t.Errorf("FULCRUM_SOCKET not used: %v", err)
	}
}

func withMeasurements(fake *apitest.Fake) {
	fake.SetMeasurements(
		[]api.Worker{{ID: "w1", Role: "train", Workload: "resnet18", Batch: 32, PID: 4242, UID: 1000}},
		[]api.WorkloadStats{
			{Workload: "resnet18", Role: "train", LiveWorkers: 1, Minibatches: 900, ThroughputPerS: 301.5},
			{Workload: "mobilenet", Role: "infer", LiveWorkers: 1, Requests: 1200, Served: 1190, DeadlineMisses: 3,
				ArrivalRateHz: 40.2, Latency: api.Quantiles{Count: 1190, P50MS: 21.5, P99MS: 77.25}},
		},
		&api.Power{TotalMW: 28900, Avg1sMW: 28700, Rails: []api.Rail{{Name: "VDD_GPU_SOC", PowerMW: 9100}, {Name: "VDD_CPU_CV", PowerMW: 5200}}},
	)
	fake.SetPlan(&api.Plan{Mode: apitest.Mode30W, InferBatch: 4, Feasible: true, PredLatencyMS: 62.1, PredPowerMW: 28400,
		PredThroughputSamplesPerS: 310, Rho: 0.31, Source: "stored-profiles"})
}

func TestStatusAndWorkers(t *testing.T) {
	fake := apitest.NewOrin(t, 3)
	withMeasurements(fake)
	sock := apitest.Serve(t, allowAll, fake)
	out := mustRun(t, "status", "--socket", sock)
	for _, want := range []string{
		"fulcrumd test on agx-orin-64gb", "3 stored profiles",
		"mode       8c cpu 1728MHz gpu 612MHz emc 3199MHz",
		"infer batch 4, feasible, from stored-profiles",
		"latency 62.1ms, power 28.4W, training 310.0 samples/s, inference GPU share 31%",
		"budgets    latency 100ms (p99), power 30W, rate auto",
		"28.9W (1 s avg 28.7W)  VDD_GPU_SOC 9.1W  VDD_CPU_CV 5.2W",
		"state      ok",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	var inferLine string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "mobilenet") {
			inferLine = strings.Join(strings.Fields(l), " ")
		}
	}
	if inferLine != "mobilenet infer 1 40.2 21.5 77.2 3 - 0 0" && inferLine != "mobilenet infer 1 40.2 21.5 77.3 3 - 0 0" { // the last: ROOM_MS
		t.Errorf("inference row %q", inferLine)
	}
	var st api.Status
	if err := json.Unmarshal([]byte(mustRun(t, "status", "--socket", sock, "--json")), &st); err != nil || st.Plan == nil || st.Plan.InferBatch != 4 || len(st.Workloads) != 2 {
		t.Fatalf("status --json: %+v %v", st, err)
	}
	// An infeasible plan is shown as degraded, with what to do.
	fake.SetPlan(&api.Plan{Mode: apitest.Mode30W, InferBatch: 1, Binding: "power", Source: "stored-profiles", PredPowerMW: 33000, PredLatencyMS: 60})
	out = mustRun(t, "status", "--socket", sock)
	if !strings.Contains(out, "INFEASIBLE (power budget)") || !strings.Contains(out, "power 33.0W") || !strings.Contains(out, "DEGRADED: no known configuration meets the power budget") || !strings.Contains(out, "training paused: no training turns are granted (resnet18's 301.5 samples/s is the recent window: turns before the pause or profiling turns)") {
		t.Errorf("infeasible status:\n%s", out)
	}
	// A plan the board refused is shown as not in force, with the board's error.
	fake.SetPlan(&api.Plan{Mode: apitest.Mode30W, InferBatch: 1, Feasible: true, Source: "stored-profiles", PredPowerMW: 16000, PredLatencyMS: 60,
		ApplyError: "write min_freq: is a directory"})
	out = mustRun(t, "status", "--socket", sock)
	if !strings.Contains(out, "feasible, NOT IN FORCE (the board refused the mode change: write min_freq: is a directory)") {
		t.Errorf("status with a refused plan:\n%s", out)
	}
	out = mustRun(t, "workers", "--socket", sock)
	if !strings.Contains(strings.Join(strings.Fields(out), " "), "w1 train resnet18 32 4242 1000 false 0") {
		t.Errorf("workers:\n%s", out)
	}
}

func TestStatusOperatorPlan(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	// A held operator mode with no stored profile has no prediction: say so, not "infeasible".
	fake.SetPlan(&api.Plan{Mode: apitest.Mode30W, Binding: "unknown", Source: "operator"})
	sock := apitest.Serve(t, allowAll, fake)
	out := mustRun(t, "status", "--socket", sock)
	if !strings.Contains(out, "infer batch -, not evaluated (no stored profile at this mode), from operator") || strings.Contains(out, "predicted") {
		t.Fatalf("status:\n%s", out)
	}
	// No power reading in the last second: said so, not a fake 0.0 W.
	fake.SetMeasurements(nil, nil, &api.Power{TotalMW: 5000})
	out = mustRun(t, "status", "--socket", sock)
	if !strings.Contains(out, "5.0W (1 s avg: no reading in the last second)") {
		t.Fatalf("status without a 1 s average:\n%s", out)
	}
}

func TestModeCommands(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	sock := apitest.Serve(t, allowAll, fake)
	out := mustRun(t, "mode", "--socket", sock)
	if !strings.Contains(out, "current  8c cpu 1728MHz gpu 612MHz emc 3199MHz  [8/1728000/612000000/3199000000]") ||
		!strings.Contains(out, "gpu      306 408 612 816 1020 1300.5 MHz") {
		t.Fatalf("mode:\n%s", out)
	}
	out = mustRun(t, "mode", "apply", "--socket", sock, "--gpu-hz", "408000000", "--cores", "4")
	want := powermode.Mode{Cores: 4, CPUKHz: 1728000, GPUHz: 408000000, EMCHz: 3199000000}
	if mi, _ := fake.Mode(context.Background()); mi.Current != want || !mi.Held {
		t.Fatalf("mode after apply: %+v (printed %q)", mi, out)
	}
	if !strings.Contains(mustRun(t, "mode", "--socket", sock), "(held: applied by an operator") {
		t.Error("mode does not say it is held")
	}
	_, _, err := fulcrumctl(context.Background(), "mode", "apply", "--socket", sock, "--gpu-hz", "400000000")
	if err == nil || !strings.Contains(err.Error(), "--gpu-hz 400000000 is not a GPU level of agx-orin-64gb") {
		t.Fatalf("bad level: %v", err)
	}
	if _, _, err := fulcrumctl(context.Background(), "mode", "apply", "--socket", sock); err == nil || !strings.Contains(err.Error(), "give at least one of --cores") {
		t.Fatalf("apply without knobs: %v", err)
	}
}

func TestOptimizeCommand(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	fake.OptimizeFunc = func(_ context.Context, req api.OptimizeRequest) (api.OptimizeResult, error) {
		m := apitest.Mode30W
		m.GPUHz = 816000000
		return api.OptimizeResult{Method: req.Method, Profiled: 14, Reused: 2, StopReason: "step 1 and no neighbour improves",
			Plan: api.Plan{Mode: m, InferBatch: 8, Feasible: true, PredLatencyMS: 70, PredPowerMW: 29500, PredThroughputSamplesPerS: 355}}, nil
	}
	sock := apitest.Serve(t, allowAll, fake)
	out := mustRun(t, "optimize", "--socket", sock, "--method", "als")
	for _, want := range []string{"als: profiled 14 new modes (2 from the store)", "stopped: step 1 and no neighbour improves",
		"plan: 8c cpu 1728MHz gpu 816MHz emc 3199MHz, infer batch 8, meets every budget", "power 29.5W, training 355.0 samples/s"} {
		if !strings.Contains(out, want) {
			t.Errorf("optimize lacks %q:\n%s", want, out)
		}
	}
	if mi, _ := fake.Mode(context.Background()); mi.Current.GPUHz != 816000000 {
		t.Errorf("optimize did not reach the controller: %+v", mi)
	}
	if _, _, err := fulcrumctl(context.Background(), "optimize", "--socket", sock, "--method", "sgd"); err == nil || !strings.Contains(err.Error(), "want gmd or als") {
		t.Errorf("bad method: %v", err)
	}
}

func TestRefusedCaller(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	sock := apitest.Serve(t, server.Config{Policy: server.PolicyFunc(func(c api.Caller) error {
		return fmt.Errorf("uid %d may not change fulcrumd: only root and members of the group %q may", c.UID, "fulcrum")
	})}, fake)
	_, _, err := fulcrumctl(context.Background(), "budget", "set", "--socket", sock, "--latency", "50ms")
	if err == nil || !strings.HasPrefix(err.Error(), "budget refused: uid ") {
		t.Fatalf("refused set: %v", err)
	}
	mustRun(t, "budget", "get", "--socket", sock) // reads stay open
}

func TestEventsCommand(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	sock := apitest.Serve(t, allowAll, fake)
	mustRun(t, "budget", "set", "--socket", sock, "--latency", "90ms")
	fake.Publish(api.EventStepDown, "power 31.2W over the 30W budget; stepped to a safer mode", nil, nil)
	out := mustRun(t, "events", "--socket", sock)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "budget     budgets set: latency 90ms") ||
		!strings.Contains(lines[0], fmt.Sprintf("[uid %d, ", os.Getuid())) || !strings.Contains(lines[1], "step_down  power 31.2W over") {
		t.Fatalf("events:\n%s", out)
	}
	if out := mustRun(t, "events", "--socket", sock, "--since", "1"); strings.Count(out, "\n") != 1 {
		t.Fatalf("events --since 1:\n%s", out)
	}

	// --follow prints the kept events, then new ones, until the context ends (Ctrl-C).
	ctx, cancel := context.WithCancel(context.Background())
	root := newRootCmd()
	out2 := &lockedBuffer{}
	root.SetOut(out2)
	root.SetArgs([]string{"events", "--follow", "--json", "--socket", sock})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	waitFor(t, "the kept events", func() bool { return strings.Count(out2.String(), "\n") == 2 })
	fake.Publish(api.EventPlan, "new plan: 8c ...", nil, nil)
	waitFor(t, "the new event", func() bool { return strings.Count(out2.String(), "\n") == 3 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("events --follow after Ctrl-C: %v", err)
	}
	var seqs []uint64
	for _, l := range strings.Split(strings.TrimSpace(out2.String()), "\n") {
		var e api.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("--json line %q: %v", l, err)
		}
		seqs = append(seqs, e.Seq)
	}
	if fmt.Sprint(seqs) != "[1 2 3]" {
		t.Fatalf("followed seqs %v", seqs)
	}
}

func TestWatchPlain(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	withMeasurements(fake)
	sock := apitest.Serve(t, allowAll, fake)
	out := mustRun(t, "watch", "--socket", sock, "--count", "2", "--interval", "100ms")
	if strings.Contains(out, "\x1b[") {
		t.Fatal("watch wrote terminal escapes to a non-terminal")
	}
	if n := strings.Count(out, "--- "); n != 2 {
		t.Fatalf("%d frames, want 2:\n%s", n, out)
	}
	if strings.Count(out, "budgets    latency 100ms") != 2 {
		t.Fatalf("frames lack the status:\n%s", out)
	}
	if _, _, err := fulcrumctl(context.Background(), "watch", "--socket", sock, "--interval", "1ms"); err == nil {
		t.Fatal("a 1ms interval was accepted")
	}
}

func TestWatchTerminalAndCtrlC(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	sock := apitest.Serve(t, allowAll, fake)
	c := client.New(sock)
	defer c.Close()
	var out bytes.Buffer
	if err := watch(context.Background(), &out, true, c, 100*time.Millisecond, 2); err != nil {
		t.Fatal(err)
	}
	frames := strings.Split(out.String(), "\x1b[H\x1b[2J")
	if len(frames) != 3 || frames[0] != "" || !strings.Contains(frames[2], "budgets    latency 100ms") {
		t.Fatalf("terminal frames: %q", out.String())
	}
	// Ctrl-C (the context ending) stops an endless watch without an error.
	ctx, cancel := context.WithCancel(context.Background())
	lb := &lockedBuffer{}
	done := make(chan error, 1)
	go func() { done <- watch(ctx, lb, false, c, 100*time.Millisecond, 0) }()
	waitFor(t, "the first frame", func() bool { return strings.Contains(lb.String(), "budgets") })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("watch after Ctrl-C: %v", err)
	}
}

func TestCompletion(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	sock := apitest.Serve(t, allowAll, fake)
	out := mustRun(t, "__complete", "optimize", "--method", "")
	if !strings.Contains(out, "gmd\t") || !strings.Contains(out, "als\t") {
		t.Errorf("--method completion:\n%s", out)
	}
	out = mustRun(t, "__complete", "mode", "apply", "--socket", sock, "--emc-hz", "")
	for _, want := range []string{"204000000", "665600000", "2133000000", "3199000000"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("--emc-hz completion lacks %s:\n%s", want, out)
		}
	}
	out = mustRun(t, "__complete", "budget", "set", "--rate", "")
	if !strings.Contains(out, "auto\n") {
		t.Errorf("--rate completion:\n%s", out)
	}
}

func TestDaemonProfiles(t *testing.T) {
	src := apitest.NewOrin(t, 5)
	sock := apitest.Serve(t, allowAll, src)
	out := mustRun(t, "daemon", "profiles", "ls", "--socket", sock, "--role", "train")
	if strings.Count(out, "agx-orin-64gb  resnet18") != 5 {
		t.Fatalf("ls:\n%s", out)
	}
	if out := mustRun(t, "daemon", "profiles", "ls", "--socket", sock, "--role", "infer"); strings.Count(out, "\n") != 1 {
		t.Fatalf("ls --role infer:\n%s", out)
	}
	file := filepath.Join(t.TempDir(), "profiles.csv")
	mustRun(t, "daemon", "profiles", "export", "--socket", sock, "-o", file)
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := src.Store.Export(&want, store.CSV, store.Filter{}); err != nil {
		t.Fatal(err)
	}
	if string(got) != want.String() {
		t.Fatalf("exported file differs from the store:\n%s", got)
	}
	// --out is the name; the old --output still writes and says it is deprecated.
	for _, flag := range []string{"--out", "--output"} {
		f2 := filepath.Join(t.TempDir(), "p.csv")
		stdout, stderr, err := fulcrumctl(context.Background(), "daemon", "profiles", "export", "--socket", sock, flag, f2)
		stderr += stdout // cobra prints flag deprecations on OutOrStderr: stderr in a terminal
		if b, _ := os.ReadFile(f2); err != nil || string(b) != want.String() {
			t.Fatalf("export %s: %v", flag, err)
		}
		if dep := strings.Contains(stderr, "--output has been deprecated, use --out"); dep != (flag == "--output") {
			t.Fatalf("export %s: stderr %q", flag, stderr)
		}
	}
	dst := apitest.NewOrin(t, 0)
	dsock := apitest.Serve(t, allowAll, dst)
	if out := mustRun(t, "daemon", "profiles", "import", "--socket", dsock, file); strings.TrimSpace(out) != "imported: 5 added, 0 unchanged, 0 replaced" {
		t.Fatalf("import printed %q", out)
	}
	if n, _ := dst.Store.Count(); n != 5 {
		t.Fatalf("%d profiles imported", n)
	}
	bad := filepath.Join(t.TempDir(), "bad.csv")
	if err := os.WriteFile(bad, []byte("workload,role\nx,train\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fulcrumctl(context.Background(), "daemon", "profiles", "import", "--socket", dsock, bad); err == nil || !strings.HasPrefix(err.Error(), "import rejected: ") {
		t.Fatalf("bad import: %v", err)
	}
	if n, _ := dst.Store.Count(); n != 5 {
		t.Fatalf("a failed import changed the store: %d", n)
	}
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor polls cond; the deadline only turns a hang into a failure.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Unknown subcommands of a command group fail with the usage; a bare group prints help.
func TestUnknownSubcommand(t *testing.T) {
	for _, args := range [][]string{{"board", "bogus"}, {"budget", "sett"}, {"profile", "nope"}, {"sim", "x"}, {"completion", "bogus"}} {
		_, _, err := fulcrumctl(context.Background(), args...)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("unknown command %q", args[1])) || !strings.Contains(err.Error(), "Usage:") {
			t.Errorf("fulcrumctl %s: %v, want an unknown-command error with the usage", strings.Join(args, " "), err)
		}
	}
	if _, _, err := fulcrumctl(context.Background(), "budget", "sett"); err == nil || !strings.Contains(err.Error(), "did you mean") || !strings.Contains(err.Error(), "set?") {
		t.Errorf("no suggestion: %v", err)
	}
	out, _, err := fulcrumctl(context.Background(), "board")
	if err != nil || !strings.Contains(out, "Available Commands") {
		t.Errorf("bare group: %v\n%s", err, out)
	}
}

// With several streams, status prints a line per stream: batch, budget (own or shared),
// rate, planned rate, predicted and measured p99, GPU share.
func TestStatusStreamsTable(t *testing.T) {
	st := api.Status{Board: "sim:agx-orin-64gb", Budgets: api.Budgets{LatencyMS: 400, Quantile: 0.99, RhoMax: 0.95, RateAuto: true},
		Streams: []api.StreamStatus{
			{Workload: "yolov8n-infer", Batch: 2, LatencyBudgetMS: 300, OwnBudget: true, RateRPS: 20.4, PlanRateRPS: 20.3, PredLatencyMS: 137.5, MeasuredP99MS: 245, ServedRecent: 60, Rho: 0.14},
			{Workload: "resnet50-infer", LatencyBudgetMS: 400, RateRPS: 8, RateFixed: true},
		}}
	var b strings.Builder
	if err := writeStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	rows := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			rows[f[0]] = strings.Join(f[1:], " ")
		}
	}
	for name, want := range map[string]string{
		"STREAM":         "BATCH BUDGET_MS RATE_RPS PLANNED_RPS PRED_P99_MS P99_MS GPU_SHARE",
		"yolov8n-infer":  "2 300 (own) 20.4 20.3 137.5 245.0 14%",
		"resnet50-infer": "- 400 8.0 (fixed) - - - -",
	} {
		if rows[name] != want {
			t.Errorf("status row %s = %q, want %q:\n%s", name, rows[name], want, out)
		}
	}
	st.Streams = st.Streams[1:2]
	b.Reset()
	if err := writeStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "STREAM") {
		t.Errorf("one stream with the shared budgets printed a streams table:\n%s", b.String())
	}
}

// An unreadable board mode is printed as such (not as "no board"), with a degraded
// state; a notice (a damaged store moved aside) gets a line of its own.
func TestStatusUnreadableModeAndNotices(t *testing.T) {
	st := api.Status{Board: "agx-orin-64gb", ModeError: "the board's mode could not be read: read max_freq: is a directory; check ...",
		Degraded: true, DegradedReason: "the board's mode could not be read: read max_freq: is a directory; check ...",
		Notices: []string{"the profile store file is damaged: ...; it was moved aside to /var/lib/fulcrum/profiles.db.damaged-20261125T223633Z"}}
	var b strings.Builder
	if err := writeStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"mode       UNKNOWN: the board's mode could not be read: read max_freq: is a directory",
		"state      DEGRADED: the board's mode could not be read",
		"NOTICE     the profile store file is damaged: ...; it was moved aside to /var/lib/fulcrum/profiles.db.damaged-",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "has no board") {
		t.Errorf("an unreadable mode printed as no board:\n%s", out)
	}
}

// With several training jobs the plan line names each job's micro-batch (issue 32), as
// the pair's plan line names its one.
func TestStatusPlanShowsEveryJobsMicroBatch(t *testing.T) {
	st := api.Status{Board: "sim:agx-orin-64gb", Budgets: api.Budgets{LatencyMS: 60, Quantile: 0.99, RhoMax: 0.95, RateAuto: true},
		Plan: &api.Plan{Mode: api.Mode{Cores: 12, CPUKHz: 2201600, GPUHz: 1300500000, EMCHz: 3199000000}, InferBatch: 1, TrainMicroBatch: 8, Feasible: true,
			TrainJobs: []api.PlanTrainJob{{Workload: "resnet18-train", Batch: 32, MicroBatch: 8}, {Workload: "lstm-train", Batch: 20}}}}
	var b strings.Builder
	if err := writeStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	if want := "infer batch 1, training micro-batches resnet18-train 8 (×4), lstm-train whole, feasible"; !strings.Contains(b.String(), want) {
		t.Errorf("status %q: want the plan line to say %q", b.String(), want)
	}
	st.Plan.TrainJobs[0].MicroBatch, st.Plan.TrainMicroBatch = 0, 0
	b.Reset()
	if err := writeStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "micro-batch") {
		t.Errorf("status %q: every job runs whole minibatches, the plan line must not name micro-batches", b.String())
	}
}
