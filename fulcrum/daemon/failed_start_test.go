package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
)

// A start that fails on its board (an unknown simulated board here) leaves no socket
// behind: a control.sock left by a killed run is removed (fulcrumctl would otherwise
// find a "daemon" there), the worker socket is never opened (workers would register
// with a fulcrumd about to exit), and the error lists the known boards once.
func TestFailedStartLeavesNoSockets(t *testing.T) {
	dir := t.TempDir()
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	o := reliabilityDaemonOptions(dir)
	o.Board, o.Log = "sim:no-such-board", log
	if err := os.MkdirAll(o.BoardRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(o.Server.RuntimeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A control socket as a SIGKILLed fulcrumd leaves it: the file, nobody listening.
	ctlSock := filepath.Join(o.Server.RuntimeDir, api.SocketName)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: ctlSock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Lstat(ctlSock); err != nil {
		t.Fatalf("the stale socket is not there to start with: %v", err)
	}

	_, err = Open(context.Background(), o)
	if err == nil {
		t.Fatal("fulcrumd started on an unknown board")
	}
	if n := strings.Count(err.Error(), "agx-orin-64gb"); n != 1 {
		t.Errorf("the error names the known board agx-orin-64gb %d times, want once: %v", n, err)
	}
	if _, serr := os.Lstat(ctlSock); !os.IsNotExist(serr) {
		t.Errorf("stale %s still there after the failed start (%v)", ctlSock, serr)
	}
	if _, serr := os.Lstat(filepath.Join(o.Server.RuntimeDir, SocketName)); !os.IsNotExist(serr) {
		t.Errorf("worker socket left after the failed start (%v)", serr)
	}
	if strings.Contains(logBuf.String(), "worker socket listening") {
		t.Errorf("the worker socket was opened before the board was checked:\n%s", logBuf.String())
	}
	// The lock went with the failed start: a good start takes the directory.
	o.Board = "sim:agx-orin-64gb"
	if _, serr := os.Stat(filepath.Join(o.Server.RuntimeDir, PIDFileName)); !os.IsNotExist(serr) {
		t.Errorf("pid file left after the failed start (%v)", serr)
	}
}

// A daemon that holds the runtime directory keeps its control socket when a second
// start fails on the lock.
func TestSecondStartKeepsTheFirstsControlSocket(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	o, _, _ := openReliabilityBoard(t, dir, log)
	first, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer stopDaemon(first)
	if _, err := Open(context.Background(), o); err == nil {
		t.Fatal("a second fulcrumd started on one runtime directory")
	}
	// The socket still answers (the listener queues the connection until Serve).
	conn, err := net.Dial("unix", filepath.Join(o.Server.RuntimeDir, api.SocketName))
	if err != nil {
		t.Fatalf("the first fulcrumd's control socket after a failed second start: %v", err)
	}
	conn.Close()
}
