package storetest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
	bolt "go.etcd.io/bbolt"
)

// recorder is a testing.TB that records failures and runs its cleanups when asked, so
// that the check at the end of a test can be seen to fail.
type recorder struct {
	testing.TB // the real test: TempDir, Name, Log
	cleanups   []func()
	errs       []string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Cleanup(f func())          { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Errorf(f string, a ...any) { r.errs = append(r.errs, fmt.Sprintf(f, a...)) }
func (r *recorder) Fatalf(f string, a ...any) {
	r.Errorf(f, a...)
	r.TB.FailNow()
}
func (r *recorder) end() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

func put(t *testing.T, s *store.Store) {
	t.Helper()
	p := store.Profile{Board: "b", Workload: "w", Role: truth.Train, Mode: powermode.Mode{Cores: 4, CPUKHz: 1, GPUHz: 2, EMCHz: 3}, Batch: 8,
		TimeMS: store.TimeStats{Mean: 10, P50: 10, P95: 11}, PowerMW: store.PowerStats{Mean: 5000}, Samples: 10, PowerSamples: 10,
		StartedAt: time.Unix(1, 0).UTC(), FinishedAt: time.Unix(2, 0).UTC(), Source: store.SourceSim}
	if err := s.Put(p); err != nil {
		t.Fatal(err)
	}
}

func TestOpenChecksAtTheEnd(t *testing.T) {
	r := &recorder{TB: t}
	s := Open(r)
	put(t, s)
	r.end()
	if len(r.errs) != 0 {
		t.Fatalf("a sound store failed its check: %v", r.errs)
	}

	// A store the test closed itself and left with a damaged page fails the test.
	r = &recorder{TB: t}
	path := filepath.Join(t.TempDir(), "p.db")
	s = OpenAt(r, path, store.Options{})
	put(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	junk := make([]byte, 4096)
	for i := range junk {
		junk[i] = 0xA5
	}
	// Every page after the two meta pages: freelist, buckets, profiles.
	for off := int64(2 * 4096); off < fi.Size(); off += 4096 {
		if _, err := f.WriteAt(junk, off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	r.end()
	if len(r.errs) == 0 {
		t.Fatal("a store left damaged passed its check")
	}
	t.Logf("the check reported: %s", r.errs[0])

	// Sound pages but an inconsistent store (the profile count off by one, as a writer
	// that bypassed the store would leave it): bbolt opens it, the schema check fails.
	r = &recorder{TB: t}
	path = filepath.Join(t.TempDir(), "p.db")
	s = OpenAt(r, path, store.Options{})
	put(t, s)
	s.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("profile_count"), []byte("2")) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	r.end()
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "count") {
		t.Fatalf("a store with a wrong profile count: %v, want the check's complaint", r.errs)
	}
	t.Logf("the check reported: %s", r.errs[0])
}
