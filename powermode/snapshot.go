package powermode

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// SnapshotFile is the name of the saved board snapshot in the state directory.
const SnapshotFile = "fulcrum-board-snapshot.json"

// SaveSnapshot stores s in stateDir unless a snapshot is already there: the first
// snapshot wins until it is restored and removed, so a crash after a mode change can
// never replace the board's original state with a changed one. The write is atomic
// (temp file, fsync, link into place, fsync of the directory).
func SaveSnapshot(stateDir string, s *Snapshot) error {
	_, err := SaveSnapshotKeep(stateDir, s)
	return err
}

// SaveSnapshotKeep is SaveSnapshot that also says whether an existing snapshot was
// kept (and s not saved).
func SaveSnapshotKeep(stateDir string, s *Snapshot) (kept bool, err error) {
	if s == nil || s.Backend == "" || len(s.State) == 0 {
		return false, errors.New("save board snapshot: empty snapshot")
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return false, fmt.Errorf("save board snapshot: %w", err)
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return false, fmt.Errorf("save board snapshot: %w (is --state-dir writable?)", err)
	}
	final := filepath.Join(stateDir, SnapshotFile)
	if _, err := os.Lstat(final); err == nil {
		return true, nil
	}
	tmp, err := os.CreateTemp(stateDir, SnapshotFile+".tmp-*")
	if err != nil {
		return false, fmt.Errorf("save board snapshot: %w (is --state-dir writable?)", err)
	}
	defer os.Remove(tmp.Name()) // after the link, only the temp name goes
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return false, fmt.Errorf("save board snapshot: write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return false, fmt.Errorf("save board snapshot: fsync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return false, fmt.Errorf("save board snapshot: %w", err)
	}
	// link(2) fails with EEXIST instead of replacing, so two savers racing cannot
	// overwrite each other: exactly one snapshot, the first, ends up in place.
	if err := os.Link(tmp.Name(), final); err != nil {
		if errors.Is(err, os.ErrExist) {
			return true, nil
		}
		// A filesystem without hard links: rename, after checking again.
		if _, serr := os.Lstat(final); serr == nil {
			return true, nil
		}
		if rerr := os.Rename(tmp.Name(), final); rerr != nil {
			return false, fmt.Errorf("save board snapshot: %w", rerr)
		}
	}
	return false, syncDir(stateDir)
}

// LoadSnapshot reads the saved snapshot. When there is none the error wraps
// os.ErrNotExist.
func LoadSnapshot(stateDir string) (*Snapshot, error) {
	p := filepath.Join(stateDir, SnapshotFile)
	data, err := os.ReadFile(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no board snapshot at %s: %w", p, err)
		}
		return nil, fmt.Errorf("load board snapshot: %w", err)
	}
	var s Snapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("load board snapshot %s: %w (the file is damaged: restore the board by hand or reboot, then remove it)", p, err)
	}
	if s.Backend == "" || len(s.State) == 0 {
		return nil, fmt.Errorf("load board snapshot %s: no backend or state in it (the file is damaged)", p)
	}
	return &s, nil
}

// RemoveSnapshot deletes the saved snapshot (after a successful restore); removing
// one that is not there is not an error.
func RemoveSnapshot(stateDir string) error {
	err := os.Remove(filepath.Join(stateDir, SnapshotFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove board snapshot: %w", err)
	}
	if err == nil {
		return syncDir(stateDir)
	}
	return nil
}

// syncDir makes a rename/link/unlink in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
