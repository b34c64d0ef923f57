package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// A run that changed the mode and crashed leaves a snapshot; the next start restores it
// even when the profile store cannot be opened (here: its path is a directory, which
// fails for root too), because the board is restored before the store opens.
func TestBoardRestoredWhenStoreCannotOpen(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	o, b, original := openReliabilityBoard(t, dir, log)
	ctx := context.Background()
	changed := powermode.Mode{Cores: 4, CPUKHz: 1113600, GPUHz: 408000000, EMCHz: 2133000000}
	if changed == original {
		t.Fatal("pick another mode")
	}
	if err := b.Apply(ctx, changed); err != nil { // then "crash": no Close
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(o.StateDir, "profiles.db"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Open(ctx, o)
	if err == nil || !strings.Contains(err.Error(), "profile store") {
		t.Fatalf("Open with a directory as the store: %v, want a profile store error", err)
	}
	if cur, err := b.Current(ctx); err != nil || cur != original {
		t.Fatalf("board at %v (%v) after a start whose store failed; want the original %v restored", cur, err, original)
	}
	if _, err := os.Stat(filepath.Join(o.StateDir, powermode.SnapshotFile)); !os.IsNotExist(err) {
		t.Fatalf("snapshot still there after the restore: %v", err)
	}
	// The failed start released its locks: a fixed store starts cleanly.
	if err := os.Remove(filepath.Join(o.StateDir, "profiles.db")); err != nil {
		t.Fatal(err)
	}
	d, err := Open(ctx, o)
	if err != nil {
		t.Fatalf("start after fixing the store: %v", err)
	}
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	_ = d.Run(stopped) // closes everything it opened
}
