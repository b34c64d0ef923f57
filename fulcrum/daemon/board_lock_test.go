package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// crash lets go of the board lock as a dead process does: no restore, the snapshot
// stays. Tests that simulate a crash with an unclosed Board call it before the next
// start takes the board.
func (b *Board) crash() { b.lock.Close() }

// stopDaemon stops an opened daemon as a clean shutdown does (Run on an ended context).
func stopDaemon(d *Daemon) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = d.Run(ctx)
}

// treeFiles reads every regular file under root (the board's whole state as files).
func treeFiles(t *testing.T, root string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func diffTrees(a, b map[string][]byte) []string {
	var d []string
	for p, v := range a {
		if w, ok := b[p]; !ok || !bytes.Equal(v, w) {
			d = append(d, p)
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			d = append(d, p)
		}
	}
	return d
}

// One fulcrumd per board: a second daemon on the same simulated board, with its own
// runtime directory and either the first one's state directory or its own, fails at
// once naming the first one's pid, and touches neither the board nor the first one's
// snapshot. After the first stops, the board is back to its original state.
func TestSecondDaemonOnOneBoardFails(t *testing.T) {
	for _, sameState := range []bool{true, false} {
		t.Run(fmt.Sprintf("same state dir %v", sameState), func(t *testing.T) {
			dir := t.TempDir()
			log := slog.New(slog.DiscardHandler)
			o, b, original := openReliabilityBoard(t, dir, log)
			ctx := context.Background()
			first, err := Open(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			stopped := false
			defer func() {
				if !stopped {
					stopDaemon(first)
				}
			}()
			changed := powermode.Mode{Cores: 4, CPUKHz: 1113600, GPUHz: 408000000, EMCHz: 2133000000}
			if changed == original {
				t.Fatal("pick another mode")
			}
			if err := first.Board.Apply(ctx, changed); err != nil {
				t.Fatal(err)
			}
			snapPath := filepath.Join(o.StateDir, powermode.SnapshotFile)
			snap, err := os.ReadFile(snapPath)
			if err != nil {
				t.Fatalf("the first daemon saved no snapshot: %v", err)
			}
			board := treeFiles(t, o.BoardRoot)

			o2 := o
			o2.Server.RuntimeDir = filepath.Join(dir, "run2")
			if !sameState {
				o2.StateDir = filepath.Join(dir, "state2")
			}
			second, err := Open(ctx, o2)
			if err == nil {
				stopDaemon(second)
				t.Fatal("a second daemon opened the board the first one drives")
			}
			if !errors.Is(err, powermode.ErrBoardLocked) || !strings.Contains(err.Error(), fmt.Sprintf("(pid %d)", os.Getpid())) {
				t.Fatalf("second Open: %v; want ErrBoardLocked naming pid %d", err, os.Getpid())
			}
			t.Logf("second Open: %v", err)
			if d := diffTrees(board, treeFiles(t, o.BoardRoot)); len(d) > 0 {
				t.Fatalf("the failed second daemon changed the board: %v", d)
			}
			if cur, err := b.Current(ctx); err != nil || cur != changed {
				t.Fatalf("board at %v (%v); want the first daemon's %v kept", cur, err, changed)
			}
			if got, err := os.ReadFile(snapPath); err != nil || !bytes.Equal(got, snap) {
				t.Fatalf("the first daemon's snapshot after the second start: %v (changed: %v)", err, !bytes.Equal(got, snap))
			}
			if _, err := os.Stat(filepath.Join(o2.Server.RuntimeDir, PIDFileName)); !os.IsNotExist(err) {
				t.Fatalf("the failed second daemon left its pid file: %v", err)
			}

			stopped = true
			stopDaemon(first)
			if cur, err := b.Current(ctx); err != nil || cur != original {
				t.Fatalf("board at %v (%v) after the first daemon stopped; want the original %v", cur, err, original)
			}
			if _, err := os.Stat(snapPath); !os.IsNotExist(err) {
				t.Fatalf("snapshot left after a clean stop: %v", err)
			}
			// The board is free again: the second one starts now.
			second, err = Open(ctx, o2)
			if err != nil {
				t.Fatalf("the second daemon after the first stopped: %v", err)
			}
			stopDaemon(second)
		})
	}
}
