package daemon

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
)

// runDaemon opens a whole fulcrumd with o and runs it until the test (or stop) ends; it
// returns a client of its control socket.
func runDaemon(t *testing.T, o Options) (*Daemon, *client.Client, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d, err := Open(ctx, o)
	if err != nil {
		cancel()
		t.Fatalf("open fulcrumd: %v", err)
	}
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	cl := client.New(filepath.Join(o.Server.RuntimeDir, api.SocketName))
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cl.Close()
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("fulcrumd stopped with: %v", err)
		}
	}
	t.Cleanup(stop)
	return d, cl, stop
}

// eventsOf returns the messages of the daemon's events of one kind.
func eventsOf(t *testing.T, cl *client.Client, kind string) []string {
	t.Helper()
	evs, err := cl.Events(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs.Events {
		if e.Kind == kind {
			out = append(out, e.Message)
		}
	}
	return out
}

func anyContains(msgs []string, sub string) bool {
	return slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, sub) })
}

func settingsDaemonOptions(t *testing.T) Options {
	t.Helper()
	dir := t.TempDir()
	testboard.Sim(t, filepath.Join(dir, "board"), testboard.Spec(t, testboard.AGXOrin), sim.Options{Logger: slog.New(slog.DiscardHandler)})
	return reliabilityDaemonOptions(dir)
}

// Issue 27 item 1: budgets set at run time (global, per stream, a training weight) and
// an operator's held mode survive a restart of fulcrumd on the same state directory;
// budget reset returns to the configuration's values and deletes what was saved.
func TestRunTimeSettingsSurviveRestart(t *testing.T) {
	o := settingsDaemonOptions(t)
	ctx := context.Background()
	held := powermode.Mode{Cores: 4, CPUKHz: 1113600, GPUHz: 408000000, EMCHz: 2133000000}

	_, cl, stop := runDaemon(t, o)
	lat, pow := 42.0, 21000.0
	if _, err := cl.SetBudgets(ctx, api.BudgetsUpdate{LatencyMS: &lat, PowerMW: &pow}); err != nil {
		t.Fatal(err)
	}
	sl, sr, w := 30.0, 5.0, 2.0
	if _, err := cl.SetBudgets(ctx, api.BudgetsUpdate{Workload: "yolo-infer", LatencyMS: &sl, RateRPS: &sr}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.SetBudgets(ctx, api.BudgetsUpdate{Workload: "resnet-train", TrainWeight: &w}); err != nil {
		t.Fatal(err)
	}
	if mi, err := cl.ApplyMode(ctx, held); err != nil || !mi.Held || mi.Current != held {
		t.Fatalf("apply %v: %+v, %v", held, mi, err)
	}
	want, err := cl.Budgets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stop()

	// The profile store moved aside (as a damaged one is) loses no setting.
	if err := os.Rename(filepath.Join(o.StateDir, "profiles.db"), filepath.Join(o.StateDir, "profiles.db.aside")); err != nil {
		t.Fatal(err)
	}
	_, cl, stop = runDaemon(t, o)
	got, err := cl.Budgets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.LatencyMS != 42 || got.PowerMW != 21000 || !slices.Equal(got.Streams, want.Streams) || len(got.Streams) != 2 {
		t.Fatalf("after a restart: budgets %+v, want the run-time ones %+v", got, want)
	}
	mi, err := cl.Mode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !mi.Held || mi.Current != held {
		t.Fatalf("after a restart: mode %v held=%v, want the operator's %v held", mi.Current, mi.Held, held)
	}
	evs := eventsOf(t, cl, api.EventSettings)
	for _, sub := range []string{"budgets {latency 42ms (p99), power 21W, rate auto} restored from the run-time settings", "budgets of workload yolo-infer", "budgets of workload resnet-train", "held mode " + held.Human() + " restored"} {
		if !anyContains(evs, sub) {
			t.Errorf("no settings event saying %q; events: %q", sub, evs)
		}
	}

	// Reset: the configuration's budgets, nothing per stream, no held mode, no file.
	b, err := cl.ResetBudgets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.LatencyMS != 100 || b.PowerMW != 0 || len(b.Streams) != 0 {
		t.Fatalf("after reset: %+v, want the configuration's 100 ms, no power budget, no stream budgets", b)
	}
	if mi, err := cl.Mode(ctx); err != nil || mi.Held {
		t.Fatalf("after reset the mode is still held (%+v, %v)", mi, err)
	}
	if _, err := os.Stat(filepath.Join(o.StateDir, control.SettingsFileName)); !os.IsNotExist(err) {
		t.Fatalf("settings file after reset: %v, want it deleted", err)
	}
	stop()
	_, cl, _ = runDaemon(t, o)
	if b, err := cl.Budgets(ctx); err != nil || b.LatencyMS != 100 || b.PowerMW != 0 || len(b.Streams) != 0 {
		t.Fatalf("restart after reset: %+v (%v), want the configuration's", b, err)
	}
	if evs := eventsOf(t, cl, api.EventSettings); !anyContains(evs, "from the configuration") {
		t.Errorf("no event saying the budgets came from the configuration: %q", evs)
	}
}

// A configuration whose budgets changed since the run-time ones were saved wins: the
// operator edited it after the run-time change (docs/operations.md).
func TestEditedConfigurationWinsOverSavedBudgets(t *testing.T) {
	o := settingsDaemonOptions(t)
	ctx := context.Background()
	_, cl, stop := runDaemon(t, o)
	lat := 42.0
	if _, err := cl.SetBudgets(ctx, api.BudgetsUpdate{LatencyMS: &lat}); err != nil {
		t.Fatal(err)
	}
	held := powermode.Mode{Cores: 4, CPUKHz: 1113600, GPUHz: 408000000, EMCHz: 2133000000}
	if _, err := cl.ApplyMode(ctx, held); err != nil {
		t.Fatal(err)
	}
	stop()
	o.Targets.LatencyMS = 80 // the file edited
	_, cl, stop = runDaemon(t, o)
	if b, err := cl.Budgets(ctx); err != nil || b.LatencyMS != 80 {
		t.Fatalf("budgets %+v (%v), want the edited configuration's 80 ms", b, err)
	}
	if mi, err := cl.Mode(ctx); err != nil || mi.Held {
		t.Fatalf("mode %+v (%v): the held mode was kept over an edited configuration", mi, err)
	}
	if evs := eventsOf(t, cl, api.EventSettings); !anyContains(evs, "which changed since the run-time budgets") {
		t.Errorf("no event explaining the configuration won: %q", evs)
	}
	stop()
	// The dropped run-time budgets stay dropped: the next start is the configuration's too.
	_, cl, _ = runDaemon(t, o)
	if b, err := cl.Budgets(ctx); err != nil || b.LatencyMS != 80 {
		t.Fatalf("second restart: budgets %+v (%v), want 80 ms", b, err)
	}
}

// A damaged, unknown-version or invalid settings file never stops fulcrumd: it starts
// from the configuration, keeps the file aside and says so in an event.
func TestDamagedSettingsFileStartsFromConfig(t *testing.T) {
	for name, content := range map[string]string{
		"garbage":   "\x00\x01not json at all",
		"truncated": `{"version":1,"budgets":{"latency_ms":42`,
		"version":   `{"version":99,"budgets":{"latency_ms":42,"quantile":0.99,"rho_max":0.95}}`,
		"invalid":   `{"version":1,"budgets":{"latency_ms":-5,"quantile":0.99,"rho_max":0.95}}`,
		"unknown":   `{"version":1,"budgetz":{}}`,
	} {
		t.Run(name, func(t *testing.T) {
			o := settingsDaemonOptions(t)
			if err := os.MkdirAll(o.StateDir, 0o750); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(o.StateDir, control.SettingsFileName)
			if err := os.WriteFile(path, []byte(content), 0o640); err != nil {
				t.Fatal(err)
			}
			_, cl, _ := runDaemon(t, o)
			b, err := cl.Budgets(context.Background())
			if err != nil || b.LatencyMS != 100 {
				t.Fatalf("budgets %+v (%v), want the configuration's 100 ms", b, err)
			}
			if evs := eventsOf(t, cl, api.EventSettings); !anyContains(evs, "not used") || !anyContains(evs, "kept as") {
				t.Errorf("no event saying the settings were not used and kept aside: %q", evs)
			}
			aside, _ := filepath.Glob(path + ".damaged-*")
			if len(aside) != 1 {
				t.Fatalf("kept-aside files %q, want one", aside)
			}
			if raw, err := os.ReadFile(aside[0]); err != nil || string(raw) != content {
				t.Fatalf("kept-aside file holds %q (%v), want the damaged content", raw, err)
			}
		})
	}
}

// getHealthz asks GET /v1/healthz over the unix socket and returns the HTTP status.
func getHealthz(t *testing.T, sock string) (int, api.Health) {
	t.Helper()
	hc := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://fulcrum/v1/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h api.Health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatalf("healthz body: %v", err)
	}
	return resp.StatusCode, h
}

func check(h api.Health, name string) (api.HealthCheck, bool) {
	i := slices.IndexFunc(h.Checks, func(c api.HealthCheck) bool { return c.Name == name })
	if i < 0 {
		return api.HealthCheck{}, false
	}
	return h.Checks[i], true
}

// waitReady polls healthz until fulcrumd is ready (the control loop's first round).
func waitReady(t *testing.T, sock string) api.Health {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second) // a bound on a hang, not a timing goal
	for {
		code, h := getHealthz(t, sock)
		if code == http.StatusOK && h.Ready {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("fulcrumd never became ready: HTTP %d %+v", code, h)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Issue 27 item 5: GET /v1/healthz on a real daemon over its unix socket: 200 with the
// board, the store and the control loop checked; 503 naming the store once it fails.
func TestHealthzOverUnixSocket(t *testing.T) {
	o := settingsDaemonOptions(t)
	d, cl, _ := runDaemon(t, o)
	sock := cl.Socket()
	h := waitReady(t, sock)
	for _, name := range []string{"board", "store", "control_loop"} {
		if c, ok := check(h, name); !ok || !c.OK {
			t.Errorf("check %s: %+v (present %v), want ok", name, c, ok)
		}
	}
	if h.Degraded {
		t.Errorf("degraded without a failed part: %+v", h)
	}
	viaClient, err := cl.Health(context.Background())
	if err != nil || !viaClient.Ready {
		t.Fatalf("client Health: %+v, %v", viaClient, err)
	}
	// The store fails (closed under the daemon): not ready, 503, the store named.
	if err := d.Store.Close(); err != nil {
		t.Fatal(err)
	}
	code, h := getHealthz(t, sock)
	if code != http.StatusServiceUnavailable || h.Ready {
		t.Fatalf("healthz with the store closed: HTTP %d %+v, want 503 not ready", code, h)
	}
	if c, _ := check(h, "store"); c.OK || c.Detail == "" {
		t.Fatalf("store check %+v, want failed with a reason", c)
	}
	if c, _ := check(h, "control_loop"); !c.OK {
		t.Errorf("control loop check %+v with only the store failed", c)
	}
	if viaClient, err := cl.Health(context.Background()); err != nil || viaClient.Ready {
		t.Fatalf("client Health with the store closed: %+v, %v; want an answer saying not ready", viaClient, err)
	}
}

// Issue 27 item 5: a metrics address already taken is an event and a degraded status,
// not an exit (which under systemd was a restart loop).
func TestMetricsPortTakenRunsDegraded(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	o := settingsDaemonOptions(t)
	o.MetricsListen = taken.Addr().String()
	_, cl, _ := runDaemon(t, o)
	h := waitReady(t, cl.Socket())
	if c, ok := check(h, "metrics"); !ok || c.OK || !c.Optional || !strings.Contains(c.Detail, o.MetricsListen) {
		t.Errorf("metrics check %+v (present %v), want an optional failed check naming %s", c, ok, o.MetricsListen)
	}
	if !h.Degraded {
		t.Errorf("health %+v, want degraded", h)
	}
	st, err := cl.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !st.Degraded || !strings.Contains(st.DegradedReason, "metrics") {
		t.Errorf("status degraded=%v %q, want degraded naming metrics", st.Degraded, st.DegradedReason)
	}
	if evs := eventsOf(t, cl, api.EventHealth); !anyContains(evs, "metrics failed") {
		t.Errorf("no health event for the metrics listener: %q", evs)
	}
}
