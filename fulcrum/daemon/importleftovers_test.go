package daemon

import (
	"os"
	"path/filepath"
	"testing"
)

// Issue 26 item 8: the spool and undo log an import killed mid-way leaves beside the
// store are removed when fulcrumd starts; other files in the state directory stay.
func TestStartRemovesImportLeftovers(t *testing.T) {
	o := settingsDaemonOptions(t)
	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	left := []string{".profiles.db.import-123", ".profiles.db.import-undo-456", ".import-789"}
	for _, f := range append(left, "keep.txt") {
		if err := os.WriteFile(filepath.Join(o.StateDir, f), make([]byte, 4096), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, _, stop := runDaemon(t, o)
	defer stop()
	for _, f := range left {
		if _, err := os.Stat(filepath.Join(o.StateDir, f)); !os.IsNotExist(err) {
			t.Errorf("%s is still there after the start (%v)", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(o.StateDir, "keep.txt")); err != nil {
		t.Errorf("an unrelated file was removed: %v", err)
	}
}
