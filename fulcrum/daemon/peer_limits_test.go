package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// workersOf counts the registered workers of peer process pid.
func workersOf(s *Server, pid int) int {
	n := 0
	for _, w := range s.Snapshot().Workers {
		if w.PID == pid {
			n++
		}
	}
	return n
}

// Issue 26 item 4: 64 registered, silent connections of one process used to take every
// slot, and every other worker got busy for as long as they stayed open. Now one process
// holds at most worker.max_per_process (16 of the default 64) and a worker of another
// process registers at once.
func TestSilentConnectionsOfOneProcessDoNotLockOthersOut(t *testing.T) {
	s := startServer(t, Config{}) // the shipped limits: 64 workers, 16 per process, 8 reserved
	cmd, got := startWorkerProcess(t, s.SocketPath(), "silent", 64)
	held, _ := strconv.Atoi(got)
	t.Logf("the silent process registered %d of 64 connections", held)
	if held > DefaultConfig().MaxPerProcess {
		t.Fatalf("one process registered %d connections; want at most %d (worker.max_per_process)", held, DefaultConfig().MaxPerProcess)
	}
	start := time.Now()
	w := dial(t, s, client.Registration{Role: proto.RoleTrain, Workload: "resnet18", Batch: 8})
	t.Logf("a worker of another process registered in %v", time.Since(start))
	if _, err := w.Acquire(ctx10(t)); err != nil {
		t.Fatalf("the new worker was not granted: %v", err)
	}
	if n := workersOf(s, cmd.Process.Pid); n != held {
		t.Fatalf("the silent process has %d workers registered, said %d", n, held)
	}
}

// The reserve and eviction (issue 26 item 4): processes already holding connections
// stop at max_workers − reserved_slots, a process holding none still gets a reserved
// slot, and with every slot taken a process holding none evicts the longest-silent
// connection of the process holding the most — not the only worker of a process.
func TestReservedSlotsAndEvictionForProcessesHoldingNone(t *testing.T) {
	logs := &logRecords{}
	s := startServer(t, Config{Log: slog.New(logs), MaxWorkers: 8, MaxPerProcess: 4, ReservedSlots: 2})
	sock := s.SocketPath()
	a, na := startWorkerProcess(t, sock, "silent", 8)
	b, nb := startWorkerProcess(t, sock, "silent", 8)
	c, nc := startWorkerProcess(t, sock, "silent", 8)
	// a: 4 (its cap); b: 2 (up to 8−2 slots); c: 1 (a reserved slot: it held none).
	if na != "4" || nb != "2" || nc != "1" {
		t.Fatalf("registered a %s, b %s, c %s; want 4, 2, 1", na, nb, nc)
	}
	mine := dial(t, s, client.Registration{Role: proto.RoleTrain, Workload: "resnet18", Batch: 8}) // the last reserved slot
	d, nd := startWorkerProcess(t, sock, "silent", 8)
	if nd != "1" {
		t.Fatalf("a process holding none registered %s connections with every slot taken; want 1 (by eviction)", nd)
	}
	time.Sleep(100 * time.Millisecond) // the evicted connection's reader ends
	got := []int{workersOf(s, a.Process.Pid), workersOf(s, b.Process.Pid), workersOf(s, c.Process.Pid), workersOf(s, d.Process.Pid)}
	if got[0] != 3 || got[1] != 2 || got[2] != 1 || got[3] != 1 {
		t.Fatalf("workers per process a, b, c, d = %v; want [3 2 1 1] (one of a's, the process holding the most, evicted)", got)
	}
	if err := mine.Heartbeat(ctx10(t)); err != nil {
		t.Fatalf("this process's only worker was evicted: %v", err)
	}
	if !logs.has("evicted") {
		t.Fatalf("eviction not logged: %q", logs.warn)
	}
}

// Issue 26 item 3, half-open connections: a process whose reader is gone (a socket
// closed in one thread while another blocks in recv) used to hold one grant per
// connection to the hold limit in turn — 60 of them kept a steady stream waiting 24 s.
// Now the first expiry puts the process on probation (its next turn is held to at most
// a second) and drops its connections that stayed silent through the expired turn; the
// second at the latest drops the rest: the waiting worker is granted after at most two
// expiries, not ten.
func TestHalfOpenConnectionsOfOneProcessCostAtMostTwoTurns(t *testing.T) {
	s := startServerL(t, Config{Sched: sched.Config{DefaultTrain: time.Millisecond,
		DefaultInfer: time.Millisecond, HoldFactor: 1, HoldMin: 300 * time.Millisecond}}, time.Second)
	cmd, got := startWorkerProcess(t, s.SocketPath(), "halfopen", 10)
	if got != "10" {
		t.Fatalf("the half-open process registered %s of 10", got)
	}
	w := dial(t, s, client.Registration{Role: proto.RoleTrain, Workload: "resnet18", Batch: 8})
	start := time.Now()
	g, err := w.Acquire(ctx10(t))
	if err != nil {
		t.Fatalf("the honest worker was not granted: %v", err)
	}
	expired := s.Snapshot().HoldExpired
	t.Logf("granted after %v, %d hold expiries (hold limit 300 ms)", time.Since(start), expired)
	if expired < 1 || expired > 2 {
		t.Fatalf("%d turns expired before the honest worker was granted; want 1 or 2 (the process's silent connections dropped)", expired)
	}
	if err := w.Release(g.Grant, time.Millisecond, 0, nil); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(5 * time.Second); workersOf(s, cmd.Process.Pid) > 0 && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
	}
	if n := workersOf(s, cmd.Process.Pid); n != 0 {
		t.Fatalf("%d workers of the half-open process still registered", n)
	}
}

// otherGroup is a group this process may chown a file to other than its own gid: any
// group for root, else a supplementary one ("" when there is none).
func otherGroup(t *testing.T) (string, int) {
	t.Helper()
	var gids []int
	if os.Geteuid() == 0 {
		for _, name := range []string{"daemon", "nogroup", "users", "adm", "bin", "sys"} {
			if g, err := user.LookupGroup(name); err == nil {
				id, _ := strconv.Atoi(g.Gid)
				gids = append(gids, id)
			}
		}
	} else {
		gids, _ = os.Getgroups()
	}
	for _, id := range gids {
		if id == os.Getegid() {
			continue
		}
		if g, err := user.LookupGroupId(strconv.Itoa(id)); err == nil {
			return g.Name, id
		}
	}
	return "", -1
}

// Issue 26 item 11: control.group set control.sock's group only; worker.sock kept
// fulcrumd's. The worker socket now takes its configured group (worker.group, by
// default control.group's).
func TestWorkerSocketTakesConfiguredGroup(t *testing.T) {
	name, gid := otherGroup(t)
	if name == "" {
		t.Skip("no group other than this process's own to chown the socket to (run as root or with a supplementary group)")
	}
	s := startServer(t, Config{Group: name})
	fi, err := os.Stat(s.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	if got := int(fi.Sys().(*syscall.Stat_t).Gid); got != gid {
		t.Fatalf("worker.sock group %d, want %d (%s)", got, gid, name)
	}
	// A group that does not exist leaves the socket as it was rather than failing.
	s2 := startServer(t, Config{Group: "no-such-group-fulcrum-test"})
	if _, err := os.Stat(s2.SocketPath()); err != nil {
		t.Fatal(err)
	}
}

// Issue 26 item 6, over the socket: with two inference streams, the one asking for
// more than its share of the GPU has its excess refused with rate_limited, naming the
// requests (request_ids), to its own connection; the other stream is granted as usual
// and sees no error.
func TestStreamBeyondItsShareGetsRateLimited(t *testing.T) {
	s := startServerL(t, Config{Sched: sched.Config{DefaultTrain: time.Millisecond, DefaultInfer: 5 * time.Millisecond}}, 100*time.Millisecond)
	steady := dialRaw(t, s)
	steady.send(`{"type":"register","v":1,"role":"infer","workload":"steady","batch":8}`)
	steady.recv()
	flood := dialRaw(t, s)
	flood.send(`{"type":"register","v":1,"role":"infer","workload":"flood","batch":4096}`)
	flood.recv()
	var b strings.Builder
	b.WriteString(`{"type":"arrivals","requests":[`)
	for i := range 2000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"f%d"}`, i)
	}
	b.WriteString(`]}`)
	flood.send(b.String())
	flood.send(`{"type":"heartbeat","seq":7}`)
	m := flood.expectError(proto.CodeRateLimited)
	if len(m.RequestIDs) == 0 || len(m.RequestIDs) >= 2000 || m.Ref != proto.TypeArrivals {
		t.Fatalf("rate_limited naming %d of 2000 requests (ref %q); want the excess named, some admitted", len(m.RequestIDs), m.Ref)
	}
	t.Logf("flood: %d of 2000 refused: %s", len(m.RequestIDs), m.Message)
	if hb := flood.recv(); hb.Type != proto.TypeHeartbeat {
		t.Fatalf("after the refusal: %+v", hb)
	}
	steady.send(`{"type":"acquire","seq":1}`)
	steady.send(`{"type":"arrivals","requests":[{"id":"s1"}]}`)
	g := steady.recv()
	if g.Type != proto.TypeGrant || len(g.RequestIDs) != 1 || g.RequestIDs[0] != "s1" {
		t.Fatalf("the steady stream: %+v; want a grant for s1", g)
	}
	steady.send(fmt.Sprintf(`{"type":"release","grant":%d}`, g.Grant))
	steady.send(`{"type":"heartbeat","seq":2}`)
	if hb := steady.recv(); hb.Type != proto.TypeHeartbeat {
		t.Fatalf("the steady stream got %+v; want no error", hb)
	}
	snap := s.Snapshot()
	fl, _ := snap.Workload(proto.RoleInfer, "flood")
	st, _ := snap.Workload(proto.RoleInfer, "steady")
	if fl.Refused != uint64(len(m.RequestIDs)) || st.Refused != 0 {
		t.Fatalf("refused counts: flood %d (named %d), steady %d", fl.Refused, len(m.RequestIDs), st.Refused)
	}
}

// The sibling rule above compares when each connection of the process last spoke with
// when the expired turn began. That start once was taken as "now minus held" when the
// (deferred) callback ran, so a callback late by more than the gap between the grant and
// a sibling's next message dropped a live sibling: the Python client's
// test_turn_held_past_the_hold_limit failed so in CI under load. Here the callback comes
// 400 ms late on purpose: the sibling that spoke after the grant is kept, the one silent
// since before it is dropped.
func TestLateHoldExpiryKeepsASiblingThatSpokeDuringTheTurn(t *testing.T) {
	s := startServerL(t, Config{Sched: sched.Config{DefaultTrain: time.Millisecond,
		DefaultInfer: time.Millisecond, HoldMin: time.Minute}}, time.Second)
	reg := func(r *raw) string {
		r.send(`{"type":"register","v":1,"role":"train","workload":"resnet18","batch":8}`)
		m := r.recv()
		if m.Type != proto.TypeRegistered || m.WorkerID == "" {
			t.Fatalf("register: %+v", m)
		}
		return m.WorkerID
	}
	silent, hog, spoke := dialRaw(t, s), dialRaw(t, s), dialRaw(t, s)
	reg(silent)
	hogID := reg(hog)
	reg(spoke)
	hog.send(`{"type":"acquire","seq":1}`)
	g := hog.recv()
	if g.Type != proto.TypeGrant {
		t.Fatalf("hog: %+v", g)
	}
	began := time.Now()
	spoke.send(`{"type":"heartbeat","seq":2}`)
	if m := spoke.recv(); m.Type != proto.TypeHeartbeat {
		t.Fatalf("heartbeat: %+v", m)
	}
	time.Sleep(400 * time.Millisecond)
	s.holdExpired(hogID, g.Grant, began, 300*time.Millisecond, 300*time.Millisecond)
	hog.expectError(proto.CodeTurnExpired)
	silent.expectError(proto.CodeTurnExpired)
	spoke.send(`{"type":"heartbeat","seq":3}`)
	if m := spoke.recv(); m.Type != proto.TypeHeartbeat {
		t.Fatalf("the sibling that spoke during the turn got %+v; want it kept", m)
	}
}
