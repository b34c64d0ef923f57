package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
	bolt "go.etcd.io/bbolt"
)

// buildDamageableStore writes a store of about 4 MB at path, every page in use: the
// profiles of fill, plus 64 model blobs of 64 KB each (overflow pages), so damage
// anywhere in the file lands on data. It is closed on return.
func buildDamageableStore(t *testing.T, path string) {
	t.Helper()
	s, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s)
	for i := range 64 {
		blob, err := json.Marshal(map[string]string{"pad": strings.Repeat(fmt.Sprintf("%02d", i), 32<<10)})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.PutModel(fmt.Sprintf("model-%02d", i), blob); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// damage kinds, each applied to a closed store file on disk.
var damages = []struct {
	name string
	do   func(t *testing.T, path string)
}{
	{"truncated to half", func(t *testing.T, path string) {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, fi.Size()/2); err != nil {
			t.Fatal(err)
		}
	}},
	{"256 KB of random bytes mid-file", func(t *testing.T, path string) {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		junk := make([]byte, 256<<10)
		r := rand.New(rand.NewPCG(26, 1))
		for i := range junk {
			junk[i] = byte(r.Uint32())
		}
		writeAt(t, path, junk, fi.Size()/2)
	}},
	// bbolt opens from the other meta page, but its own check reports page 0: the
	// device wrote zeros where a page was, and the rest of the file is not trusted.
	{"meta page 0 zeroed", func(t *testing.T, path string) {
		writeAt(t, path, make([]byte, 4096), 0)
	}},
	{"both meta pages zeroed", func(t *testing.T, path string) {
		writeAt(t, path, make([]byte, 2*4096), 0)
	}},
}

func writeAt(t *testing.T, path string, b []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// A file damaged on disk is refused by a verifying Open with an error wrapping
// ErrDamaged that names the file; nothing panics, and the file is left as it was (the
// caller decides what to do with it).
func TestVerifyingOpenReportsDamage(t *testing.T) {
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "profiles.db")
			buildDamageableStore(t, path)
			d.do(t, path)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			s, err := store.Open(path, store.Options{Verify: true})
			if err == nil {
				s.Close()
				t.Fatal("a verifying Open accepted a damaged file")
			}
			if !errors.Is(err, store.ErrDamaged) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Open: %v; want an error wrapping ErrDamaged naming %s", err, path)
			}
			t.Logf("Open: %v", err)
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(before) != string(after) {
				t.Fatal("the verifying Open changed the damaged file")
			}
		})
	}
}

// Without Verify (fulcrumctl's opens), a damaged file still never panics: Open, or the
// first method that reaches a bad page, returns ErrDamaged, and every method after that
// returns it too without touching bbolt again.
func TestDamagedStoreReturnsErrorsNotPanics(t *testing.T) {
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "profiles.db")
			buildDamageableStore(t, path)
			d.do(t, path)
			s, err := store.Open(path, store.Options{})
			if err != nil {
				t.Logf("Open: %v", err)
				return // refused at open: also no panic
			}
			defer s.Close()
			var errs []error
			_, err = s.List(store.Filter{})
			errs = append(errs, err)
			for i := range 64 {
				_, err = s.GetModel(fmt.Sprintf("model-%02d", i))
				errs = append(errs, err)
			}
			errs = append(errs, s.Put(sample("agx-orin-64gb", "new", truth.Infer, maxn, 4, 99)))
			errs = append(errs, s.Check())
			failed := 0
			for _, e := range errs {
				if e != nil {
					failed++
				}
			}
			if failed == 0 {
				t.Fatal("every read and write of the damaged store succeeded; Check too")
			}
			if s.Damaged() != nil {
				if _, err := s.Count(); !errors.Is(err, store.ErrDamaged) {
					t.Fatalf("after a recovered panic, Count: %v; want ErrDamaged", err)
				}
			}
			t.Logf("%d of %d calls failed; damaged: %v", failed, len(errs), s.Damaged())
		})
	}
}

// A store damaged while open (another writer overwrote its middle) returns errors from
// its methods instead of panicking.
func TestStoreDamagedWhileOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "profiles.db")
	buildDamageableStore(t, path)
	s, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Fatalf("the undamaged store: %v", err)
	}
	damages[1].do(t, path) // the mapping is shared: the handle sees the new bytes
	_, lerr := s.List(store.Filter{})
	cerr := s.Check()
	merr := error(nil)
	for i := range 64 {
		if _, err := s.GetModel(fmt.Sprintf("model-%02d", i)); err != nil {
			merr = err
		}
	}
	if lerr == nil && cerr == nil && merr == nil {
		t.Fatal("List, Check and every GetModel succeeded on a store overwritten mid-file")
	}
	t.Logf("List: %v\nCheck: %.300v\nGetModel: %v", lerr, cerr, merr)
}

// A schema version that is not a number (a value overwritten inside a sound page: bbolt
// has no page checksums) is damage too, so fulcrumd moves the file aside rather than
// failing every start.
func TestGarbledSchemaVersionIsDamage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "profiles.db")
	buildDamageableStore(t, path)
	db, err := bolt.Open(path, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), []byte("\x00\x01"))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Open(path, store.Options{Verify: true}); !errors.Is(err, store.ErrDamaged) {
		t.Fatalf("Open: %v; want ErrDamaged", err)
	}
}
