package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/apitest"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
)

const (
	peerSockEnv = "FULCRUM_API_TEST_PEER"
	peerModeEnv = "FULCRUM_API_TEST_PEER_MODE"
)

// TestHelperPeer is the child process of the tests below. Mode "status" asks
// GET /v1/status once and prints the status code. Mode "hold" connects, asks
// GET /v1/status, prints "READY <pid>", waits for a line on stdin, then sends
// PUT /v1/budgets on the same connection and prints its status code. Run directly (no
// environment), it has nothing to do.
func TestHelperPeer(t *testing.T) {
	sock := os.Getenv(peerSockEnv)
	if sock == "" {
		return
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		fmt.Printf("RESULT dial %v\n", err)
		return
	}
	defer c.Close()
	br := bufio.NewReader(c)
	code, _, err := roundTrip(c, br, "GET", "/v1/status", "")
	if err != nil {
		fmt.Printf("RESULT %v\n", err)
		return
	}
	if os.Getenv(peerModeEnv) != "hold" {
		fmt.Printf("RESULT %d\n", code)
		return
	}
	fmt.Printf("READY %d\n", os.Getpid())
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Printf("RESULT stdin %v\n", err)
		return
	}
	code, _, err = roundTrip(c, br, "PUT", "/v1/budgets", `{"latency_ms": 42}`)
	if err != nil {
		fmt.Printf("RESULT %v\n", err)
		return
	}
	fmt.Printf("RESULT %d\n", code)
}

// roundTrip sends one request on c and reads its answer.
func roundTrip(c net.Conn, br *bufio.Reader, method, path, body string) (int, string, error) {
	req, err := http.NewRequest(method, "http://fulcrum"+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if err := req.Write(c); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// peerBinary copies this test binary where another uid can run it and returns its path
// and the directory (0755) to put sockets in.
func peerBinary(t *testing.T) (bin, dir string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "fulcrum-api-peer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, "api.test")
	copyFile(t, self, bin)
	return bin, dir
}

func peerCmd(bin, sock, mode string, cred *syscall.Credential) *exec.Cmd {
	cmd := exec.Command(bin, "-test.run=^TestHelperPeer$", "-test.count=1")
	cmd.Env = append(os.Environ(), peerSockEnv+"="+sock, peerModeEnv+"="+mode)
	cmd.Dir = filepath.Dir(bin)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	return cmd
}

// peerStatus runs a child that asks GET /v1/status and returns what it printed.
func peerStatus(t *testing.T, bin, sock string, cred *syscall.Credential) string {
	t.Helper()
	out, err := peerCmd(bin, sock, "status", cred).CombinedOutput()
	if err != nil {
		t.Fatalf("peer: %v\n%s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if r, ok := strings.CutPrefix(l, "RESULT "); ok {
			return r
		}
	}
	t.Fatalf("peer printed no result:\n%s", out)
	return ""
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to run children as other uids and groups; CI runs as root")
	}
}

// serveAt serves fake on sock with cfg until the test ends.
func serveAt(t *testing.T, sock string, cfg server.Config, fake server.Controller) {
	t.Helper()
	cfg.SocketPath = sock
	srv := server.New(cfg, fake)
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
}

// dialStatus opens a connection and asks GET /v1/status on it; the connection stays open.
func dialStatus(t *testing.T, sock string) (net.Conn, int, string) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	code, body, err := roundTrip(c, bufio.NewReader(c), "GET", "/v1/status", "")
	if err != nil {
		t.Fatalf("GET /v1/status: %v", err)
	}
	return c, code, body
}

// TestConnectionLimits: one process gets MaxConnsPerPID connections and the next is
// answered 503 naming the limit, while another process still gets in; when the
// connections fill MaxConns but the reserve, a caller who may not change things is
// refused and root (the operator) still gets in.
func TestConnectionLimits(t *testing.T) {
	needRoot(t)
	bin, dir := peerBinary(t)
	t.Run("per process", func(t *testing.T) {
		sock := filepath.Join(dir, "pid.sock")
		serveAt(t, sock, server.Config{Limits: server.Limits{MaxConnsPerPID: 3, MaxConns: 20}}, apitest.NewOrin(t, 0))
		var held []net.Conn
		for i := range 3 {
			c, code, body := dialStatus(t, sock)
			if code != http.StatusOK {
				t.Fatalf("connection %d: %d %s", i+1, code, body)
			}
			held = append(held, c)
		}
		_, code, body := dialStatus(t, sock)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "limit per process") {
			t.Fatalf("a 4th connection of one process: %d %s, want 503 naming the per-process limit", code, body)
		}
		if got := peerStatus(t, bin, sock, nil); got != "200" {
			t.Fatalf("another process while the first holds its limit: %s, want 200", got)
		}
		// A connection closed frees its place.
		held[0].Close()
		waitUntil(t, "a place freed by a closed connection", func() bool {
			_, code, _ := dialStatus(t, sock)
			return code == http.StatusOK
		})
	})
	t.Run("reserve", func(t *testing.T) {
		sock := filepath.Join(dir, "total.sock")
		serveAt(t, sock, server.Config{SocketMode: 0o666, Limits: server.Limits{MaxConns: 4, ReservedConns: 1, MaxConnsPerPID: 10, MaxConnsPerUID: 10}}, apitest.NewOrin(t, 0))
		for i := range 3 {
			if _, code, body := dialStatus(t, sock); code != http.StatusOK {
				t.Fatalf("connection %d: %d %s", i+1, code, body)
			}
		}
		nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
		if got := peerStatus(t, bin, sock, nobody); !strings.HasPrefix(got, "503") {
			t.Fatalf("nobody when only the reserve is left: %s, want 503", got)
		}
		if got := peerStatus(t, bin, sock, nil); got != "200" {
			t.Fatalf("root when only the reserve is left: %s, want 200", got)
		}
	})
}

// TestFollowStreamLimit: event streams beyond MaxFollowStreams are refused with a 503
// that says to close one or poll; polling still works; a closed stream frees its place.
func TestFollowStreamLimit(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	sock := apitest.Serve(t, server.Config{Limits: server.Limits{MaxFollowStreams: 2, MaxFollowPerUID: 2}}, fake)
	follow := func() (*http.Response, func()) {
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://fulcrum/v1/events?follow=1", nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp, func() { cancel(); resp.Body.Close(); hc.CloseIdleConnections() }
	}
	var stop []func()
	for i := range 2 {
		resp, cancel := follow()
		stop = append(stop, cancel)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %d", i+1, resp.StatusCode)
		}
	}
	defer func() {
		for _, f := range stop {
			f()
		}
	}()
	resp, cancel := follow()
	if resp.StatusCode == http.StatusOK {
		cancel()
		t.Fatal("a 3rd stream was opened, want 503")
	}
	b, _ := io.ReadAll(resp.Body)
	cancel()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "event streams open") {
		t.Fatalf("a 3rd stream: %d %s, want 503", resp.StatusCode, b)
	}
	if code, b := rawDo(t, sock, "GET", "/v1/events", ""); code != http.StatusOK {
		t.Fatalf("polling while the streams are full: %d %s", code, b)
	}
	stop[0]()
	waitUntil(t, "a stream place freed", func() bool {
		resp, cancel := follow()
		defer cancel()
		return resp.StatusCode == http.StatusOK
	})
}

// TestSlowClientsAreClosed: a request whose body never comes, headers that never end
// and an idle kept-alive connection are closed by the server; a follow stream outlives
// the body timeout; a normal client is served meanwhile.
func TestSlowClientsAreClosed(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	lim := server.Limits{ReadHeaderTimeout: 200 * time.Millisecond, BodyTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}
	sock := apitest.Serve(t, server.Config{Policy: server.PolicyFunc(func(api.Caller) error { return nil }), Limits: lim}, fake)
	// closed reads from c until the server closes it (or 30 s pass: then it is open).
	closed := func(c net.Conn) (string, bool) {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		b, err := io.ReadAll(c)
		var ne net.Error
		return string(b), !(errors.As(err, &ne) && ne.Timeout())
	}
	dial := func(first string) net.Conn {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, first); err != nil {
			t.Fatal(err)
		}
		return c
	}
	start := time.Now()
	body := dial("PUT /v1/budgets HTTP/1.1\r\nHost: fulcrum\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n{")
	header := dial("GET /v1/status HTTP/1.1\r\nHost: fulcrum\r\nX-Slow:")
	idle := dial("")
	if code, _, err := roundTrip(idle, bufio.NewReader(idle), "GET", "/v1/status", ""); err != nil || code != http.StatusOK {
		t.Fatalf("first request on the idle connection: %d %v", code, err)
	}
	if code, b := rawDo(t, sock, "GET", "/v1/status", ""); code != http.StatusOK {
		t.Fatalf("a normal client while slow ones hold connections: %d %s", code, b)
	}
	if got, ok := closed(body); !ok {
		t.Error("a body announced and never sent kept its connection open")
	} else if !strings.Contains(got, "408") {
		t.Errorf("slow body answered %q, want a 408", got)
	}
	if _, ok := closed(header); !ok {
		t.Error("headers never finished kept their connection open")
	}
	if _, ok := closed(idle); !ok {
		t.Error("an idle kept-alive connection stayed open")
	}
	t.Logf("slow connections closed after %s", time.Since(start).Round(time.Millisecond))
	if b, _ := fake.Budgets(context.Background()); b.LatencyMS != 100 {
		t.Errorf("the slow body changed the budget to %v", b.LatencyMS)
	}

	// An event stream sends no body: the body timeout must not end it.
	c := dial("GET /v1/events?follow=1 HTTP/1.1\r\nHost: fulcrum\r\n\r\n")
	time.Sleep(3 * lim.BodyTimeout)
	fake.Publish(api.EventPlan, "after the body timeout", nil, nil)
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the event stream ended: %v", err)
		}
		if strings.Contains(l, "after the body timeout") {
			break
		}
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestCredentialsTakenAtAccept: the groups that decide a change are the ones the
// kernel recorded when the caller connected (SO_PEERGROUPS), not what /proc/<pid> says
// at call time: a pid reused by a process of the fulcrum group lends nothing, and a
// member of the group is allowed whatever /proc says later.
func TestCredentialsTakenAtAccept(t *testing.T) {
	needRoot(t)
	bin, dir := peerBinary(t)
	const fulcrumGID = 4242
	for _, tc := range []struct {
		name     string
		groups   []uint32 // the child's real supplementary groups
		procSays string   // what <procRoot>/<pid>/status says after it connected
		want     string
	}{
		{"reused pid lends no groups", nil, fmt.Sprintf("Groups:\t%d\n", fulcrumGID), "403"},
		{"member stays a member", []uint32{fulcrumGID}, "Groups:\t\n", "200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			procRoot := t.TempDir()
			fake := apitest.NewOrin(t, 0)
			sock := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".sock")
			serveAt(t, sock, server.Config{SocketMode: 0o666, ProcRoot: procRoot,
				Policy: server.GroupPolicy{GID: fulcrumGID, GroupName: "fulcrum"}}, fake)
			cmd := peerCmd(bin, sock, "hold", &syscall.Credential{Uid: 65534, Gid: 65534, Groups: tc.groups})
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			defer stdin.Close()
			sc := bufio.NewScanner(stdout)
			var pid int
			for sc.Scan() {
				if _, err := fmt.Sscanf(sc.Text(), "READY %d", &pid); err == nil {
					break
				}
				if strings.HasPrefix(sc.Text(), "RESULT ") {
					t.Fatalf("child: %s", sc.Text())
				}
			}
			if pid == 0 {
				t.Fatal("child never connected")
			}
			// After accept, /proc says something else about the pid (as when it is reused).
			pdir := filepath.Join(procRoot, fmt.Sprint(pid))
			if err := os.MkdirAll(pdir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(pdir, "status"), []byte("Name:\tother\n"+tc.procSays), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := io.WriteString(stdin, "go\n"); err != nil {
				t.Fatal(err)
			}
			var got string
			for sc.Scan() {
				if r, ok := strings.CutPrefix(sc.Text(), "RESULT "); ok {
					got = r
					break
				}
			}
			if got != tc.want {
				t.Fatalf("PUT /v1/budgets: %q, want %s", got, tc.want)
			}
			changed := tc.want == "200"
			if b, _ := fake.Budgets(context.Background()); (b.LatencyMS == 42) != changed {
				t.Fatalf("latency budget %v after a %s", b.LatencyMS, got)
			}
		})
	}
}

// An import with a huge field is a 400 whose answer is a few hundred bytes: no reply
// echoes the input (a 20 MB workload name once came back whole); nothing is stored.
func TestImportErrorDoesNotEchoInput(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	sock := apitest.Serve(t, server.Config{Policy: server.PolicyFunc(func(api.Caller) error { return nil })}, fake)
	name := strings.Repeat("x", 8<<20)
	for _, body := range []string{
		`{"schema_version": 1, "profiles": [{"board": "agx-orin-64gb", "workload": "` + name + `"}]}`,
		`{"schema_version": 1, "profiles": [{"board": "agx-orin-64gb", "` + strings.Repeat("k", 60000) + `": 1}]}`,
	} {
		code, b := rawDo(t, sock, "POST", "/v1/profiles/import?format=json", body)
		if code != http.StatusBadRequest || len(b) > 2048 {
			t.Errorf("import of a %d-byte body: %d, answer of %d bytes: %.300s", len(body), code, len(b), b)
		}
	}
	if n, _ := fake.Store.Count(); n != 0 {
		t.Errorf("%d profiles stored", n)
	}
}
