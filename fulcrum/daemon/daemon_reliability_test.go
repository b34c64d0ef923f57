package daemon

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/fulcrum-edge/fulcrum/profiler/store"
)

const envDaemonDir = "FULCRUM_RELIABILITY_DAEMON_DIR"

// TestReliabilityDaemonProcess is not a test on its own: it is the body of a fulcrumd
// process (the whole daemon: store, board, controller, API) started by
// TestDaemonSIGKILLDuringModeChanges, which SIGKILLs it.
func TestReliabilityDaemonProcess(t *testing.T) {
	dir := os.Getenv(envDaemonDir)
	if dir == "" {
		return
	}
	ctx := context.Background()
	d, err := Open(ctx, reliabilityDaemonOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	_ = d.Run(ctx) // until killed
}

// openReliabilityBoard builds a simulated AGX Orin under dir and opens it as fulcrumd
// with reliabilityDaemonOptions would: the options, the open board and the mode it runs.
func openReliabilityBoard(t *testing.T, dir string, log *slog.Logger) (Options, *Board, powermode.Mode) {
	t.Helper()
	testboard.Sim(t, filepath.Join(dir, "board"), testboard.Spec(t, testboard.AGXOrin), sim.Options{Logger: log})
	o := reliabilityDaemonOptions(dir)
	b, err := OpenBoard(context.Background(), o.Board, o.BoardRoot, o.StateDir, log)
	if err != nil {
		t.Fatal(err)
	}
	original, err := b.Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b.crash() // the board lock goes, as with a dead process: the daemon under test takes it
	return o, b, original
}

func reliabilityDaemonOptions(dir string) Options {
	return Options{
		Server:   Config{RuntimeDir: filepath.Join(dir, "run")},
		StateDir: filepath.Join(dir, "state"), Board: "sim:agx-orin-64gb", BoardRoot: filepath.Join(dir, "board"),
		Control: control.DefaultConfig(), Targets: plan.Targets{LatencyMS: 100},
		API: server.Config{Group: "-", AllowUIDs: []int{os.Getuid()}},
	}
}

// TestDaemonSIGKILLDuringModeChanges: a fulcrumd process is SIGKILLed while operator
// mode changes stream in, so it dies between (or during) writes to the board. The next
// start restores the board to the state it had before the first change, removes the
// snapshot, and the profile store passes its integrity check. One round also empties a
// control file, as a SIGKILL between the backend's truncate and write can in a fake
// tree: the restore writes the snapshot's values and does not need the damaged file.
func TestDaemonSIGKILLDuringModeChanges(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	o, _, original := openReliabilityBoard(t, dir, log)
	ctx := context.Background()
	modes := []powermode.Mode{
		{Cores: 4, CPUKHz: 1113600, GPUHz: 408000000, EMCHz: 2133000000},
		{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000},
	}
	damaged := filepath.Join(o.BoardRoot, "sys", "class", "devfreq", "17000000.gpu", "max_freq")
	for round := 0; round < 4; round++ {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestReliabilityDaemonProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), envDaemonDir+"="+dir)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cl := client.New(filepath.Join(o.Server.RuntimeDir, api.SocketName))
		ready := false
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end) && !ready; time.Sleep(20 * time.Millisecond) {
			_, err := cl.Status(ctx)
			ready = err == nil
		}
		if !ready {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("round %d: fulcrumd process never answered", round)
		}
		// Stream mode changes; kill after a few, with more in flight.
		applied := make(chan struct{}, 64)
		stop := make(chan struct{})
		go func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := cl.ApplyMode(ctx, modes[i%len(modes)]); err != nil {
					return // the daemon died under us
				}
				applied <- struct{}{}
			}
		}()
		for range 3 + round {
			select {
			case <-applied:
			case <-time.After(20 * time.Second):
				t.Fatalf("round %d: mode changes stalled", round)
			}
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		close(stop)
		cl.Close()
		if _, err := os.Stat(filepath.Join(o.StateDir, powermode.SnapshotFile)); err != nil {
			t.Fatalf("round %d: no snapshot after mode changes and a SIGKILL: %v", round, err)
		}
		if round == 2 {
			if err := os.WriteFile(damaged, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// The next start: what daemon.Open does first with the board and the store.
		b, err := OpenBoard(ctx, o.Board, o.BoardRoot, o.StateDir, log)
		if err != nil {
			t.Fatalf("round %d: the next start cannot open the board: %v", round, err)
		}
		if cur, err := b.Current(ctx); err != nil || cur != original {
			t.Fatalf("round %d: board at %v (%v) after the restart; want the original %v restored", round, cur, err, original)
		}
		if round == 2 {
			if v, err := os.ReadFile(damaged); err != nil || len(v) == 0 {
				t.Fatalf("round %d: the emptied %s was not rewritten by the restore (%q, %v)", round, damaged, v, err)
			}
		}
		if _, err := os.Stat(filepath.Join(o.StateDir, powermode.SnapshotFile)); !os.IsNotExist(err) {
			t.Fatalf("round %d: snapshot still there after the restore: %v", round, err)
		}
		b.crash()
		st, err := store.Open(filepath.Join(o.StateDir, "profiles.db"), store.Options{Timeout: time.Second})
		if err != nil {
			t.Fatalf("round %d: open the store after SIGKILL: %v", round, err)
		}
		if err := st.Check(); err != nil {
			t.Fatalf("round %d: store integrity after SIGKILL: %v", round, err)
		}
		st.Close()
	}
}
