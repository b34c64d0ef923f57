package powermode_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

func snap(board string, at time.Time) *powermode.Snapshot {
	return &powermode.Snapshot{Backend: "tegra", Board: board, TakenAt: at, State: json.RawMessage(`{"cpus":[]}`)}
}

func TestSnapshotPersistenceFirstWins(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state") // created on demand
	t0 := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)

	if _, err := powermode.LoadSnapshot(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load with none saved: err = %v, want os.ErrNotExist", err)
	}
	first := snap("agx-orin-64gb", t0)
	if kept, err := powermode.SaveSnapshotKeep(dir, first); err != nil || kept {
		t.Fatalf("first save: kept=%v err=%v", kept, err)
	}
	// A later snapshot (taken after a mode change) must not replace the original.
	if kept, err := powermode.SaveSnapshotKeep(dir, snap("agx-orin-64gb", t0.Add(time.Hour))); err != nil || !kept {
		t.Fatalf("second save: kept=%v err=%v, want the first kept", kept, err)
	}
	got, err := powermode.LoadSnapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !got.TakenAt.Equal(t0) || got.Board != first.Board || compact(t, got.State) != compact(t, first.State) {
		t.Errorf("loaded %+v, want the first snapshot", got)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != powermode.SnapshotFile {
		t.Errorf("state dir holds %v, want only %s (no temp files left)", entries, powermode.SnapshotFile)
	}
	// After restore the snapshot is removed; the next save is a new first.
	if err := powermode.RemoveSnapshot(dir); err != nil {
		t.Fatal(err)
	}
	if err := powermode.RemoveSnapshot(dir); err != nil {
		t.Errorf("removing again: %v, want nil", err)
	}
	if _, err := powermode.LoadSnapshot(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after remove: err = %v, want os.ErrNotExist", err)
	}
	if err := powermode.SaveSnapshot(dir, snap("agx-orin-64gb", t0.Add(2*time.Hour))); err != nil {
		t.Fatal(err)
	}
	if got, _ := powermode.LoadSnapshot(dir); got == nil || !got.TakenAt.Equal(t0.Add(2*time.Hour)) {
		t.Errorf("after remove, save: loaded %+v", got)
	}
}

func TestSnapshotConcurrentSaversOneWins(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	kept := make([]bool, 8)
	for i := range kept {
		wg.Go(func() {
			k, err := powermode.SaveSnapshotKeep(dir, snap("b", t0.Add(time.Duration(i)*time.Second)))
			if err != nil {
				t.Error(err)
			}
			kept[i] = k
		})
	}
	wg.Wait()
	saved := 0
	for _, k := range kept {
		if !k {
			saved++
		}
	}
	if saved != 1 {
		t.Errorf("%d savers report saving, want exactly 1", saved)
	}
}

func TestSnapshotLoadDamaged(t *testing.T) {
	for _, c := range []struct{ name, content, want string }{
		{"truncated", `{"backend":"tegra","board":`, "damaged"},
		{"empty state", `{"backend":"tegra","board":"x","taken_at":"2026-11-22T03:00:00Z"}`, "no backend or state"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, powermode.SnapshotFile), []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := powermode.LoadSnapshot(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
	if err := powermode.SaveSnapshot(t.TempDir(), &powermode.Snapshot{Backend: "tegra"}); err == nil {
		t.Error("saving a snapshot without state: want error")
	}
}

func compact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
