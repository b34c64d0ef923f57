package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// logRecords is a slog handler keeping the messages logged at warn or above.
type logRecords struct {
	mu   sync.Mutex
	warn []string
}

func (l *logRecords) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.warn = append(l.warn, r.Message)
	return nil
}
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecords) WithGroup(string) slog.Handler      { return l }

func (l *logRecords) has(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.warn {
		if strings.Contains(m, sub) {
			return true
		}
	}
	return false
}

// expectClosed reads until the server closes the connection.
func (r *raw) expectClosed() {
	r.t.Helper()
	_ = r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.r.ReadBytes('\n'); !errors.Is(err, io.EOF) {
		r.t.Fatalf("want the connection closed by fulcrumd, got %v", err)
	}
}

// Issue 17 item 3, over real sockets: a worker that acquires and never releases loses
// the turn at the hold limit, is told (turn_expired) and dropped; the other worker,
// waiting meanwhile, is granted. Before, the other waited for as long as the hog lived.
func TestTurnHeldPastHoldLimitIsTakenBack(t *testing.T) {
	logs := &logRecords{}
	s := startServer(t, Config{Log: slog.New(logs), Sched: sched.Config{
		DefaultTrain: time.Millisecond, DefaultInfer: time.Millisecond, HoldFactor: 1, HoldMin: 200 * time.Millisecond}})
	hog := dialRaw(t, s)
	hog.send(`{"type":"register","v":1,"role":"train","workload":"resnet18","batch":8}`)
	if m := hog.recv(); m.Type != proto.TypeRegistered {
		t.Fatalf("register: %+v", m)
	}
	hog.send(`{"type":"acquire","seq":1}`)
	g := hog.recv()
	if g.Type != proto.TypeGrant {
		t.Fatalf("acquire: %+v", g)
	}
	other := dial(t, s, client.Registration{Role: proto.RoleTrain, Workload: "resnet18", Batch: 8})
	og, err := other.Acquire(ctx10(t))
	if err != nil {
		t.Fatalf("the other worker was not granted while the hog held its turn: %v", err)
	}
	if m := hog.expectError(proto.CodeTurnExpired); !strings.Contains(m.Message, "hold limit") {
		t.Fatalf("turn_expired message %q does not name the hold limit", m.Message)
	}
	hog.expectClosed()
	if err := other.Release(og.Grant, time.Millisecond, 0, nil); err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	if snap.HoldExpired != 1 || len(snap.Workers) != 1 {
		t.Fatalf("hold_expired %d, %d workers; want 1 expiry and the hog gone", snap.HoldExpired, len(snap.Workers))
	}
	if !logs.has("hold limit") {
		t.Fatal("the expiry was not logged at warn")
	}
}

// Issue 17 item 4: connections that never register used to keep their slots forever, so
// max_workers of them locked every worker out. Now they are closed after
// register_timeout with idle_timeout, a real worker gets in, and refusals are warnings.
func TestUnregisteredConnectionsTimeOut(t *testing.T) {
	logs := &logRecords{}
	// All connections come from this process: no per-process cap or reserve here.
	s := startServer(t, Config{Log: slog.New(logs), MaxWorkers: 3, MaxPerProcess: 3, ReservedSlots: -1, RegisterTimeout: 200 * time.Millisecond})
	var idle []*raw
	for range 3 {
		idle = append(idle, dialRaw(t, s))
	}
	idle[0].send(`{"type":"heartbeat"}`) // a heartbeat does not count as registering
	if m := idle[0].recv(); m.Type != proto.TypeHeartbeat {
		t.Fatalf("heartbeat: %+v", m)
	}
	refused := dialRaw(t, s)
	refused.expectError(proto.CodeBusy)
	refused.expectClosed()
	// The Go client's Dial (it sends register before reading) says why, too.
	_, err := client.Dial(ctx10(t), s.SocketPath(), client.Registration{Role: proto.RoleTrain, Workload: "w", Batch: 8})
	var pe *proto.Error
	if !errors.As(err, &pe) || pe.Code != proto.CodeBusy {
		t.Fatalf("a worker dialing while all slots are taken: %v; want %s", err, proto.CodeBusy)
	}
	for _, r := range idle {
		r.expectError(proto.CodeIdleTimeout)
		r.expectClosed()
	}
	w := dial(t, s, client.Registration{Role: proto.RoleTrain, Workload: "resnet18", Batch: 8})
	if _, err := w.Acquire(ctx10(t)); err != nil {
		t.Fatalf("a worker after the idle connections timed out: %v", err)
	}
	if !logs.has("too many connections") || !logs.has("did not register in time") {
		t.Fatalf("refusals not logged at warn: %q", logs.warn)
	}
}

// A registered worker is not subject to the register timeout.
func TestRegisteredWorkerOutlivesRegisterTimeout(t *testing.T) {
	s := startServer(t, Config{RegisterTimeout: 100 * time.Millisecond})
	w := dial(t, s, client.Registration{Role: proto.RoleTrain, Workload: "resnet18", Batch: 8})
	time.Sleep(300 * time.Millisecond)
	if err := w.Heartbeat(ctx10(t)); err != nil {
		t.Fatalf("a registered worker was dropped: %v", err)
	}
}

// Bad worker input is logged at warn, at most about once a second.
func TestBadInputLoggedAtWarnRateLimited(t *testing.T) {
	logs := &logRecords{}
	s := startServer(t, Config{Log: slog.New(logs)})
	bad := dialRaw(t, s)
	for range 50 {
		bad.send(`not json`)
		bad.expectError(proto.CodeBadJSON)
	}
	logs.mu.Lock()
	n := 0
	for _, m := range logs.warn {
		if strings.Contains(m, "bad worker message") {
			n++
		}
	}
	logs.mu.Unlock()
	if n < 1 || n > 5 {
		t.Fatalf("%d warnings for 50 bad messages; want at least 1, rate-limited", n)
	}
}
