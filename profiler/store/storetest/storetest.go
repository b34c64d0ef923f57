// Package storetest opens real profile stores for tests, as bbolt's own btesting does
// for its databases: a bbolt file in the test's temporary directory, checked when the
// test ends (Store.Check: bbolt's page-level tx.Check, then the store's schema check),
// so a test that leaves its file damaged or inconsistent fails, naming what is wrong.
package storetest

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/internal/paths"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
)

// checkTimeout bounds the wait for the file's lock at the end of the test: whatever
// else had it open (a daemon under test) has been stopped by then.
const checkTimeout = 10 * time.Second

// Open opens a new, empty profile store (profiles.db in a new t.TempDir()). It fails
// the test if the store cannot be opened, and checks the file when the test ends.
func Open(t testing.TB) *store.Store {
	t.Helper()
	return OpenAt(t, filepath.Join(t.TempDir(), paths.StoreName), store.Options{})
}

// OpenAt is Open for a file at path (created if needed), for a test whose store must be
// where something else looks for it (a daemon's state directory, a --db flag). The
// test may close the store itself (to hand the file to a daemon, or to reopen it): the
// check at its end closes it again, harmlessly, and reopens the file to check it.
func OpenAt(t testing.TB, path string, opts store.Options) *store.Store {
	t.Helper()
	s, err := store.Open(path, opts)
	if err != nil {
		t.Fatalf("open profile store %s: %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close profile store %s: %v", path, err)
		}
		Check(t, path)
	})
	return s
}

// Check opens the store at path and runs its check, failing the test on any problem.
func Check(t testing.TB, path string) {
	t.Helper()
	s, err := store.Open(path, store.Options{MustExist: true, Timeout: checkTimeout})
	if err != nil {
		t.Errorf("profile store %s at the end of the test: %v", path, err)
		return
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Errorf("profile store %s at the end of the test: %v", path, err)
	}
}
