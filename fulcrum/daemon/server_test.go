package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

func startServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	return startServerL(t, cfg, time.Second)
}

// startServerL starts a worker server (no controller) whose scheduler holds the latency
// budget l, as a controller would give it from the operator's targets.
func startServerL(t *testing.T, cfg Config, l time.Duration) *Server {
	t.Helper()
	if cfg.RuntimeDir == "" {
		cfg.RuntimeDir = t.TempDir()
	}
	if cfg.Sched.DefaultTrain == 0 {
		cfg.Sched = sched.Config{DefaultTrain: time.Millisecond, DefaultInfer: time.Millisecond}
	}
	s := NewServer(cfg)
	s.Scheduler().SetLatencyBudget(l)
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return s
}

// raw is a hand-driven protocol connection for malformed input.
type raw struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, s *Server) *raw {
	t.Helper()
	c, err := net.Dial("unix", s.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &raw{t: t, c: c, r: bufio.NewReader(c)}
}

func (r *raw) send(line string) {
	r.t.Helper()
	if _, err := r.c.Write([]byte(line + "\n")); err != nil {
		r.t.Fatal(err)
	}
}

func (r *raw) recv() proto.Msg {
	r.t.Helper()
	_ = r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := r.r.ReadBytes('\n')
	if err != nil {
		r.t.Fatalf("read reply: %v", err)
	}
	var m proto.Msg
	if err := json.Unmarshal(line, &m); err != nil {
		r.t.Fatalf("reply %q: %v", line, err)
	}
	return m
}

func (r *raw) expectError(code string) proto.Msg {
	r.t.Helper()
	m := r.recv()
	if m.Type != proto.TypeError || m.Code != code {
		r.t.Fatalf("got %+v, want error %s", m, code)
	}
	if m.Message == "" {
		r.t.Fatalf("error %s without a message", code)
	}
	return m
}

func dial(t *testing.T, s *Server, reg client.Registration) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, s.SocketPath(), reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctx10(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestTrainAndInferRoundTrips(t *testing.T) {
	s := startServer(t, Config{})
	tr := dial(t, s, client.Registration{Role: proto.RoleTrain, Workload: "resnet18", Batch: 32})
	inf := dial(t, s, client.Registration{Role: proto.RoleInfer, Workload: "yolo", Batch: 2, BatchSizes: []int{1, 2}})
	if tr.ID == inf.ID || tr.Token == "" || tr.LatencyBudgetMS != 1000 {
		t.Fatalf("registrations %+v %+v", tr, inf)
	}
	for i := 0; i < 3; i++ {
		g, err := tr.Acquire(ctx10(t))
		if err != nil {
			t.Fatal(err)
		}
		if g.Kind != proto.KindTrain || g.Batch != 32 {
			t.Fatalf("grant %+v", g)
		}
		if err := tr.Release(g.Grant, 2*time.Millisecond, 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := inf.Arrivals([]proto.Request{{ID: "r1"}, {ID: "r2"}}); err != nil {
		t.Fatal(err)
	}
	g, err := inf.Acquire(ctx10(t))
	if err != nil {
		t.Fatal(err)
	}
	if g.Kind != proto.KindInfer || strings.Join(g.RequestIDs, ",") != "r1,r2" {
		t.Fatalf("grant %+v", g)
	}
	if err := inf.Release(g.Grant, time.Millisecond, 0, []proto.Result{{ID: "r1", OK: true}, {ID: "r2", OK: false, Error: "bad image"}}); err != nil {
		t.Fatal(err)
	}
	// A heartbeat round trip orders us after the release on the daemon's side.
	if err := inf.Heartbeat(ctx10(t)); err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	if len(snap.Workers) != 2 || snap.Workers[0].PID != os.Getpid() || snap.Workers[0].UID != os.Getuid() {
		t.Fatalf("workers %+v: pid/uid must be the peer's (%d/%d)", snap.Workers, os.Getpid(), os.Getuid())
	}
	wt, _ := snap.Workload(proto.RoleTrain, "resnet18")
	wi, _ := snap.Workload(proto.RoleInfer, "yolo")
	if wt.Minibatches != 3 || wt.Samples != 96 {
		t.Fatalf("training stats %+v", wt)
	}
	if wi.Served != 1 || wi.Failed != 1 || wi.Latency.Count != 1 {
		t.Fatalf("inference stats %+v", wi)
	}
}

func TestBadInputGetsErrorsAndOthersKeepBeingServed(t *testing.T) {
	s := startServer(t, Config{MaxLineBytes: 1024})
	bad := dialRaw(t, s)
	tr := dial(t, s, client.Registration{Role: proto.RoleTrain, Workload: "resnet18", Batch: 8})

	bad.send(`{"type":"acquire"}`)
	bad.expectError(proto.CodeNotRegistered)
	bad.send(`this is not json`)
	bad.expectError(proto.CodeBadJSON)
	bad.send(`{"type":"heartbeat","pad":"` + strings.Repeat("x", 5000) + `"}`)
	bad.expectError(proto.CodeTooLong)
	bad.send(`{"type":"launch_missiles"}`)
	bad.expectError(proto.CodeUnknownType)
	bad.send(`{"type":"register","v":7,"role":"train","workload":"w"}`)
	bad.expectError(proto.CodeBadVersion)
	bad.send(`{"type":"register","v":1,"role":"infer","workload":"yolo","batch":4,"seq":5}`)
	if m := bad.recv(); m.Type != proto.TypeRegistered || m.V != proto.Version || m.Seq != 5 {
		t.Fatalf("register reply %+v", m)
	}
	bad.send(`{"type":"register","v":1,"role":"infer","workload":"yolo"}`)
	bad.expectError(proto.CodeOutOfOrder)
	bad.send(`{"type":"release","grant":3,"duration_ms":1,"seq":9}`)
	if m := bad.expectError(proto.CodeOutOfOrder); m.Seq != 9 || m.Ref != proto.TypeRelease {
		t.Fatalf("error must echo seq and ref: %+v", m)
	}

	// Through all of that, the training worker is served normally.
	for i := 0; i < 5; i++ {
		g, err := tr.Acquire(ctx10(t))
		if err != nil {
			t.Fatal(err)
		}
		bad.send(`{"type":"acquire"}{"type":"acquire"}`)
		if err := tr.Release(g.Grant, time.Millisecond, 0, nil); err != nil {
			t.Fatal(err)
		}
		bad.expectError(proto.CodeBadJSON)
	}
	bad.send(`{"type":"heartbeat","seq":77}`)
	if m := bad.recv(); m.Type != proto.TypeHeartbeat || m.Seq != 77 {
		t.Fatalf("heartbeat reply %+v", m)
	}
}

func TestNoImpersonation(t *testing.T) {
	s := startServer(t, Config{})
	victim := dial(t, s, client.Registration{Role: proto.RoleTrain, Workload: "resnet18", Batch: 8})
	g, err := victim.Acquire(ctx10(t))
	if err != nil {
		t.Fatal(err)
	}
	mallory := dialRaw(t, s)
	mallory.send(`{"type":"release","grant":` + strconv.FormatUint(g.Grant, 10) + `,"worker_id":"` + victim.ID + `","token":"` + victim.Token + `"}`)
	mallory.expectError(proto.CodeNotRegistered)
	mallory.send(`{"type":"register","v":1,"role":"train","workload":"x"}`)
	mallory.recv()
	mallory.send(`{"type":"release","grant":` + strconv.FormatUint(g.Grant, 10) + `,"worker_id":"` + victim.ID + `","token":"` + victim.Token + `"}`)
	mallory.expectError(proto.CodeForbidden)
	mallory.send(`{"type":"release","grant":` + strconv.FormatUint(g.Grant, 10) + `}`)
	mallory.expectError(proto.CodeOutOfOrder) // its own registration holds no grant
	if snap := s.Snapshot(); snap.Turn != victim.ID {
		t.Fatalf("turn %q: the victim's grant must still be held", snap.Turn)
	}
	if err := victim.Release(g.Grant, time.Millisecond, 0, nil); err != nil {
		t.Fatal(err)
	}
}

func TestDisconnectWhileHoldingTurn(t *testing.T) {
	s := startServer(t, Config{})
	a := dial(t, s, client.Registration{Role: proto.RoleTrain, Workload: "a", Batch: 8})
	b := dial(t, s, client.Registration{Role: proto.RoleTrain, Workload: "b", Batch: 8})
	if _, err := a.Acquire(ctx10(t)); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := b.Acquire(ctx10(t))
		got <- err
	}()
	a.Close() // holding the turn
	if err := <-got; err != nil {
		t.Fatalf("b never got the turn after a disconnected: %v", err)
	}
}

func TestSingleInstance(t *testing.T) {
	dir := t.TempDir()
	startServer(t, Config{RuntimeDir: dir})
	second := NewServer(Config{RuntimeDir: dir})
	err := second.Listen()
	if !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second fulcrumd: %v, want ErrAlreadyRunning", err)
	}
	if !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) || !strings.Contains(err.Error(), filepath.Join(dir, SocketName)) {
		t.Fatalf("message %q must name the pid and the socket", err)
	}
}

func TestStaleSocketReplaced(t *testing.T) {
	dir := t.TempDir()
	// A crashed fulcrumd leaves a socket file nobody listens on.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, SocketName), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Stat(filepath.Join(dir, SocketName)); err != nil {
		t.Fatalf("setup: stale socket missing: %v", err)
	}
	s := startServer(t, Config{RuntimeDir: dir})
	fi, err := os.Stat(s.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %v, want 0660", fi.Mode().Perm())
	}
	dial(t, s, client.Registration{Role: proto.RoleTrain, Workload: "a", Batch: 1})
}

func TestLiveForeignSocketRefused(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = NewServer(Config{RuntimeDir: dir}).Listen()
	if !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("got %v, want ErrAlreadyRunning for a socket that answers", err)
	}
}

func TestWorkerThatStopsReadingIsDropped(t *testing.T) {
	s := startServer(t, Config{WriteTimeout: 50 * time.Millisecond})
	tr := dial(t, s, client.Registration{Role: proto.RoleTrain, Workload: "a", Batch: 8})
	flood := dialRaw(t, s)
	// Heartbeats whose replies are never read: the kernel buffer fills, then the write
	// queue, then fulcrumd drops the connection.
	line := []byte(strings.Repeat(`{"type":"heartbeat"}`+"\n", 1000))
	deadline := time.Now().Add(20 * time.Second)
	for {
		_ = flood.c.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := flood.c.Write(line); err != nil {
			break // dropped
		}
		if time.Now().After(deadline) {
			t.Fatal("fulcrumd never dropped a worker that does not read")
		}
	}
	g, err := tr.Acquire(ctx10(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Release(g.Grant, time.Millisecond, 0, nil); err != nil {
		t.Fatal(err)
	}
}

func TestProfileGrantOverSocket(t *testing.T) {
	s := startServer(t, Config{})
	w := dial(t, s, client.Registration{Role: proto.RoleInfer, Workload: "yolo", Batch: 4})
	res := make(chan error, 1)
	var got time.Duration
	go func() {
		var err error
		got, err = s.Scheduler().Profile(ctx10(t), w.ID, 16)
		res <- err
	}()
	g, err := w.Acquire(ctx10(t))
	if err != nil {
		t.Fatal(err)
	}
	if g.Kind != proto.KindProfile || g.Batch != 16 || len(g.RequestIDs) != 0 {
		t.Fatalf("grant %+v: want a profile grant of 16", g)
	}
	time.Sleep(8 * time.Millisecond) // the batch: a release may not report more than the turn was held
	if err := w.Release(g.Grant, 7*time.Millisecond, 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	if got != 7*time.Millisecond {
		t.Fatalf("profiled %v, want the worker's 7ms", got)
	}
}
