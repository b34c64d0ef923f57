package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// fakeDaemon is a fake fulcrumd on a real unix socket that hands each connection to the
// test, and can go away (listener and socket file gone) and come back.
type fakeDaemon struct {
	t    *testing.T
	path string
	l    net.Listener
	c    chan *scripted
}

func newFakeDaemon(t *testing.T) *fakeDaemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "fcs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &fakeDaemon{t: t, path: filepath.Join(dir, "w.sock")}
	f.listen()
	t.Cleanup(func() { f.l.Close() })
	return f
}

func (f *fakeDaemon) listen() {
	l, err := net.Listen("unix", f.path)
	if err != nil {
		f.t.Fatal(err)
	}
	f.l, f.c = l, make(chan *scripted, 4)
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			s := &scripted{t: f.t, conn: nc, in: bufio.NewReader(nc)}
			f.t.Cleanup(func() { nc.Close() })
			f.c <- s
		}
	}()
}

func (f *fakeDaemon) accept() *scripted {
	f.t.Helper()
	select {
	case s := <-f.c:
		return s
	case <-time.After(10 * time.Second):
		f.t.Fatal("no connection in 10 s")
		return nil
	}
}

// register answers a connection's register and returns the raw register line's fields.
func (s *scripted) register(id string) map[string]any {
	s.t.Helper()
	_ = s.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := s.in.ReadBytes('\n')
	if err != nil {
		s.t.Fatalf("fake fulcrumd: read register: %v", err)
	}
	var raw map[string]any
	if err := json.Unmarshal(line, &raw); err != nil || raw["type"] != proto.TypeRegister {
		s.t.Fatalf("fake fulcrumd: want register, got %s", line)
	}
	s.send(`{"type":"registered","v":1,"seq":1,"worker_id":"` + id + `","token":"t"}` + "\n")
	return raw
}

// A worker that cannot run profile batches says so at registration ("profiles": false);
// one that says nothing sends no field (old clients' behaviour).
func TestRegistrationDeclinesProfiles(t *testing.T) {
	f := newFakeDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, no := range []bool{true, false} {
		done := make(chan map[string]any, 1)
		go func() { done <- f.accept().register("w-1") }()
		c, err := Dial(ctx, f.path, Registration{Role: proto.RoleInfer, Workload: "w", Batch: 1, NoProfiles: no})
		if err != nil {
			t.Fatal(err)
		}
		raw := <-done
		c.Close()
		v, present := raw["profiles"]
		if no && (!present || v != false) {
			t.Errorf("NoProfiles: register carried profiles=%v (present %v), want false", v, present)
		}
		if !no && present {
			t.Errorf("a worker that runs profile batches sent profiles=%v; old behaviour sends nothing", v)
		}
	}
}

// A session loses its connection to shutting_down while it has requests queued at
// fulcrumd and one in a held grant: while fulcrumd is away the queued ones are handed to
// the worker (TakeQueued), a release of the lost grant is dropped rather than sent to
// the new fulcrumd, and after registering again the requests still not served are
// reported again with their age. turn_expired is not retried.
func TestSessionReconnects(t *testing.T) {
	f := newFakeDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan *scripted, 1)
	go func() {
		s := f.accept()
		s.register("infer-1")
		done <- s
	}()
	sess, err := Open(ctx, f.path, Registration{Role: proto.RoleInfer, Workload: "w", Batch: 2}, SessionOptions{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	s := <-done
	if err := sess.Arrivals([]proto.Request{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d"}}); err != nil {
		t.Fatal(err)
	}
	if m := s.recv(); m.Type != proto.TypeArrivals || len(m.Requests) != 4 {
		t.Fatalf("arrivals sent %+v", m)
	}
	go func() {
		m := s.recv()
		s.send(`{"type":"grant","seq":` + itoa(m.Seq) + `,"grant":7,"kind":"infer","batch":2,"request_ids":["a","b"]}` + "\n")
	}()
	g, err := sess.AcquireOrAway(ctx)
	if err != nil || g.Grant != 7 {
		t.Fatalf("acquire: %+v %v", g, err)
	}
	// fulcrumd stops: shutting_down, the connection closed, the socket gone.
	s.send(`{"type":"error","code":"shutting_down","message":"fulcrumd is shutting down; reconnect after it restarts"}` + "\n")
	s.conn.Close()
	f.l.Close()
	if _, err := sess.AcquireOrAway(ctx); !errors.Is(err, ErrAway) {
		t.Fatalf("acquire on a lost connection: %v, want ErrAway", err)
	}
	if err := sess.Release(7, time.Millisecond, 0, nil); err != nil {
		t.Fatalf("release of the lost grant: %v", err)
	}
	if err := sess.Arrivals([]proto.Request{{ID: "e"}}); err != nil {
		t.Fatalf("arrivals while away: %v", err)
	}
	if got := sess.TakeQueued(1); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("TakeQueued while away: %v, want the oldest not granted, c", got)
	}
	if ok, err := sess.TryReconnect(ctx); ok || err != nil {
		t.Fatalf("reconnect with no fulcrumd: %v %v", ok, err)
	}
	time.Sleep(30 * time.Millisecond) // the requeued ones have an age
	f.listen()
	go func() {
		s := f.accept()
		s.register("infer-2")
		done <- s
	}()
	if err := sess.Reconnect(ctx); err != nil {
		t.Fatal(err)
	}
	s = <-done
	m := s.recv()
	var ids []string
	for _, r := range m.Requests {
		ids = append(ids, r.ID)
		if r.AgeMS < 20 {
			t.Errorf("request %s reported again with age %.1f ms; it is older", r.ID, r.AgeMS)
		}
	}
	if m.Type != proto.TypeArrivals || !slices.Equal(ids, []string{"d", "e"}) {
		t.Fatalf("after registering again: %+v, want arrivals of d and e (a, b were granted, c served while away)", m)
	}
	if n, _, gap := sess.Stats(); n != 1 || gap <= 0 || sess.ID() != "infer-2" {
		t.Fatalf("stats %d, gap %v, id %q", n, gap, sess.ID())
	}
	// The worker misbehaved: not a reason to reconnect.
	go func() {
		m := s.recv()
		s.send(`{"type":"error","code":"turn_expired","seq":` + itoa(m.Seq) + `,"message":"held past the hold limit"}` + "\n")
		s.conn.Close()
	}()
	_, err = sess.Acquire(ctx)
	var pe *proto.Error
	if !errors.As(err, &pe) || pe.Code != proto.CodeTurnExpired {
		t.Fatalf("acquire answered turn_expired: %v", err)
	}
}

func itoa(n uint64) string { b, _ := json.Marshal(n); return string(b) }

// TestReconnectSplitsALongQueue: a stream that queued thousands of requests while
// fulcrumd was away (a flood, or a host stalled long enough for the connection to be
// lost) reports them again in arrivals lines fulcrumd's reader accepts (at most
// proto.MaxLineBytes each). Before, the re-report split only by proto.MaxRequestsMsg
// (4,096): 3,000 queued requests went out as one ~100 KB line, fulcrumd discarded it as
// too_long and the worker stopped (seen in TestFloodingWorkerCountsRefusalsAndCarriesOn
// with both cores busy).
func TestReconnectSplitsALongQueue(t *testing.T) {
	f := newFakeDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan *scripted, 1)
	go func() {
		s := f.accept()
		s.register("infer-1")
		done <- s
	}()
	sess, err := Open(ctx, f.path, Registration{Role: proto.RoleInfer, Workload: "w", Batch: 2}, SessionOptions{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	s := <-done
	s.send(`{"type":"error","code":"shutting_down","message":"fulcrumd is shutting down; reconnect after it restarts"}` + "\n")
	s.conn.Close()
	f.l.Close()
	if _, err := sess.AcquireOrAway(ctx); !errors.Is(err, ErrAway) {
		t.Fatalf("acquire on a lost connection: %v, want ErrAway", err)
	}
	const n = 3000
	for i := range n {
		if err := sess.Arrivals([]proto.Request{{ID: "request-" + itoa(uint64(i))}}); err != nil {
			t.Fatalf("arrivals while away: %v", err)
		}
	}
	f.listen()
	go func() {
		s := f.accept()
		s.register("infer-2")
		done <- s
	}()
	if err := sess.Reconnect(ctx); err != nil {
		t.Fatal(err)
	}
	s = <-done
	seen, lines := 0, 0
	for seen < n {
		_ = s.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := s.in.ReadBytes('\n')
		if err != nil {
			t.Fatalf("after %d of %d requests reported again: %v", seen, n, err)
		}
		if len(line) > proto.MaxLineBytes {
			t.Fatalf("an arrivals line of %d bytes (%d requests so far); fulcrumd discards lines over %d", len(line), seen, proto.MaxLineBytes)
		}
		var m proto.Msg
		if err := json.Unmarshal(line, &m); err != nil || m.Type != proto.TypeArrivals {
			t.Fatalf("want arrivals, got %.200s (%v)", line, err)
		}
		if perr := m.Validate(); perr != nil {
			t.Fatalf("arrivals line refused by the protocol's own check: %v", perr)
		}
		seen += len(m.Requests)
		lines++
	}
	t.Logf("%d requests reported again in %d lines", seen, lines)
}
