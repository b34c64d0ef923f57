package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
)

const envAccessRuntime = "FULCRUM_RELIABILITY_ACCESS_RUNTIME"

// TestReliabilityAccessCaller is not a test on its own: it is the outsider process of
// TestOutsiderCannotChangeDaemon. It tries each change through the control socket
// and a worker connection, printing one RESULT line per attempt.
func TestReliabilityAccessCaller(t *testing.T) {
	run := os.Getenv(envAccessRuntime)
	if run == "" {
		return
	}
	ctx := context.Background()
	c := client.New(filepath.Join(run, api.SocketName))
	defer c.Close()
	report := func(what string, err error) {
		var ae *api.Error
		switch {
		case err == nil:
			fmt.Printf("RESULT %s ok\n", what)
		case errors.As(err, &ae):
			fmt.Printf("RESULT %s %d %s\n", what, ae.Status, ae.Code)
		case errors.Is(err, syscall.EACCES) || strings.Contains(err.Error(), "permission denied") || strings.Contains(err.Error(), "no permission"):
			fmt.Printf("RESULT %s denied\n", what)
		default:
			fmt.Printf("RESULT %s error %v\n", what, err)
		}
	}
	v := 42.0
	_, err := c.SetBudgets(ctx, api.BudgetsUpdate{LatencyMS: &v})
	report("budgets", err)
	_, err = c.ApplyMode(ctx, powermode.Mode{Cores: 4, CPUKHz: 1113600, GPUHz: 408000000, EMCHz: 2133000000})
	report("mode", err)
	_, err = c.ImportProfiles(ctx, strings.NewReader(`{"profiles":[]}`), api.ImportOptions{})
	report("import", err)
	conn, err := net.DialTimeout("unix", filepath.Join(run, SocketName), 5*time.Second)
	if err == nil {
		conn.Close()
	}
	report("worker-socket", err)
}

// TestOutsiderCannotChangeDaemon: a whole fulcrumd (store, simulated board, controller,
// API) creates its sockets 0660 with the control socket in the configured group; a real
// process as uid 65534 (nobody) can reach neither. With both sockets opened to everyone
// (0666, a misconfiguration) the kernel lets it connect, but the daemon still refuses
// budgets, mode changes and profile imports (403), and nothing changes.
func TestOutsiderCannotChangeDaemon(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a child as uid 65534; CI runs as root (sudo go test -run TestOutsiderCannotChangeDaemon ./fulcrum/daemon/)")
	}
	grp, err := user.LookupGroupId("0")
	if err != nil {
		t.Fatal(err)
	}
	// Everything under a directory nobody may enter and run the test binary from.
	dir, err := os.MkdirTemp("", "fulcrum-access-")
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
	bin := filepath.Join(dir, "daemon.test")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := testboard.Spec(t, testboard.AGXOrin)
	log := slog.New(slog.DiscardHandler)
	testboard.Sim(t, filepath.Join(dir, "board"), spec, sim.Options{Logger: log})
	runDir := filepath.Join(dir, "run")
	ctx := context.Background()
	d, err := Open(ctx, Options{
		Server:   Config{RuntimeDir: runDir},
		StateDir: filepath.Join(dir, "state"), Board: "sim:agx-orin-64gb", BoardRoot: filepath.Join(dir, "board"), Log: log,
		Control: control.DefaultConfig(), Targets: plan.Targets{LatencyMS: 100},
		API: server.Config{Group: grp.Name},
	})
	if err != nil {
		t.Fatal(err)
	}
	dctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- d.Run(dctx) }()
	defer func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("daemon: %v", err)
		}
	}()
	if err := os.Chmod(runDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctlSock, wrkSock := filepath.Join(runDir, api.SocketName), filepath.Join(runDir, SocketName)
	for _, s := range []string{ctlSock, wrkSock} {
		fi, err := os.Stat(s)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o660 || fi.Mode()&os.ModeSocket == 0 {
			t.Errorf("%s: mode %v, want a socket 0660", s, fi.Mode())
		}
		if gid := fi.Sys().(*syscall.Stat_t).Gid; s == ctlSock && gid != 0 {
			t.Errorf("%s: group %d, want the configured group %s (0)", s, gid, grp.Name)
		}
	}
	cl := client.New(ctlSock)
	defer cl.Close()
	state := func() (api.Budgets, powermode.Mode, int) {
		t.Helper()
		st, err := cl.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Budgets, st.Mode, st.Profiles
	}
	b0, m0, p0 := state()

	outsider := func() map[string]string {
		t.Helper()
		cmd := exec.Command(bin, "-test.run=^TestReliabilityAccessCaller$", "-test.count=1")
		cmd.Env = append(os.Environ(), envAccessRuntime+"="+runDir)
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("outsider process: %v\n%s", err, out)
		}
		res := map[string]string{}
		for _, l := range strings.Split(string(out), "\n") {
			if r, ok := strings.CutPrefix(l, "RESULT "); ok {
				what, got, _ := strings.Cut(r, " ")
				res[what] = got
			}
		}
		return res
	}
	got := outsider()
	for _, what := range []string{"budgets", "mode", "import", "worker-socket"} {
		if got[what] != "denied" {
			t.Errorf("sockets 0660, outsider's %s: %q; want the kernel to refuse the connection", what, got[what])
		}
	}
	for _, s := range []string{ctlSock, wrkSock} {
		if err := os.Chmod(s, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	got = outsider()
	for _, what := range []string{"budgets", "mode", "import"} {
		if got[what] != "403 forbidden" {
			t.Errorf("control socket 0666, outsider's %s: %q; want 403 forbidden", what, got[what])
		}
	}
	if got["worker-socket"] != "ok" {
		t.Errorf("worker socket 0666: outsider could not connect (%q); the test is not reaching the daemon", got["worker-socket"])
	}
	if b1, m1, p1 := state(); !reflect.DeepEqual(b1, b0) || m1 != m0 || p1 != p0 {
		t.Fatalf("an outsider changed the daemon: budgets %+v -> %+v, mode %v -> %v, profiles %d -> %d", b0, b1, m0, m1, p0, p1)
	}
	// The same calls from root (this process) succeed, so the refusals above are the policy.
	v := 42.0
	if _, err := cl.SetBudgets(ctx, api.BudgetsUpdate{LatencyMS: &v}); err != nil {
		t.Fatalf("root's budget change: %v", err)
	}
}
