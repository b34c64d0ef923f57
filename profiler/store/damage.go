package store

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// ErrDamaged is wrapped by every error that says the file itself is damaged: a page
// bbolt cannot read (truncated, overwritten, zeroed), a failed page-level check at open,
// or a panic inside bbolt on a bad page. Such a file is not usable as it is: fulcrumd
// moves it aside and starts on a fresh store (docs/profiler.md "A damaged store").
var ErrDamaged = errors.New("the profile store file is damaged")

// closeWait bounds Close on a store whose bbolt handle panicked: a panic inside bbolt
// can leave its internal locks held, and shutdown must not hang on them.
const closeWait = 2 * time.Second

// broken remembers the first panic a store's bbolt handle raised. After it, the handle's
// state is unknown (a lock may be held, the mapping may be stale), so every later call
// fails at once with the same error instead of touching it again.
type broken struct {
	mu  sync.Mutex
	err error
}

func (b *broken) get() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

func (b *broken) set(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.err = err
	}
}

// panicked is the error of a panic (or fault) recovered inside bbolt: ErrDamaged for
// path. Only these leave the handle in an unknown state (see broken).
type panicked struct {
	path string
	r    any
}

func (p *panicked) Error() string {
	return fmt.Sprintf("%v: %s: bbolt failed on a bad page: %v", ErrDamaged, p.path, p.r)
}

func (p *panicked) Unwrap() error { return ErrDamaged }

func isPanic(err error) bool {
	var p *panicked
	return errors.As(err, &p)
}

// guarded runs op, turning a panic inside bbolt, or a memory fault on the file's
// mapping (a page past the end of a truncated file raises SIGBUS), into an error
// wrapping ErrDamaged. bbolt's View and Update roll their transaction back on the way
// out of a panic, so the error is returned with no lock held by this goroutine.
func guarded(path string, op func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = &panicked{path: path, r: r}
		}
	}()
	return op()
}

// view and update are the only ways the store's methods reach bbolt: a store that
// panicked once refuses all further work with the first error.
func (s *Store) view(fn func(*bolt.Tx) error) error { return s.do(s.db.View, fn) }

func (s *Store) update(fn func(*bolt.Tx) error) error { return s.do(s.db.Update, fn) }

func (s *Store) do(run func(func(*bolt.Tx) error) error, fn func(*bolt.Tx) error) error {
	if err := s.broken.get(); err != nil {
		return err
	}
	err := guarded(s.path, func() error { return run(fn) })
	if isPanic(err) {
		s.broken.set(err)
	}
	return err
}

// Damaged is the error of the first panic this store's bbolt handle raised, or nil.
func (s *Store) Damaged() error { return s.broken.get() }

// closeDB closes db, giving up after closeWait when a recovered panic may have left
// bbolt's locks held (the file descriptor then goes with the process).
func closeDB(db *bolt.DB, wasBroken bool) error {
	if !wasBroken {
		return db.Close()
	}
	done := make(chan error, 1)
	go func() { done <- guarded(db.Path(), db.Close) }()
	select {
	case err := <-done:
		return err
	case <-time.After(closeWait):
		return errors.New("close: bbolt did not release the damaged file in time; its descriptor is left to the process's exit")
	}
}

// verify reads every page the file's newest transaction reaches and runs bbolt's own
// consistency check, on a read-only handle (a shared lock: nothing writes meanwhile).
// Every failure wraps ErrDamaged. A file that does not exist has nothing to verify.
func verify(path string, timeout time.Duration) error {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		return nil // Open reports these as it always has
	}
	var db *bolt.DB
	err = guarded(path, func() error {
		var err error
		db, err = bolt.Open(path, 0o644, &bolt.Options{Timeout: timeout, ReadOnly: true})
		return err
	})
	switch {
	case errors.Is(err, ErrDamaged):
		return err
	case errors.Is(err, bolterrors.ErrTimeout):
		return nil // locked by another process: Open says so
	case err != nil:
		return fmt.Errorf("%w: %s: bbolt cannot open it: %v", ErrDamaged, path, err)
	}
	var problems []string
	err = guarded(path, func() error {
		return db.View(func(tx *bolt.Tx) error {
			// Pages are read through the mapping; one past the end of a truncated file
			// faults. The newest transaction's high-water mark says how long the file
			// must be, so a cut file is caught before any page is touched.
			if err := (&Store{path: path}).readable(tx); err != nil {
				return fmt.Errorf("%w: %s: %v", ErrDamaged, path, err)
			}
			for err := range tx.Check() {
				problems = append(problems, err.Error())
				if len(problems) >= maxProblems {
					break
				}
			}
			return nil
		})
	})
	cerr := closeDB(db, isPanic(err))
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s: bbolt's check found %d problem(s): %s", ErrDamaged, path, len(problems), strings.Join(problems, "; "))
	}
	if cerr != nil {
		return fmt.Errorf("profile store %s: close after the check: %w", path, cerr)
	}
	return nil
}

// walkAll reads every key and value of every bucket, so every reachable page is
// dereferenced once in this goroutine (where guarded turns a fault into an error).
func walkAll(tx *bolt.Tx) error {
	var sum byte
	var visit func(b *bolt.Bucket, depth int) error
	visit = func(b *bolt.Bucket, depth int) error {
		if depth > 64 {
			return errors.New("buckets nested more than 64 deep")
		}
		return b.ForEach(func(k, v []byte) error {
			if v == nil {
				c := b.Bucket(k)
				if c == nil {
					return fmt.Errorf("key %x has no value and no bucket", k)
				}
				return visit(c, depth+1)
			}
			for _, x := range v {
				sum ^= x
			}
			return nil
		})
	}
	err := tx.ForEach(func(name []byte, b *bolt.Bucket) error { return visit(b, 1) })
	_ = sum
	return err
}
