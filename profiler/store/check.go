package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/fulcrum-edge/fulcrum/powermode"
	bolt "go.etcd.io/bbolt"
)

// maxProblems bounds Check's report; a badly damaged file would otherwise print forever.
const maxProblems = 50

// parseModeKey parses a mode bucket name and insists on the canonical Mode.String form,
// so that one mode can never sit under two spellings.
func parseModeKey(k []byte) (powermode.Mode, error) {
	m, err := powermode.ParseMode(string(k))
	if err != nil {
		return m, err
	}
	if m.String() != string(k) {
		return m, fmt.Errorf("mode key %q is not in canonical form %q", k, m.String())
	}
	return m, nil
}

// Check verifies the file: bbolt's own page-level check, then the schema (meta present and
// current, only known top-level buckets, every profile key parses, every value decodes,
// validates and agrees with its key, models and campaign records are JSON, and the stored
// profile count matches). It returns nil or an error listing every problem found (up to 50).
func (s *Store) Check() error {
	var problems []string
	add := func(f string, a ...any) bool {
		problems = append(problems, fmt.Sprintf(f, a...))
		return len(problems) < maxProblems
	}
	run := s.update
	if s.db.IsReadOnly() {
		// A shared-lock reader: no writer can run in any process, so a read transaction
		// is safe for tx.Check.
		run = s.view
	}
	err := run(func(tx *bolt.Tx) error {
		// tx.Check reads pages in a goroutine of its own, where a fault on a page past
		// the end of a cut file could not be recovered: bound and read them here first.
		if err := s.readable(tx); err != nil {
			add("bbolt: %v", err)
			return nil
		}
		for err := range tx.Check() {
			if !add("bbolt: %v", err) {
				return nil
			}
		}
		checkSchema(tx, add)
		return nil
	})
	if err != nil {
		return fmt.Errorf("check %s: %w", s.path, err)
	}
	if len(problems) == 0 {
		return nil
	}
	more := ""
	if len(problems) >= maxProblems {
		more = "\n  (stopped after " + strconv.Itoa(maxProblems) + " problems)"
	}
	return fmt.Errorf("check %s: %d problem(s) found; export what is readable (fulcrumctl profile export) and import it into a new file:\n  %s%s",
		s.path, len(problems), strings.Join(problems, "\n  "), more)
}

// readable checks that the transaction's pages lie inside the file and reads them all.
func (s *Store) readable(tx *bolt.Tx) error {
	fi, err := os.Stat(s.path)
	if err != nil {
		return err
	}
	if hw := tx.Size(); hw > fi.Size() {
		return fmt.Errorf("the file is %d bytes but its pages reach %d bytes: it was cut short", fi.Size(), hw)
	}
	return walkAll(tx)
}

// checkContent runs the schema check (the page-level one ran in verify) and words its
// problems as damage: fulcrumd cannot plan from a store whose values do not decode.
func (s *Store) checkContent() error {
	var problems []string
	err := s.view(func(tx *bolt.Tx) error {
		checkSchema(tx, func(f string, a ...any) bool {
			problems = append(problems, fmt.Sprintf(f, a...))
			return len(problems) < maxProblems
		})
		return nil
	})
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s: %d problem(s): %s", ErrDamaged, s.path, len(problems), strings.Join(problems, "; "))
	}
	return nil
}

func checkSchema(tx *bolt.Tx, add func(string, ...any) bool) {
	known := map[string]bool{string(bucketMeta): true, string(bucketProfiles): true, string(bucketModels): true, string(bucketCampaigns): true}
	_ = tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
		if !known[string(name)] {
			add("unknown top-level bucket %q", name)
		}
		return nil
	})
	for name := range known {
		if tx.Bucket([]byte(name)) == nil {
			add("bucket %q is missing", name)
		}
	}
	if tx.Bucket(bucketMeta) == nil || tx.Bucket(bucketProfiles) == nil {
		return
	}
	if v, err := storedVersion(tx); err != nil {
		add("%v", err)
	} else if v != SchemaVersion {
		add("schema_version is %d, want %d", v, SchemaVersion)
	}
	stored, err := readCount(tx)
	if err != nil {
		add("%v", err)
	}
	n := 0
	err = walk(tx, Filter{}, func(k Key, raw []byte) error {
		n++
		p, err := decodeProfile(raw)
		if err != nil {
			return keepGoing(add("profiles %s: %v", k, err))
		}
		if p.Key() != k {
			return keepGoing(add("profiles %s: the value says %s", k, p.Key()))
		}
		if err := p.Validate(); err != nil {
			return keepGoing(add("%v", err))
		}
		if p.normalize() != p {
			return keepGoing(add("profiles %s: times are not in UTC", k))
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		add("profiles: %v", err)
	}
	if err == nil && stored != n {
		add("meta/profile_count is %d but %d profiles are stored", stored, n)
	}
	for _, bn := range [][]byte{bucketModels, bucketCampaigns} {
		b := tx.Bucket(bn)
		if b == nil {
			continue
		}
		_ = b.ForEach(func(k, v []byte) error {
			switch {
			case v == nil:
				return keepGoing(add("%s/%s is a bucket, want a JSON value", bn, k))
			case !json.Valid(v):
				return keepGoing(add("%s/%s is not valid JSON", bn, k))
			}
			return nil
		})
	}
}

var errStop = errors.New("too many problems")

func keepGoing(ok bool) error {
	if ok {
		return nil
	}
	return errStop
}
