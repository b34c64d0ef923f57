package store

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// importChunk is how many profiles one write transaction of an import holds: enough to
// amortise a commit's fsync, few enough that bbolt's dirty pages stay a few MB and other
// writers (a running profiler) wait for one chunk, not the whole import.
const importChunk = 2000

// Import reads profiles written by Export (or a plain ground-truth CSV) and stores all of
// them or, on an error it returns, none. A process killed while writing (SIGKILL, a power
// cut) can leave part of an import stored; see below.
//
// Every record is bounded before it is parsed (MaxImportRecordBytes) and every profile
// checked against the import limits (names, physical ranges; modes against
// opts.Spaces), so a hostile body costs about its own size and is refused whole.
//
// Memory stays bounded by the chunk, not the body: the input is streamed once to check
// every profile (format, values, duplicates) and spool it, encoded, to a temporary file
// beside the store;
// without Overwrite the spool is then checked against the store in short read
// transactions; only then is it written, importChunk profiles per transaction, each
// change logged to an undo file. If writing fails part-way (the disk fills, or another
// writer stored a conflicting profile meanwhile), the chunks already committed are taken
// back from the undo log. A crash during the write phase can leave part of an import
// stored; importing the same file again completes it (identical profiles count as
// unchanged).
func (s *Store) Import(r io.Reader, opts ImportOptions) (ImportResult, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	format := opts.Format
	if format == "" {
		format = sniff(br)
	}
	var next func() (Profile, bool, error)
	var err error
	switch format {
	case JSON:
		next, err = jsonProfiles(&jsonRecordLimit{r: br, max: MaxImportRecordBytes})
	case CSV:
		next, err = csvProfiles(newCSVRecordLimit(br, MaxImportRecordBytes), opts.Board)
	default:
		err = fmt.Errorf("unknown format %q: want csv or json", format)
	}
	if err != nil {
		return ImportResult{}, &InputError{fmt.Errorf("import: %w (nothing was stored)", err)}
	}
	spool, err := newSpool(filepath.Dir(s.path), s.spoolPattern(".import-*"))
	if err != nil {
		return ImportResult{}, fmt.Errorf("import: %w (nothing was stored)", err)
	}
	defer spool.remove()
	if err := spoolProfiles(next, spool, opts.Spaces); err != nil {
		var ie *InputError
		if errors.As(err, &ie) {
			return ImportResult{}, &InputError{fmt.Errorf("import: %w (nothing was stored)", ie.Err)}
		}
		return ImportResult{}, fmt.Errorf("import: %w (nothing was stored)", err)
	}
	if !opts.Overwrite {
		if err := s.importConflicts(spool); err != nil {
			var ie *InputError
			if errors.As(err, &ie) {
				return ImportResult{}, &InputError{fmt.Errorf("import: %w (nothing was stored)", ie.Err)}
			}
			return ImportResult{}, fmt.Errorf("import from %s: %w (nothing was stored)", s.path, err)
		}
	}
	res, err := s.importWrite(spool, opts.Overwrite)
	if err == nil {
		return res, nil
	}
	var ie *InputError
	if errors.As(err, &ie) {
		return ImportResult{}, &InputError{fmt.Errorf("import: %w (nothing was stored)", ie.Err)}
	}
	return ImportResult{}, fmt.Errorf("import into %s: %w (nothing was stored)", s.path, err)
}

// spoolProfiles checks every profile next gives and writes it, normalized and encoded,
// one per line.
func spoolProfiles(next func() (Profile, bool, error), sp *spool, spaces map[string]*powermode.Space) error {
	// Duplicates are found by a 128-bit hash of the key, not the key itself: 24 bytes an
	// entry instead of a Key's strings (420,000 rows: ~20 MB, not ~200 MB). A collision,
	// about 2^-128 a pair, would refuse the import as a duplicate; it cannot store wrong data.
	seen := map[[16]byte]int{}
	h := fnv.New128a()
	for i := 0; ; i++ {
		p, ok, err := next()
		if err != nil {
			return &InputError{err}
		}
		if !ok {
			return sp.rewind()
		}
		if err := importLimits(p, spaces); err != nil {
			return &InputError{fmt.Errorf("entry %d: %w", i+1, err)}
		}
		if err := p.Validate(); err != nil {
			return &InputError{fmt.Errorf("entry %d: %w", i+1, err)}
		}
		var sum [16]byte
		h.Reset()
		h.Write([]byte(p.Key().String()))
		h.Sum(sum[:0])
		if j, dup := seen[sum]; dup {
			return &InputError{fmt.Errorf("entries %d and %d are both %s", j+1, i+1, p.Key())}
		}
		seen[sum] = i
		raw, err := encodeProfile(p.normalize())
		if err != nil {
			return err
		}
		if err := sp.add(raw); err != nil {
			return err
		}
	}
}

// importConflicts fails with an InputError on the first spooled profile that differs
// from one already stored.
func (s *Store) importConflicts(sp *spool) error {
	defer sp.rewind()
	return sp.chunks(func(chunk [][]byte) error {
		return s.view(func(tx *bolt.Tx) error {
			for _, raw := range chunk {
				p, err := decodeProfile(raw)
				if err != nil {
					return err
				}
				if b := modeBucket(tx, p.Key()); b != nil {
					if old := b.Get(p.Key().key()); old != nil && !bytes.Equal(old, raw) {
						return &InputError{fmt.Errorf("%s: a different profile is already stored (pass --overwrite to replace it)", p.Key())}
					}
				}
			}
			return nil
		})
	})
}

// Undo log records: what to do to take a change back.
const (
	undoDelete  = 'D' // the profile was added: delete it
	undoRestore = 'R' // the profile replaced this one: put it back
)

// importWrite stores the spool in chunks, logging each change; on an error it takes
// back what the committed chunks changed.
func (s *Store) importWrite(sp *spool, overwrite bool) (ImportResult, error) {
	var res ImportResult
	undo, err := newSpool(filepath.Dir(s.path), s.spoolPattern(".import-undo-*"))
	if err != nil {
		return res, err
	}
	defer undo.remove()
	n := 0
	werr := sp.chunks(func(chunk [][]byte) error {
		n++
		return s.update(func(tx *bolt.Tx) error {
			if s.importFault != nil {
				if err := s.importFault(n - 1); err != nil {
					return err
				}
			}
			for _, raw := range chunk {
				p, err := decodeProfile(raw)
				if err != nil {
					return err
				}
				var old []byte
				if b := modeBucket(tx, p.Key()); b != nil {
					old = b.Get(p.Key().key())
				}
				switch {
				case old != nil && bytes.Equal(old, raw):
					res.Unchanged++
					continue
				case old != nil && !overwrite:
					// Stored by another writer after the conflict check.
					return &InputError{fmt.Errorf("%s: a different profile was stored while the import ran (pass --overwrite to replace it)", p.Key())}
				case old != nil:
					err = undo.add(append([]byte{undoRestore}, old...))
				default:
					err = undo.add(append([]byte{undoDelete}, raw...))
				}
				if err != nil {
					return err
				}
				replaced, err := putTx(tx, p, overwrite)
				if err != nil {
					return fmt.Errorf("%s: %w", p.Key(), err)
				}
				if replaced {
					res.Replaced++
				} else {
					res.Added++
				}
			}
			return nil
		})
	})
	if werr == nil {
		return res, nil
	}
	if err := undo.rewind(); err != nil {
		return ImportResult{}, fmt.Errorf("%w; taking back the profiles already written failed too (%v): the store holds part of the import — import the file again to complete it, or delete them", werr, err)
	}
	if err := s.importUndo(undo); err != nil {
		return ImportResult{}, fmt.Errorf("%w; taking back the profiles already written failed too (%v): the store holds part of the import — import the file again to complete it, or delete them", werr, err)
	}
	return ImportResult{}, werr
}

// importUndo applies an undo log. Records of a chunk whose transaction rolled back find
// the store as it was: a delete of a profile that is not there is skipped, a restore
// puts back the value that is still there.
func (s *Store) importUndo(undo *spool) error {
	return undo.chunks(func(chunk [][]byte) error {
		return s.update(func(tx *bolt.Tx) error {
			for _, rec := range chunk {
				if len(rec) < 2 {
					return fmt.Errorf("undo log: short record")
				}
				p, err := decodeProfile(rec[1:])
				if err != nil {
					return err
				}
				switch rec[0] {
				case undoDelete:
					if err := deleteTx(tx, p.Key()); err != nil && !errors.Is(err, ErrNotFound) {
						return err
					}
				case undoRestore:
					b := modeBucket(tx, p.Key())
					if b == nil || b.Get(p.Key().key()) == nil {
						// Deleted by someone since: leave it deleted.
						continue
					}
					if err := b.Put(p.Key().key(), rec[1:]); err != nil {
						return err
					}
				default:
					return fmt.Errorf("undo log: unknown record %q", rec[0])
				}
			}
			return nil
		})
	})
}

// spool is a temporary file of newline-terminated records (encoded profiles hold no
// raw newline: JSON escapes it).
type spool struct {
	f *os.File
	w *bufio.Writer
}

// newSpool creates it in dir: the store's directory, on the store's disk (a /tmp on
// tmpfs, as on many Jetson images, would hold it in memory) and writable by whoever
// writes the store.
func newSpool(dir, pattern string) (*spool, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, fmt.Errorf("temporary file: %w", err)
	}
	return &spool{f: f, w: bufio.NewWriterSize(f, 64<<10)}, nil
}

func (sp *spool) add(rec []byte) error {
	if _, err := sp.w.Write(rec); err != nil {
		return fmt.Errorf("temporary file: %w", err)
	}
	return sp.w.WriteByte('\n')
}

// rewind flushes what was written and goes back to the start for reading.
func (sp *spool) rewind() error {
	if err := sp.w.Flush(); err != nil {
		return fmt.Errorf("temporary file: %w", err)
	}
	_, err := sp.f.Seek(0, io.SeekStart)
	return err
}

// chunks reads the records from the current position and calls fn with up to
// importChunk of them at a time.
func (sp *spool) chunks(fn func([][]byte) error) error {
	rd := bufio.NewReaderSize(sp.f, 64<<10)
	chunk := make([][]byte, 0, importChunk)
	for {
		line, err := rd.ReadBytes('\n')
		if len(line) > 0 {
			chunk = append(chunk, bytes.TrimSuffix(line, []byte{'\n'}))
		}
		if len(chunk) == importChunk || (err != nil && len(chunk) > 0) {
			if ferr := fn(chunk); ferr != nil {
				return ferr
			}
			chunk = chunk[:0]
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("temporary file: %w", err)
		}
	}
}

func (sp *spool) remove() {
	sp.f.Close()
	os.Remove(sp.f.Name())
}
