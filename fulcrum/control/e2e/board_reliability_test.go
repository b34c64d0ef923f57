package e2e_test

import (
	"context"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	apiclient "github.com/fulcrum-edge/fulcrum/fulcrum/api/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
)

// railFiles are the INA3221 readings (hwmon curr*/in*_input) under root.
func railFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	// The driver directories are symlinks in a real (and the simulated) tree: walk the
	// device side, where the files live.
	err := filepath.WalkDir(filepath.Join(root, "sys", "devices"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, "_input") && strings.Contains(p, "hwmon") && (strings.Contains(filepath.Base(p), "curr") || strings.HasPrefix(filepath.Base(p), "in")) {
			out = append(out, p)
		}
		return nil
	})
	if err != nil || len(out) == 0 {
		t.Fatalf("no INA3221 rail files under %s (%v)", root, err)
	}
	return out
}

// TestBoardFaultsThroughDaemon: a real fulcrumd on a simulated AGX Orin tree whose power
// sensor files turn to garbage, then vanish. Each time fulcrumd keeps running, reports
// degraded with the reason in its status, and, with a power budget set, falls back to
// the lowest-power stored mode; it leaves degraded mode when the sensors come back. A
// control file that vanishes makes an operator's mode change fail with an error naming
// it, and the board is rolled back to the mode it was in.
func TestBoardFaultsThroughDaemon(t *testing.T) {
	spec := testboard.Spec(t, testboard.AGXOrin)
	models := testboard.Workloads(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "board")
	// The tree only, no physics loop: the test owns every sensor file.
	testboard.Sim(t, root, spec, sim.Options{Workloads: models})
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	seed(t, filepath.Join(state, "profiles.db"), spec, models)

	log, logs := captureLog(nil)
	cfg := control.DefaultConfig()
	cfg.Period = 50 * time.Millisecond
	cfg.PowerSample = 20 * time.Millisecond
	cfg.PowerFail = 300 * time.Millisecond
	ctx := context.Background()
	d, err := daemon.Open(ctx, daemon.Options{
		Server: daemon.Config{RuntimeDir: filepath.Join(dir, "run"),
			Sched: sched.Config{DefaultTrain: 100 * time.Millisecond, DefaultInfer: 20 * time.Millisecond}},
		StateDir: state, Board: "sim:agx-orin-64gb", BoardRoot: root, Log: log,
		Control: cfg, Targets: plan.Targets{LatencyMS: 1000, PowerMW: powerW * 1000, RateRPS: 20},
		API: server.Config{Group: "-", AllowUIDs: []int{os.Getuid()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	dctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- d.Run(dctx) }()
	defer func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("daemon: %v", err)
		}
		if t.Failed() {
			t.Logf("fulcrumd log:\n%s", logs)
		}
	}()
	cl := apiclient.New(filepath.Join(dir, "run", api.SocketName))
	defer cl.Close()
	// A training and an inference worker registered (they never ask for a turn): the
	// controller plans for a pair, so it has a lowest-power configuration to fall to.
	sock := d.Server.SocketPath()
	for _, reg := range []client.Registration{
		{Role: proto.RoleTrain, Workload: trainWL, Batch: models[trainWL].Batch},
		{Role: proto.RoleInfer, Workload: inferWL, Batch: 1, BatchSizes: models[inferWL].BatchSizes()},
	} {
		w, err := client.Dial(ctx, sock, reg)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
	}

	// The lowest-power stored mode, by the same profiles the controller reads.
	lowest, lowestMW := powermode.Mode{}, 0.0
	for _, m := range seedModes(spec) {
		if mw := models[trainWL].PowerMW(spec, m, models[trainWL].Batch); lowestMW == 0 || mw < lowestMW {
			lowest, lowestMW = m, mw
		}
	}
	waitStatus := func(what string, ok func(api.Status) bool) api.Status {
		t.Helper()
		var st api.Status
		for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if st, err = cl.Status(ctx); err != nil {
				t.Fatalf("status while waiting for %s: %v (fulcrumd must keep answering)", what, err)
			}
			if ok(st) {
				return st
			}
		}
		t.Fatalf("never %s; status %+v", what, st)
		return st
	}
	waitStatus("healthy and planned at start", func(s api.Status) bool { return !s.Degraded && s.Power != nil && s.Plan != nil })

	rails := railFiles(t, root)
	saved := map[string][]byte{}
	for _, p := range rails {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		saved[p] = b
	}
	restore := func() {
		for p, b := range saved {
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, fault := range []struct {
		name    string
		breakIt func()
	}{
		{"garbage readings", func() {
			for _, p := range rails {
				if err := os.WriteFile(p, []byte("12a4\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"sensor files removed", func() {
			for _, p := range rails {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
			}
		}},
	} {
		fault.breakIt()
		st := waitStatus("degraded after "+fault.name, func(s api.Status) bool { return s.Degraded })
		if !strings.Contains(st.DegradedReason, "power") {
			t.Errorf("%s: degraded reason %q does not say power is unreadable", fault.name, st.DegradedReason)
		}
		st = waitStatus("at the lowest-power mode after "+fault.name, func(s api.Status) bool { return s.Mode == lowest })
		if cur, err := d.Board.Backend.Current(ctx); err != nil || cur != lowest {
			t.Fatalf("%s: board tree at %v (%v), status says %v; want the lowest-power stored mode %v", fault.name, cur, err, st.Mode, lowest)
		}
		restore()
		waitStatus("recovered after "+fault.name, func(s api.Status) bool { return !s.Degraded })
	}

	// A control file that vanishes: the operator's change fails naming the file, and the
	// board is rolled back to where it was.
	before, err := d.Board.Backend.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(root, "sys", "class", "devfreq", "17000000.gpu", "min_freq")
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	target := powermode.Mode{Cores: 4, CPUKHz: 1113600, GPUHz: 408000000, EMCHz: 2133000000}
	seq := lastSeq(ctx, t, cl)
	if _, err := cl.ApplyMode(ctx, target); err == nil || !strings.Contains(err.Error(), "min_freq") {
		t.Fatalf("apply with the GPU's min_freq gone: err = %v; want an error naming min_freq", err)
	} else if e := api.AsError(err); e.Status != http.StatusServiceUnavailable || e.Code != api.CodeUnavailable {
		t.Fatalf("apply refused by the board: HTTP %d %q, want 503 %q", e.Status, e.Code, api.CodeUnavailable)
	}
	// The event log carries the cause too.
	evs, err := cl.Events(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	named := false
	for _, e := range evs.Events {
		named = named || (strings.Contains(string(e.Data), "min_freq") || strings.Contains(e.Message, "min_freq"))
	}
	if !named {
		t.Fatalf("no event names the vanished min_freq after the failed apply: %+v", evs.Events)
	}
	if cur, err := d.Board.Backend.Current(ctx); err != nil || cur != before {
		t.Fatalf("after the refused change the board is at %v (%v); want it rolled back to %v", cur, err, before)
	}
	if _, err := cl.Status(ctx); err != nil {
		t.Fatalf("fulcrumd stopped answering after a refused change: %v", err)
	}
}
