package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/apitest"
	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon"
	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon/simworker"
	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
)

// status --socket pointed at fulcrumd's worker socket (a real one) says so, instead of
// `malformed HTTP status code "a"`.
func TestStatusOnWorkerSocket(t *testing.T) {
	srv := daemon.NewServer(daemon.Config{RuntimeDir: t.TempDir()})
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	defer func() { stop(); <-served }()
	_, _, err := fulcrumctl(context.Background(), "status", "--socket", srv.SocketPath())
	if err == nil || !strings.Contains(err.Error(), "worker socket") || !strings.Contains(err.Error(), "not its control socket") || strings.Contains(err.Error(), "malformed") {
		t.Fatalf("status on the worker socket: %v, want it named as the worker socket", err)
	}
}

// budget set: --workload "" refused (it set the shared budgets), --weight in range,
// errors in the flags' words (not latency_ms / rate_auto / train_weight), and the
// daemon's warnings printed.
func TestBudgetSetChecks(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	fake.SetMeasurements([]api.Worker{{ID: "w1", Role: "infer", Workload: "cam"}, {ID: "w2", Role: "train", Workload: "trainer"}}, nil, nil)
	sock := apitest.Serve(t, allowAll, fake)
	before, _ := fake.Budgets(context.Background())
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workload", "", "--latency", "50ms"}, `--workload "" names no workload`},
		{[]string{"--workload", "trainer", "--weight", "5e-324"}, "--weight 5e-324: want a share weight from 0.01 to 1000"},
		{[]string{"--workload", "cam", "--shared", "--latency", "50ms"}, "--shared drops the workload's own budgets: give it alone, or give --latency, --rate or --weight without it"},
		{[]string{"--rate", "1e9"}, "--rate 1e9: want auto (measure it) or requests per second, 0.001 to 100000"},
		{[]string{"--quantile", "p20"}, "--quantile p20: want a fraction like 0.99 or p99 (valid 0.5 to 0.99999)"},
		{[]string{"--rho-max", "2"}, "--rho-max 2: want 0.05 to 1"},
		{[]string{"--power", "0.5W"}, "--power 0.5W (0.5 W) is out of range (valid 1 W to 1000 W, or none)"},
		{[]string{"--latency", "0"}, "--latency 0: give a duration with its unit, e.g. 80ms or 0.08s"},
		{[]string{"--latency", "0ms"}, "--latency 0ms is out of range"},
	} {
		_, _, err := fulcrumctl(context.Background(), append([]string{"budget", "set", "--socket", sock}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("budget set %q: %v, want %q", tc.args, err, tc.want)
		}
		for _, field := range []string{"latency_ms", "rate_rps", "rate_auto", "train_weight", "power_mw", "rho_max", "given as mW", "e.g. 0ms"} {
			if err != nil && strings.Contains(err.Error(), field) {
				t.Errorf("budget set %q: %v names the API's %s", tc.args, err, field)
			}
		}
	}
	if b, _ := fake.Budgets(context.Background()); b.LatencyMS != before.LatencyMS || len(b.Streams) != 0 {
		t.Fatalf("refused sets changed the budgets: %+v", b)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workload", "cma", "--latency", "50ms"}, `warning: no worker has registered workload "cma" (registered now: cam (infer), trainer (train))`},
		{[]string{"--workload", "trainer", "--latency", "50ms"}, `warning: workload "trainer" is a training workload`},
		{[]string{"--workload", "cam", "--weight", "2"}, `warning: workload "cam" is an inference stream: a training weight`},
	} {
		_, stderr, err := fulcrumctl(context.Background(), append([]string{"budget", "set", "--socket", sock}, tc.args...)...)
		if err != nil || !strings.Contains(stderr, tc.want) {
			t.Errorf("budget set %q: %v, stderr %q, want %q", tc.args, err, stderr, tc.want)
		}
	}
}

// mode apply: --cores 0 and a level given in MHz to an Hz flag get the board's levels
// in MHz and the unit flag; --gpu 408MHz is --gpu-hz 408000000.
func TestModeApplyUnitsAndMessages(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	sock := apitest.Serve(t, allowAll, fake)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cores", "0"}, "--cores 0 is not a core count of agx-orin-64gb: want one of"},
		{[]string{"--gpu-hz", "612"}, "did you mean --gpu 612MHz?"},
		{[]string{"--gpu-hz", "400000000"}, "--gpu-hz 400000000 is not a GPU level of agx-orin-64gb: the nearest is 408 MHz (408000000)"},
		{[]string{"--cpu-khz", "1728"}, "did you mean --cpu 1728MHz?"},
		{[]string{"--gpu", "612"}, "--gpu 612: give a unit, e.g. 612MHz"},
		{[]string{"--gpu", "612MHz", "--gpu-hz", "612000000"}, "give --gpu or --gpu-hz, not both"},
	} {
		_, _, err := fulcrumctl(context.Background(), append([]string{"mode", "apply", "--socket", sock}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("mode apply %q: %v, want %q", tc.args, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "/v1/mode") || strings.Contains(err.Error(), "gpu_hz")) {
			t.Errorf("mode apply %q: %v names the API", tc.args, err)
		}
	}
	mustRun(t, "mode", "apply", "--socket", sock, "--gpu", "408MHz", "--cpu", "1.7280GHz")
	want := powermode.Mode{Cores: 8, CPUKHz: 1728000, GPUHz: 408000000, EMCHz: 3199000000}
	if mi, _ := fake.Mode(context.Background()); mi.Current != want {
		t.Fatalf("mode after --gpu 408MHz: %+v, want %+v", mi.Current, want)
	}
	if out := mustRun(t, "mode", "--socket", sock); !strings.Contains(out, "gpu      306 408") || !strings.Contains(out, " MHz") {
		t.Fatalf("mode does not print levels in MHz:\n%s", out)
	}
}

// A misspelt subcommand followed by its flags is an unknown command (it was "unknown
// flag: --latency"); an unknown help topic fails.
func TestUnknownCommandWithFlagsAndHelpTopic(t *testing.T) {
	_, _, err := fulcrumctl(context.Background(), "budget", "sett", "--latency", "10ms")
	if err == nil || !strings.Contains(err.Error(), `unknown command "sett" for "fulcrumctl budget"`) {
		t.Errorf("budget sett --latency 10ms: %v", err)
	}
	_, _, err = fulcrumctl(context.Background(), "budget", "--latency", "10ms")
	if err == nil || !strings.Contains(err.Error(), "flags go after a subcommand") {
		t.Errorf("budget --latency 10ms: %v", err)
	}
	if _, _, err := fulcrumctl(context.Background(), "help", "bogus"); err == nil || !strings.Contains(err.Error(), `unknown help topic "bogus"`) {
		t.Errorf("help bogus: %v, want an error", err)
	}
	if out, _, err := fulcrumctl(context.Background(), "help", "budget", "set"); err != nil || !strings.Contains(out, "--workload") {
		t.Errorf("help budget set: %v\n%s", err, out)
	}
	if out, _, err := fulcrumctl(context.Background(), "budget", "--socket", "/nonexistent", "--help"); err != nil || !strings.Contains(out, "Available Commands") {
		t.Errorf("budget --socket X --help: %v\n%s", err, out)
	}
}

// sim worker takes the worker socket as --worker-socket (--socket is the control socket
// in every other command); --socket still works there, with a deprecation note.
func TestSimWorkerWorkerSocketFlag(t *testing.T) {
	root := filepath.Join(t.TempDir(), "board")
	testboard.Sim(t, root, testboard.Spec(t, testboard.AGXOrin), sim.Options{})
	srv := daemon.NewServer(daemon.Config{RuntimeDir: t.TempDir()})
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	defer func() { stop(); <-served }()
	for _, flag := range []string{"--worker-socket", "--socket"} {
		cmd := newSimWorkerCmd()
		var out, errb bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&errb)
		cmd.SetArgs([]string{"--role", "train", "--workload", "lstm-train", "--root", root, "--steps", "2", flag, srv.SocketPath()})
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("%s: %v", flag, err)
		}
		var rep simworker.Report
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil || !rep.Managed || rep.Batches != 2 {
			t.Fatalf("%s: report %+v (%v), want 2 managed minibatches", flag, rep, err)
		}
		if deprecated := strings.Contains(errb.String(), "use --worker-socket"); deprecated != (flag == "--socket") {
			t.Errorf("%s: stderr %q", flag, errb.String())
		}
	}
}

// A daemon's budget error that fulcrumctl does not check first is still worded in its
// flags.
func TestFlagWords(t *testing.T) {
	in := api.Errorf(400, api.CodeBadBudget, "rate_rps", "rate_rps = 5 and rate_auto = true contradict each other: set one; power_mw is shared: set it without workload")
	got := flagWords(in).Error()
	want := "--rate = 5 and --rate auto contradict each other: set one; --power is shared: set it without --workload"
	if got != want {
		t.Fatalf("flagWords = %q, want %q", got, want)
	}
	var ae *api.Error
	if !errors.As(flagWords(in), &ae) || ae.Status != 400 {
		t.Fatal("flagWords lost the API error's status")
	}
}
