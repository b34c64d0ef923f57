// Package store keeps profiles in a bbolt file, with the buckets later users need
// (searchers' learned models, campaign progress) and a versioned schema.
//
// Layout (schema version 1; docs/profiler.md has the reasoning):
//
//	meta/schema_version            decimal ASCII, e.g. "1"
//	meta/profile_count             decimal ASCII, number of stored profiles (checked by Check)
//	profiles/<board>/<workload>/<role>/<mode>/<batch>  JSON Profile
//	    <mode> is powermode.Mode.String() ("cores/cpu_khz/gpu_hz/emc_hz"),
//	    <batch> is the batch size as 8 bytes big-endian (so keys sort numerically); a
//	    training micro-batch turn (issue 32) is 16 bytes: the minibatch, then the
//	    micro-batch size, both big-endian (so a minibatch's micro-batches sort after it,
//	    and a store without micro-batch profiles is exactly as before)
//	models/<key>                   opaque JSON (searchers' learned models)
//	campaigns/<id>                 JSON campaign progress record
//
// Store methods take no context: each is one short local bbolt transaction that cannot be
// interrupted midway; the exclusive file lock is what can block, and Open bounds it.
package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// SchemaVersion is the layout version this code writes and reads.
const SchemaVersion = 1

// DefaultTimeout is how long Open waits for another process to release the file.
const DefaultTimeout = time.Second

// Bucket and key names.
var (
	bucketMeta      = []byte("meta")
	bucketProfiles  = []byte("profiles")
	bucketModels    = []byte("models")
	bucketCampaigns = []byte("campaigns")
	keyVersion      = []byte("schema_version")
	keyCount        = []byte("profile_count")
)

// ErrExists is returned by Put for a key that already holds a profile.
var ErrExists = errors.New("a profile is already stored for this key")

// ErrNotFound is returned by Get, GetModel, GetCampaign and Delete for a missing key.
var ErrNotFound = errors.New("not found")

// Options tune Open.
type Options struct {
	// Timeout bounds the wait for another process's lock; 0 means DefaultTimeout.
	Timeout time.Duration
	// ReadOnly opens with a shared lock (several readers at once) and refuses writes.
	// The file must exist and be at the current schema version.
	ReadOnly bool
	// MustExist refuses to create the file (a writable open that may migrate an older
	// schema, e.g. fulcrumctl profile check). ReadOnly implies it.
	MustExist bool
	// Verify reads every page of an existing file and runs bbolt's check and the schema
	// check before the store is used (fulcrumd does): a damaged file is refused with an
	// error wrapping ErrDamaged rather than found later by a panic on a bad page. It
	// costs a full read of the file.
	Verify bool
}

// Store is an open profile database. It is safe for concurrent use by goroutines; bbolt
// serialises writers.
type Store struct {
	db     *bolt.DB
	path   string
	broken broken // the first panic bbolt raised on this handle
	// importFault, when set (tests only), is called in each import write chunk's
	// transaction with the chunk's index; an error fails that chunk.
	importFault func(chunk int) error
}

// migration upgrades the layout from version `from` to from+1, inside the single
// transaction Open runs all pending migrations in.
type migration struct {
	from  int
	name  string
	apply func(tx *bolt.Tx) error
}

// schema is a version and the migrations that reach it; tests build others.
type schema struct {
	version    int
	migrations []migration
}

// migrations lists every upgrade, oldest first; migrations[i].from == i. Version 0 is a
// new, empty file. To change the layout: bump SchemaVersion and append a migration.
var currentSchema = schema{
	version: SchemaVersion,
	migrations: []migration{
		{from: 0, name: "create buckets", apply: func(tx *bolt.Tx) error {
			for _, b := range [][]byte{bucketMeta, bucketProfiles, bucketModels, bucketCampaigns} {
				if _, err := tx.CreateBucketIfNotExists(b); err != nil {
					return err
				}
			}
			return tx.Bucket(bucketMeta).Put(keyCount, []byte("0"))
		}},
	},
}

// Open opens (creating if needed, unless ReadOnly) the store at path, migrating an older
// layout in one transaction. A newer layout is refused.
func Open(path string, opts Options) (*Store, error) {
	return openSchema(path, opts, currentSchema)
}

func openSchema(path string, opts Options, sc schema) (*Store, error) {
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	fi, statErr := os.Stat(path)
	switch {
	case (opts.ReadOnly || opts.MustExist) && errors.Is(statErr, fs.ErrNotExist):
		return nil, fmt.Errorf("profile store %s does not exist: profile something first (fulcrumctl profile run) or pass --db", path)
	case statErr == nil && fi.Mode().IsRegular() && fi.Size() == 0:
		// bbolt would write a new database into it (or fail with "bad file descriptor"
		// when read-only): an empty file is more likely a mistake than a store.
		return nil, fmt.Errorf("profile store %s is an empty file, not a profile store: pass the store's path with --db, or remove the file to create a new store there", path)
	}
	if !opts.ReadOnly {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("profile store %s: create its directory: %w (pass --db to put it elsewhere)", path, err)
		}
	}
	if opts.Verify {
		if err := verify(path, opts.Timeout); err != nil {
			return nil, err
		}
	}
	var db *bolt.DB
	err := guarded(path, func() error {
		var err error
		db, err = bolt.Open(path, 0o644, &bolt.Options{Timeout: opts.Timeout, ReadOnly: opts.ReadOnly})
		return err
	})
	if errors.Is(err, ErrDamaged) {
		// A panic inside bolt.Open (e.g. "invalid freelist page" on a truncated file)
		// leaves its half-open handle unreachable; the process keeps one descriptor on
		// the damaged file until it exits.
		return nil, err
	}
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("profile store %s is locked by another process (is fulcrumd or another fulcrumctl running?): waited %s: %w", path, opts.Timeout, err)
	}
	if errors.Is(err, bolterrors.ErrInvalid) || errors.Is(err, bolterrors.ErrVersionMismatch) || errors.Is(err, bolterrors.ErrChecksum) {
		if opts.Verify {
			return nil, fmt.Errorf("%w: %s: bbolt cannot read its meta pages: %v", ErrDamaged, path, err)
		}
		return nil, fmt.Errorf("open profile store %s: %w: the file is not a profile store (pass the store's path with --db)", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open profile store %s: %w", path, err)
	}
	s := &Store{db: db, path: path}
	if err := s.migrate(sc, opts.ReadOnly); err != nil {
		_ = closeDB(db, s.broken.get() != nil)
		return nil, err
	}
	if opts.Verify {
		if err := s.checkContent(); err != nil {
			_ = closeDB(db, s.broken.get() != nil)
			return nil, err
		}
	}
	return s, nil
}

// migrate brings the file to sc.version, all steps in one transaction so a failure
// leaves the file as it was.
func (s *Store) migrate(sc schema, readOnly bool) error {
	var have int
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		have, err = storedVersion(tx)
		return err
	})
	if err != nil {
		return fmt.Errorf("profile store %s: %w", s.path, err)
	}
	switch {
	case have == sc.version:
		return nil
	case have > sc.version:
		return fmt.Errorf("profile store %s has schema version %d, newer than this build understands (%d): upgrade fulcrum, or export it with the newer build and import it here", s.path, have, sc.version)
	case readOnly:
		return fmt.Errorf("profile store %s has schema version %d and needs migrating to %d: open it once for writing first (fulcrumctl profile check migrates it)", s.path, have, sc.version)
	}
	err = s.update(func(tx *bolt.Tx) error {
		for v := have; v < sc.version; v++ {
			if v >= len(sc.migrations) || sc.migrations[v].from != v {
				return fmt.Errorf("no migration from schema version %d (this is a bug)", v)
			}
			if err := sc.migrations[v].apply(tx); err != nil {
				return fmt.Errorf("migration %d→%d (%s): %w", v, v+1, sc.migrations[v].name, err)
			}
		}
		return tx.Bucket(bucketMeta).Put(keyVersion, []byte(strconv.Itoa(sc.version)))
	})
	if err != nil {
		return fmt.Errorf("profile store %s: migrate from schema version %d to %d (the file is unchanged): %w", s.path, have, sc.version, err)
	}
	return nil
}

// storedVersion reads meta/schema_version; 0 for a file with no buckets at all. A file
// with buckets but no meta is someone else's bbolt file.
func storedVersion(tx *bolt.Tx) (int, error) {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		any := false
		_ = tx.ForEach(func(name []byte, _ *bolt.Bucket) error { any = true; return nil })
		if any {
			return 0, errors.New("not a fulcrum profile store (it has buckets but no meta bucket): pass --db with another path")
		}
		return 0, nil
	}
	raw := meta.Get(keyVersion)
	v, err := strconv.Atoi(string(raw))
	if err != nil || v < 1 {
		return 0, fmt.Errorf("%w: meta/schema_version %q is not a version number; run fulcrumctl profile check", ErrDamaged, raw)
	}
	return v, nil
}

// Version is the file's schema version.
func (s *Store) Version() (int, error) {
	var v int
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		v, err = storedVersion(tx)
		return err
	})
	return v, err
}

// Path is the file the store was opened from.
func (s *Store) Path() string { return s.path }

// Close releases the file and its lock.
// A store whose bbolt handle panicked is given a bounded wait.
func (s *Store) Close() error { return closeDB(s.db, s.broken.get() != nil) }

// batchKey encodes a batch size as 8 bytes big-endian so bbolt's byte order is numeric;
// a micro-batch above 0 (issue 32) follows as 8 more bytes.
func batchKey(b int, micro ...int) []byte {
	k := make([]byte, 8, 16)
	for i := range 8 {
		k[7-i] = byte(uint64(b) >> (8 * i))
	}
	if len(micro) > 0 && micro[0] > 0 {
		k = append(k, batchKey(micro[0])...)
	}
	return k
}

// key is the profile's key within its mode bucket.
func (k Key) key() []byte { return batchKey(k.Batch, k.MicroBatch) }

// parseBatchKey reads a mode bucket's key: the batch, and the micro-batch (0 for the
// whole minibatch, an 8-byte key).
func parseBatchKey(k []byte) (batch, micro int, err error) {
	if len(k) != 8 && len(k) != 16 {
		return 0, 0, fmt.Errorf("batch key %x: want 8 bytes (a batch) or 16 (a batch and a micro-batch)", k)
	}
	num := func(b []byte) uint64 {
		var v uint64
		for _, c := range b {
			v = v<<8 | uint64(c)
		}
		return v
	}
	v := num(k[:8])
	if v < 1 || v > 1<<31 {
		return 0, 0, fmt.Errorf("batch key %x: batch %d out of range", k, v)
	}
	if len(k) == 16 {
		mv := num(k[8:])
		if mv < 1 || mv >= v {
			return 0, 0, fmt.Errorf("batch key %x: micro-batch %d out of range 1..%d", k, mv, v-1)
		}
		micro = int(mv)
	}
	return int(v), micro, nil
}

// path returns the bucket names from "profiles" down to the mode bucket.
func (k Key) path() [][]byte {
	return [][]byte{[]byte(k.Board), []byte(k.Workload), []byte(k.Role), []byte(k.Mode.String())}
}

func readCount(tx *bolt.Tx) (int, error) {
	raw := tx.Bucket(bucketMeta).Get(keyCount)
	n, err := strconv.Atoi(string(raw))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("meta/profile_count %q is not a count", raw)
	}
	return n, nil
}

func addCount(tx *bolt.Tx, d int) error {
	n, err := readCount(tx)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketMeta).Put(keyCount, []byte(strconv.Itoa(n+d)))
}
