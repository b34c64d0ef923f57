package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// chunkReader returns its chunks one per Read; an error chunk is returned as an error.
type chunkReader struct {
	chunks []any // string or error
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.chunks) == 0 {
		return 0, io.EOF
	}
	c := r.chunks[0]
	r.chunks = r.chunks[1:]
	if err, ok := c.(error); ok {
		return 0, err
	}
	s := c.(string)
	if len(s) > len(p) {
		r.chunks = append([]any{s[len(p):]}, r.chunks...)
		s = s[:len(p)]
	}
	return copy(p, s), nil
}

var errTimeout = errors.New("i/o timeout")

func TestLineReaderKeepsPartialLineAcrossErrors(t *testing.T) {
	long := strings.Repeat("x", 100)
	r := &chunkReader{chunks: []any{`{"a":`, errTimeout, "1}\r\n{\"b\"", ":2}\n" + long + "\n", `{"c":3}` + "\n"}}
	l := lineReader{r: r, max: 64}
	want := []struct {
		line string
		err  error
	}{
		{"", errTimeout},
		{`{"a":1}`, nil},
		{`{"b":2}`, nil},
		{"", errLineTooLong},
		{`{"c":3}`, nil},
		{"", io.EOF},
	}
	for i, w := range want {
		got, err := l.next()
		if !errors.Is(err, w.err) || (w.err == nil && string(got) != w.line) {
			t.Fatalf("line %d: got %q, %v; want %q, %v", i, got, err, w.line, w.err)
		}
	}
}

// scripted is one fake fulcrumd connection over a real unix socket: the test reads
// what the client sends and writes replies by hand.
type scripted struct {
	t    *testing.T
	conn net.Conn
	in   *bufio.Reader
}

// recv and send run on the fake's goroutines: they report with Errorf, not Fatalf.
func (s *scripted) recv() proto.Msg {
	s.t.Helper()
	_ = s.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := s.in.ReadBytes('\n')
	if err != nil {
		s.t.Errorf("fake fulcrumd: read: %v", err)
		return proto.Msg{}
	}
	var m proto.Msg
	if err := json.Unmarshal(line, &m); err != nil {
		s.t.Errorf("fake fulcrumd: %q: %v", line, err)
	}
	return m
}

func (s *scripted) send(lines ...string) {
	s.t.Helper()
	for _, l := range lines {
		if _, err := io.WriteString(s.conn, l); err != nil {
			s.t.Errorf("fake fulcrumd: write: %v", err)
		}
	}
}

// serve runs f as the fake's side of one exchange; wait for the returned channel.
func serve(f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	return done
}

// dialScripted connects a Client to a fake fulcrumd that registers it.
func dialScripted(t *testing.T) (*Client, *scripted) {
	t.Helper()
	dir, err := os.MkdirTemp("", "fcc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	l, err := net.Listen("unix", filepath.Join(dir, "w.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srv := make(chan *scripted, 1)
	go func() {
		nc, err := l.Accept()
		if err != nil {
			srv <- nil
			return
		}
		s := &scripted{t: t, conn: nc, in: bufio.NewReader(nc)}
		srv <- s
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type dialed struct {
		c   *Client
		err error
	}
	got := make(chan dialed, 1)
	go func() {
		c, err := Dial(ctx, filepath.Join(dir, "w.sock"), Registration{Role: proto.RoleTrain, Workload: "w", Batch: 8})
		got <- dialed{c, err}
	}()
	s := <-srv
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { s.conn.Close() })
	if m := s.recv(); m.Type != proto.TypeRegister || m.Workload != "w" {
		t.Fatalf("first message %+v, want register", m)
	}
	s.send(`{"type":"registered","v":1,"seq":1,"worker_id":"w-1","token":"t"}` + "\n")
	d := <-got
	if d.err != nil {
		t.Fatalf("dial: %v", d.err)
	}
	t.Cleanup(func() { d.c.Close() })
	if d.c.ID != "w-1" {
		t.Fatalf("worker id %q", d.c.ID)
	}
	return d.c, s
}

func TestAcquireCancelledKeepsTheStreamInStep(t *testing.T) {
	c, s := dialScripted(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	// Half a grant arrives before the wait is cancelled; the rest after.
	done := serve(func() {
		if m := s.recv(); m.Type != proto.TypeAcquire {
			t.Errorf("got %+v, want acquire", m)
		}
		s.send(`{"type":"grant","grant":7,`)
	})
	if _, err := c.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled acquire: %v, want context.DeadlineExceeded", err)
	}
	<-done
	s.send(`"kind":"train","seq":1}` + "\n")
	done = serve(func() { s.recv() }) // the second acquire
	g, err := c.Acquire(context.Background())
	<-done
	if err != nil {
		t.Fatalf("acquire after a cancelled one: %v", err)
	}
	if g.Grant != 7 || g.Kind != proto.KindTrain {
		t.Fatalf("grant %+v, want the one whose line straddled the cancel", g)
	}
}

func TestReplyForAnotherCallWaitsForIt(t *testing.T) {
	c, s := dialScripted(t)
	// A heartbeat echo and an error to an earlier release arrive while Acquire waits:
	// Acquire returns the error; the echo is kept for Heartbeat.
	done := serve(func() {
		s.recv() // acquire
		s.send(`{"type":"heartbeat"}`+"\n", `{"type":"error","code":"out_of_order","message":"no grant","ref":"release"}`+"\n")
	})
	_, err := c.Acquire(context.Background())
	<-done
	var pe *proto.Error
	if !errors.As(err, &pe) || pe.Ref != proto.TypeRelease {
		t.Fatalf("acquire: %v, want the release's error reply", err)
	}
	done = serve(func() { s.recv() }) // the heartbeat
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Heartbeat(ctx); err != nil {
		t.Fatalf("heartbeat whose echo was read by Acquire: %v", err)
	}
	<-done
	// A grant read by Heartbeat is kept for the next Acquire.
	done = serve(func() {
		s.recv() // heartbeat
		s.send(`{"type":"grant","grant":9,"kind":"train"}`+"\n", `{"type":"heartbeat"}`+"\n")
	})
	if err := c.Heartbeat(ctx); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	<-done
	done = serve(func() { s.recv() }) // acquire
	g, err := c.Acquire(ctx)
	<-done
	if err != nil || g.Grant != 9 {
		t.Fatalf("acquire after heartbeat read its grant: %+v, %v", g, err)
	}
}

func TestAcquireWhenFulcrumdGoes(t *testing.T) {
	c, s := dialScripted(t)
	done := serve(func() {
		s.recv()
		s.conn.Close()
	})
	_, err := c.Acquire(context.Background())
	<-done
	if err == nil || !strings.Contains(err.Error(), "closed the connection") {
		t.Fatalf("acquire on a closed connection: %v", err)
	}
	if _, err := c.Acquire(context.Background()); err == nil {
		t.Fatal("second acquire on a closed connection succeeded")
	}
}

func TestHeartbeatWhileAcquireWaits(t *testing.T) {
	c, s := dialScripted(t)
	type got struct {
		g   proto.Msg
		err error
	}
	acq := make(chan got, 1)
	sent := serve(func() {
		if m := s.recv(); m.Type != proto.TypeAcquire {
			t.Errorf("got %+v, want acquire", m)
		}
	})
	go func() {
		g, err := c.Acquire(context.Background())
		acq <- got{g, err}
	}()
	<-sent
	done := serve(func() {
		if m := s.recv(); m.Type != proto.TypeHeartbeat {
			t.Errorf("got %+v, want heartbeat", m)
		}
		s.send(`{"type":"heartbeat"}` + "\n")
	})
	// Whichever call reads the echo, the heartbeat gets it while the acquire still waits.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Heartbeat(ctx); err != nil {
		t.Fatalf("heartbeat while an acquire waits: %v", err)
	}
	<-done
	select {
	case a := <-acq:
		t.Fatalf("acquire returned before its grant: %+v", a)
	default:
	}
	s.send(`{"type":"grant","grant":3,"kind":"train"}` + "\n")
	select {
	case a := <-acq:
		if a.err != nil || a.g.Grant != 3 {
			t.Fatalf("acquire: %+v", a)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("acquire did not get its grant")
	}
}

// Issue 17: fulcrumd takes back a turn held past the hold limit, sends turn_expired and
// closes the connection. The worker's late release says so instead of "broken pipe", and
// an acquire returns the same error.
func TestReleaseAfterTurnExpiredSaysWhy(t *testing.T) {
	c, s := dialScripted(t)
	s.send(`{"type":"error","code":"turn_expired","message":"grant 3 was held 6s, past the hold limit 5s","ref":"grant"}` + "\n")
	s.conn.Close()
	var err error
	for range 3 { // the first write after the close may still be taken by the kernel
		if err = c.Release(3, time.Millisecond, 0, nil); err != nil {
			break
		}
	}
	var pe *proto.Error
	if !errors.As(err, &pe) || pe.Code != proto.CodeTurnExpired {
		t.Fatalf("release after the turn expired: %v; want the turn_expired error", err)
	}
}
