package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/apitest"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
)

const helperEnv = "FULCRUM_API_TEST_SOCKET"

// TestHelperCaller is the child process of TestSecondUID: it sets the latency budget
// through the socket named in the environment and prints the outcome. Run directly (no
// environment), it has nothing to do.
func TestHelperCaller(t *testing.T) {
	sock := os.Getenv(helperEnv)
	if sock == "" {
		return
	}
	c := client.New(sock)
	v := 42.0
	_, err := c.SetBudgets(context.Background(), api.BudgetsUpdate{LatencyMS: &v})
	var ae *api.Error
	switch {
	case err == nil:
		fmt.Println("RESULT ok")
	case errors.As(err, &ae):
		fmt.Printf("RESULT %d %s\n", ae.Status, ae.Code)
	default:
		fmt.Printf("RESULT error %v\n", err)
	}
}

// TestSecondUID calls the socket from a real process running as nobody (65534): with
// the socket open to everyone (0666) the default policy refuses it (403); with the
// socket at 0660 the kernel already refuses the connection. The same call from a root
// process succeeds. It needs root to change uid (CI runs as root).
func TestSecondUID(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a child as another uid; CI runs as root (run: sudo go test -run TestSecondUID ./fulcrum/api/)")
	}
	// A directory nobody can enter, holding a copy of this test binary nobody can run.
	dir, err := os.MkdirTemp("", "fulcrum-api-uid-")
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
	bin := filepath.Join(dir, "api.test")
	copyFile(t, self, bin)

	run := func(sock string, asNobody bool) string {
		t.Helper()
		cmd := exec.Command(bin, "-test.run=^TestHelperCaller$", "-test.count=1")
		cmd.Env = append(os.Environ(), helperEnv+"="+sock)
		cmd.Dir = dir
		if asNobody {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper (nobody=%v): %v\n%s", asNobody, err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if r, ok := strings.CutPrefix(l, "RESULT "); ok {
				return r
			}
		}
		t.Fatalf("helper printed no result:\n%s", out)
		return ""
	}

	for _, tc := range []struct {
		mode       os.FileMode
		wantNobody string
	}{
		{0o666, "403 forbidden"},
		{0o660, "error no permission"},
	} {
		fake := apitest.NewOrin(t, 0)
		sock := filepath.Join(dir, fmt.Sprintf("control-%o.sock", tc.mode))
		srv := server.New(server.Config{SocketPath: sock, SocketMode: tc.mode}, fake)
		if err := srv.Listen(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx) }()

		if got := run(sock, true); !strings.HasPrefix(got, tc.wantNobody) {
			t.Errorf("socket %o, as nobody: %q, want %q", tc.mode, got, tc.wantNobody)
		}
		if b, _ := fake.Budgets(ctx); b.LatencyMS != 100 {
			t.Errorf("socket %o: nobody changed the budget to %v", tc.mode, b.LatencyMS)
		}
		if got := run(sock, false); got != "ok" {
			t.Errorf("socket %o, as root: %q, want ok", tc.mode, got)
		}
		if b, _ := fake.Budgets(ctx); b.LatencyMS != 42 {
			t.Errorf("socket %o: root's change not applied: %v", tc.mode, b.LatencyMS)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
