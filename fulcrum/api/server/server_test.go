package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
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

func ptr[T any](v T) *T { return &v }

// rawDo sends a raw HTTP request over the socket (for what Client never sends).
func rawDo(t *testing.T, sock, method, path, body string) (int, []byte) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequest(method, "http://fulcrum"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func errorOf(t *testing.T, b []byte) api.Error {
	t.Helper()
	var body struct {
		Error *api.Error `json:"error"`
	}
	if err := json.Unmarshal(b, &body); err != nil || body.Error == nil {
		t.Fatalf("not a JSON error body: %s (%v)", b, err)
	}
	return *body.Error
}

func TestBudgetsRoundTrip(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	var logBuf syncBuffer
	c := client.New(apitest.Serve(t, server.Config{Policy: server.PolicyFunc(func(api.Caller) error { return nil }),
		Log: slog.New(slog.NewTextHandler(&logBuf, nil))}, fake))
	defer c.Close()
	ctx := context.Background()
	b, err := c.Budgets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.LatencyMS != 100 || b.PowerMW != 30000 || !b.RateAuto {
		t.Fatalf("budgets = %+v", b)
	}
	got, err := c.SetBudgets(ctx, api.BudgetsUpdate{LatencyMS: ptr(80.0), RateRPS: ptr(40.0)})
	if err != nil {
		t.Fatal(err)
	}
	want := api.Budgets{LatencyMS: 80, PowerMW: 30000, RateRPS: 40, Quantile: 0.99, RhoMax: 0.95}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("SetBudgets = %+v, want %+v", got, want)
	}
	if b, _ := c.Budgets(ctx); !reflect.DeepEqual(b, want) {
		t.Fatalf("Budgets after set = %+v", b)
	}
	// The change is logged with the caller: this process.
	evs, err := c.Events(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Events) != 1 || evs.Events[0].Kind != api.EventBudgets || evs.Events[0].Caller == nil ||
		evs.Events[0].Caller.PID != os.Getpid() || evs.Events[0].Caller.UID != os.Getuid() {
		t.Fatalf("events = %+v", evs.Events)
	}
	// The change is logged with the caller, its command name from /proc included.
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", os.Getpid()))
	log := logBuf.String()
	if !strings.Contains(log, "control call") || !strings.Contains(log, "method=PUT") ||
		!strings.Contains(log, fmt.Sprintf("uid=%d", os.Getuid())) || !strings.Contains(log, "comm="+strings.TrimSpace(string(comm))) {
		t.Fatalf("change not logged with the caller:\n%s", log)
	}
	if evs.Last != evs.Events[0].Seq {
		t.Fatalf("last = %d, want %d", evs.Last, evs.Events[0].Seq)
	}
}

func TestBadRequests(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	sock := apitest.Serve(t, server.Config{Policy: server.PolicyFunc(func(api.Caller) error { return nil }), MaxBodyBytes: 256}, fake)
	cases := []struct {
		name, method, path, body string
		status                   int
		code, field              string
		msg                      string
	}{
		{"latency out of range", "PUT", "/v1/budgets", `{"latency_ms": -5}`, 400, api.CodeBadBudget, "latency_ms", "latency_ms = -5 is out of range: want 0.1 to 600000 milliseconds"},
		{"power given in watts", "PUT", "/v1/budgets", `{"power_mw": 30}`, 400, api.CodeBadBudget, "power_mw", "probably watts"},
		{"rate and auto", "PUT", "/v1/budgets", `{"rate_rps": 5, "rate_auto": true}`, 400, api.CodeBadBudget, "rate_rps", "contradict"},
		{"empty update", "PUT", "/v1/budgets", `{}`, 400, api.CodeBadBudget, "", "no budget given"},
		{"unknown field", "PUT", "/v1/budgets", `{"latency": 80}`, 400, api.CodeBadRequest, "latency", `unknown field "latency"`},
		{"wrong type", "PUT", "/v1/budgets", `{"latency_ms": "80ms"}`, 400, api.CodeBadRequest, "latency_ms", "want a float64"},
		{"trailing data", "PUT", "/v1/budgets", `{"latency_ms": 80} {}`, 400, api.CodeBadRequest, "", "trailing data"},
		{"empty body", "PUT", "/v1/budgets", ``, 400, api.CodeBadRequest, "", "empty body"},
		{"too large", "PUT", "/v1/budgets", `{"latency_ms": 80` + strings.Repeat(" ", 300) + `}`, 413, api.CodeTooLarge, "", "over 256 bytes"},
		{"bad method", "POST", "/v1/optimize", `{"method": "sgd"}`, 400, api.CodeBadMethod, "method", `"sgd"`},
		// Strict keys: encoding/json alone matches case-insensitively and lets the last
		// of two equal keys win.
		{"key case", "PUT", "/v1/budgets", `{"Latency_MS": 80}`, 400, api.CodeBadRequest, "Latency_MS", `case-sensitive; did you mean "latency_ms"`},
		{"duplicate key", "PUT", "/v1/budgets", `{"latency_ms": 80, "latency_ms": 5000}`, 400, api.CodeBadRequest, "latency_ms", "appears twice"},
		{"nested key case", "PUT", "/v1/mode", `{"mode": {"Cores": 8, "cpu_khz": 1728000, "gpu_hz": 612000000, "emc_hz": 3199000000}}`, 400, api.CodeBadRequest, "mode.Cores", `did you mean "cores"`},
		{"nested duplicate", "PUT", "/v1/mode", `{"mode": {"cores": 8, "cores": 4, "cpu_khz": 1728000, "gpu_hz": 612000000, "emc_hz": 3199000000}}`, 400, api.CodeBadRequest, "mode.cores", "appears twice"},
		{"nested unknown", "PUT", "/v1/mode", `{"mode": {"cores": 8, "cpu_mhz": 1728}}`, 400, api.CodeBadRequest, "mode.cpu_mhz", `unknown field "mode.cpu_mhz"`},
		{"optimize key case", "POST", "/v1/optimize", `{"METHOD": "gmd"}`, 400, api.CodeBadRequest, "METHOD", "case-sensitive"},
		{"mode not a level", "PUT", "/v1/mode", `{"mode": {"cores": 8, "cpu_khz": 1728000, "gpu_hz": 600000000, "emc_hz": 3199000000}}`, 400, api.CodeBadMode, "gpu_hz", "600000000 is not a level"},
		{"mode incomplete", "PUT", "/v1/mode", `{"mode": {"cores": 8}}`, 400, api.CodeBadMode, "mode", "cpu_khz must be positive"},
		{"wrong http method", "DELETE", "/v1/budgets", ``, 405, api.CodeMethod, "", "use GET, PUT"},
		{"no such path", "GET", "/v2/status", ``, 404, api.CodeNotFound, "", "no endpoint /v2/status"},
		{"bad since", "GET", "/v1/events?since=-1", ``, 400, api.CodeBadRequest, "since", "non-negative"},
		{"bad format", "GET", "/v1/profiles/export?format=xml", ``, 400, api.CodeBadRequest, "format", "want csv or json"},
		{"bad role", "GET", "/v1/profiles?role=serve", ``, 400, api.CodeBadRequest, "role", "train or infer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := fake.Budgets(context.Background())
			status, body := rawDo(t, sock, tc.method, tc.path, tc.body)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			e := errorOf(t, body)
			if e.Code != tc.code || e.Field != tc.field || !strings.Contains(e.Message, tc.msg) {
				t.Fatalf("error = %+v, want code %q field %q message containing %q", e, tc.code, tc.field, tc.msg)
			}
			if after, _ := fake.Budgets(context.Background()); !reflect.DeepEqual(after, before) {
				t.Fatalf("a rejected request changed the budgets: %+v -> %+v", before, after)
			}
		})
	}
}

func TestPolicyRefusesChanges(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	var logBuf syncBuffer
	me := os.Getuid()
	policy := server.PolicyFunc(func(c api.Caller) error {
		if c.UID == me {
			return fmt.Errorf("uid %d is outside by configuration", c.UID)
		}
		return nil
	})
	sock := apitest.Serve(t, server.Config{Policy: policy, Log: slog.New(slog.NewTextHandler(&logBuf, nil))}, fake)
	c := client.New(sock)
	defer c.Close()
	ctx := context.Background()
	_, err := c.SetBudgets(ctx, api.BudgetsUpdate{LatencyMS: ptr(50.0)})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusForbidden || ae.Code != api.CodeForbidden || !strings.Contains(ae.Message, "outside by configuration") {
		t.Fatalf("SetBudgets by a refused caller: %v", err)
	}
	for _, call := range []func() error{
		func() error { _, err := c.ApplyMode(ctx, apitest.Mode30W); return err },
		func() error { _, err := c.Optimize(ctx, api.OptimizeRequest{Method: api.OptimizeGMD}); return err },
		func() error {
			_, err := c.ImportProfiles(ctx, strings.NewReader("{}"), api.ImportOptions{})
			return err
		},
	} {
		if err := call(); !errors.As(err, &ae) || ae.Status != http.StatusForbidden {
			t.Fatalf("mutating call by a refused caller: %v", err)
		}
	}
	if b, _ := c.Budgets(ctx); b.LatencyMS != 100 {
		t.Fatalf("refused call changed the budget: %+v", b)
	}
	if _, err := c.Status(ctx); err != nil {
		t.Fatalf("reads stay open: %v", err)
	}
	if evs, _ := c.Events(ctx, 0); len(evs.Events) != 0 {
		t.Fatalf("refused calls reached the controller: %+v", evs.Events)
	}
	log := logBuf.String()
	if !strings.Contains(log, "refused a change") || !strings.Contains(log, fmt.Sprintf("pid=%d", os.Getpid())) {
		t.Fatalf("refusal not logged with the caller:\n%s", log)
	}
}

func TestDefaultPolicy(t *testing.T) {
	p := server.GroupPolicy{GID: 990, GroupName: "fulcrum", AllowUIDs: []int{1001}, AllowGIDs: []int{2000}}
	cases := []struct {
		c  api.Caller
		ok bool
	}{
		{api.Caller{UID: 0, GID: 0}, true},
		{api.Caller{UID: 1000, GID: 990}, true},                         // primary group
		{api.Caller{UID: 1000, GID: 1000, Groups: []int{4, 990}}, true}, // supplementary group
		{api.Caller{UID: 1001, GID: 1001}, true},                        // allow-listed uid
		{api.Caller{UID: 1002, GID: 1002, Groups: []int{2000}}, true},   // allow-listed gid
		{api.Caller{UID: 1000, GID: 1000, Groups: []int{4, 27}}, false},
		{api.Caller{UID: 65534, GID: 65534}, false},
	}
	for _, tc := range cases {
		err := p.Allow(tc.c)
		if (err == nil) != tc.ok {
			t.Errorf("Allow(%+v) = %v, want ok=%v", tc.c, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "usermod -aG fulcrum") {
			t.Errorf("refusal does not say what to do: %v", err)
		}
	}
	if err := (server.GroupPolicy{GID: -1, GroupName: "fulcrum"}).Allow(api.Caller{UID: 1000, GID: 1000}); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("no group: %v", err)
	}
	// control.group "-" (none) is a choice, not a missing group: the refusal names the
	// allow lists rather than asking to create a group called "-".
	err := (server.GroupPolicy{GID: -1, GroupName: "-"}).Allow(api.Caller{UID: 1000, GID: 1000})
	if err == nil || strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "control.allow_uids") {
		t.Errorf("group \"-\": %v", err)
	}
}

func TestSocketFile(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	sock := apitest.Serve(t, server.Config{Group: "no-such-group-fulcrum-test"}, fake)
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %v, want a socket with 0660", fi.Mode())
	}
	// A second server on the same live socket refuses; a stale file is replaced.
	srv := server.New(server.Config{SocketPath: sock}, fake)
	if err := srv.Listen(); err == nil || !strings.Contains(err.Error(), "answers") {
		t.Fatalf("second Listen on a live socket: %v", err)
	}
	stale := filepath.Join(t.TempDir(), "control.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	srv = server.New(server.Config{SocketPath: stale}, fake)
	if err := srv.Listen(); err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := srv.Serve(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left after Serve: %v", err)
	}
}

func TestNoDaemon(t *testing.T) {
	c := client.New(filepath.Join(t.TempDir(), "control.sock"))
	_, err := c.Status(context.Background())
	if !errors.Is(err, client.ErrNoDaemon) || !strings.Contains(err.Error(), "is fulcrumd running? (systemctl status fulcrumd)") || !strings.Contains(err.Error(), "--socket") {
		t.Fatalf("missing socket: %v", err)
	}
}

func TestProfilesExportImport(t *testing.T) {
	src := apitest.NewOrin(t, 7)
	c := client.New(apitest.Serve(t, server.Config{Policy: server.PolicyFunc(func(api.Caller) error { return nil })}, src))
	defer c.Close()
	ctx := context.Background()
	ps, err := c.Profiles(ctx, api.ProfileFilter{Workload: "resnet18"})
	if err != nil || len(ps) != 7 {
		t.Fatalf("profiles: %d, %v", len(ps), err)
	}
	if ps, _ := c.Profiles(ctx, api.ProfileFilter{Workload: "other"}); len(ps) != 0 {
		t.Fatalf("filter ignored: %d", len(ps))
	}
	for _, format := range []store.Format{store.CSV, store.JSON} {
		var got, want bytes.Buffer
		if err := c.ExportProfiles(ctx, &got, string(format), api.ProfileFilter{}); err != nil {
			t.Fatal(err)
		}
		if err := src.Store.Export(&want, format, store.Filter{}); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Fatalf("%s export differs from the store's", format)
		}
		dst := apitest.NewOrin(t, 0)
		dc := client.New(apitest.Serve(t, server.Config{Policy: server.PolicyFunc(func(api.Caller) error { return nil })}, dst))
		res, err := dc.ImportProfiles(ctx, bytes.NewReader(got.Bytes()), api.ImportOptions{Format: string(format)})
		if err != nil || res.Added != 7 {
			t.Fatalf("import %s: %+v %v", format, res, err)
		}
		res, err = dc.ImportProfiles(ctx, bytes.NewReader(got.Bytes()), api.ImportOptions{})
		if err != nil || res.Unchanged != 7 {
			t.Fatalf("re-import %s (format sniffed): %+v %v", format, res, err)
		}
		dc.Close()
	}
	// An import over the limit is refused whole.
	dst := apitest.NewOrin(t, 0)
	dc := client.New(apitest.Serve(t, server.Config{Policy: server.PolicyFunc(func(api.Caller) error { return nil }), MaxImportBytes: 100}, dst))
	defer dc.Close()
	var csv bytes.Buffer
	_ = src.Store.Export(&csv, store.CSV, store.Filter{})
	_, err = dc.ImportProfiles(ctx, &csv, api.ImportOptions{Format: api.FormatCSV})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized import: %v", err)
	}
	if n, _ := dst.Store.Count(); n != 0 {
		t.Fatalf("oversized import stored %d profiles", n)
	}
	// A body that is not a profile file is a 400 saying what is wrong, not a 500.
	gc := client.New(apitest.Serve(t, server.Config{Policy: server.PolicyFunc(func(api.Caller) error { return nil })}, dst))
	defer gc.Close()
	for _, tc := range []struct {
		body   string
		format store.Format
		want   string
	}{
		{"\x00\x01garbage,not,a,table\nmore garbage\n", store.CSV, "csv header lacks column(s)"},
		{"hello\n", "", "csv header lacks column(s)"},
		{`{"schema_version": 1, "profiles": [{"board": 5}]}`, store.JSON, "json: profile 1"},
		{`{"profiles": []}`, store.JSON, "schema_version 0"},
	} {
		_, err := gc.ImportProfiles(ctx, strings.NewReader(tc.body), api.ImportOptions{Format: string(tc.format)})
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Code != api.CodeBadRequest || !strings.Contains(ae.Message, tc.want) {
			t.Errorf("import %q: %v, want a 400 containing %q", tc.body, err, tc.want)
		}
	}
	if n, _ := dst.Store.Count(); n != 0 {
		t.Fatalf("bad imports stored %d profiles", n)
	}
}

func TestModeAndOptimize(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	c := client.New(apitest.Serve(t, server.Config{Policy: server.PolicyFunc(func(api.Caller) error { return nil })}, fake))
	defer c.Close()
	ctx := context.Background()
	m := powermode.Mode{Cores: 4, CPUKHz: 1113600, GPUHz: 408000000, EMCHz: 2133000000}
	mi, err := c.ApplyMode(ctx, m)
	if err != nil || mi.Current != m || !mi.Held {
		t.Fatalf("ApplyMode: %+v %v", mi, err)
	}
	// Optimize passes the method through, blocks until done and a second one is busy.
	started, release := make(chan struct{}), make(chan struct{})
	fake.OptimizeFunc = func(ctx context.Context, req api.OptimizeRequest) (api.OptimizeResult, error) {
		close(started)
		select {
		case <-release:
		case <-ctx.Done():
			return api.OptimizeResult{}, ctx.Err()
		}
		return api.OptimizeResult{Method: req.Method, Plan: api.Plan{Mode: apitest.Mode30W, InferBatch: 4, Feasible: true}, Profiled: req.MaxProfiles, StopReason: "budget spent"}, nil
	}
	var wg sync.WaitGroup
	var res api.OptimizeResult
	var oerr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		res, oerr = c.Optimize(ctx, api.OptimizeRequest{Method: api.OptimizeALS, MaxProfiles: 12})
	}()
	<-started
	c2 := client.New(c.Socket())
	defer c2.Close()
	_, err = c2.Optimize(ctx, api.OptimizeRequest{Method: api.OptimizeGMD})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != api.CodeBusy {
		t.Fatalf("second optimize: %v", err)
	}
	if st, _ := c2.Status(ctx); st.Optimizing != api.OptimizeALS {
		t.Fatalf("status while optimizing: %q", st.Optimizing)
	}
	close(release)
	wg.Wait()
	if oerr != nil || res.Method != api.OptimizeALS || res.Profiled != 12 || res.Plan.InferBatch != 4 {
		t.Fatalf("optimize: %+v %v", res, oerr)
	}
	if mi, _ := c.Mode(ctx); mi.Current != apitest.Mode30W || mi.Held {
		t.Fatalf("mode after optimize: %+v", mi)
	}
}

func TestOptimizeCancelledWhenClientGoes(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	c := client.New(apitest.Serve(t, server.Config{Policy: server.PolicyFunc(func(api.Caller) error { return nil })}, fake))
	defer c.Close()
	started, aborted := make(chan struct{}), make(chan error, 1)
	fake.OptimizeFunc = func(ctx context.Context, _ api.OptimizeRequest) (api.OptimizeResult, error) {
		close(started)
		<-ctx.Done()
		aborted <- ctx.Err()
		return api.OptimizeResult{}, ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	if _, err := c.Optimize(ctx, api.OptimizeRequest{Method: api.OptimizeGMD}); !errors.Is(err, context.Canceled) {
		t.Fatalf("client side: %v", err)
	}
	if err := <-aborted; !errors.Is(err, context.Canceled) {
		t.Fatalf("the controller's optimize was not cancelled: %v", err)
	}
}

func TestEventsFollow(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	c := client.New(apitest.Serve(t, server.Config{}, fake))
	defer c.Close()
	for i := 1; i <= 3; i++ {
		fake.Publish(api.EventPlan, fmt.Sprintf("plan %d", i), nil, nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan api.Event, 16)
	done := make(chan error, 1)
	go func() {
		done <- c.Follow(ctx, 1, func(e api.Event) error { got <- e; return nil })
	}()
	// The backlog after seq 1, then events published while following.
	for _, want := range []string{"plan 2", "plan 3"} {
		if e := <-got; e.Message != want {
			t.Fatalf("got %q, want %q", e.Message, want)
		}
	}
	// The server subscribes before it reads the backlog, so the subscription exists now.
	if n := fake.Subscribers(); n != 1 {
		t.Fatalf("%d subscribers while following, want 1", n)
	}
	fake.Publish(api.EventStepDown, "power over budget", nil, map[string]float64{"power_mw": 31000})
	e := <-got
	if e.Seq != 4 || e.Kind != api.EventStepDown || !bytes.Contains(e.Data, []byte("31000")) {
		t.Fatalf("followed event = %+v", e)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("follow ended with %v", err)
	}
	// The server lets go of the subscription once the client is gone.
	eventually(t, "the subscription to end", func() bool { return fake.Subscribers() == 0 })
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// eventually waits for cond; the deadline only turns a hang into a failure.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
