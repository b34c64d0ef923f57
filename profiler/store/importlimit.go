package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"unicode/utf8"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Limits on what an import accepts. Every limit is checked while the input streams in,
// before anything is allocated for it, so one huge field costs at most a record's bytes
// (not 8 to 14 times the body, as a 60 MB CSV header line or workload name once did).
const (
	// MaxImportRecordBytes caps one CSV record (a line, or the lines of one quoted
	// field) and one JSON profile. An exported profile is about 600 bytes.
	MaxImportRecordBytes = 64 << 10
	// MaxImportNameBytes caps board, workload, role and source: the worker protocol's
	// name limit, so an import holds no name a worker could not register.
	MaxImportNameBytes = proto.MaxNameLen
	// MaxImportTimeMS is the longest minibatch or request time accepted: one hour, the
	// protocol's longest reported duration.
	MaxImportTimeMS = 3_600_000.0
	// MaxImportPowerMW is the highest board power accepted: 1 kW, as a power budget.
	MaxImportPowerMW = 1_000_000.0
	// MaxImportBatch is the protocol's largest batch.
	MaxImportBatch = proto.MaxBatch
	// Without the board's mode space (a board fulcrumd does not run on), a mode must
	// still look like a board's: at most maxImportCores cores and frequencies up to
	// maxImportHz (100 GHz).
	maxImportCores = 1024
	maxImportHz    = 100e9
	// maxImportCount caps samples, power_samples and warmup.
	maxImportCount = 1 << 30
	// maxImportRSE caps the relative standard error (a fraction).
	maxImportRSE = 1000.0
)

// clip shortens s for an error message: a message never echoes more than a few dozen
// bytes of the input.
func clip(s string) string {
	const keep = 48
	if len(s) <= keep {
		return s
	}
	cut := keep
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:cut], len(s))
}

// importLimits checks p against the limits above and, when spaces holds p's board,
// that p's mode is one of the board's modes. It runs before Validate, whose messages
// name the profile's key.
func importLimits(p Profile, spaces map[string]*powermode.Space) error {
	for _, f := range []struct{ name, v string }{
		{"board", p.Board}, {"workload", p.Workload}, {"role", string(p.Role)}, {"source", p.Source},
	} {
		if len(f.v) > MaxImportNameBytes {
			return fmt.Errorf("%s %q is %d bytes: at most %d (the worker protocol's name limit)", f.name, clip(f.v), len(f.v), MaxImportNameBytes)
		}
	}
	key := p.Key().String()
	bad := func(f string, a ...any) error { return fmt.Errorf("profile %s: %s", key, fmt.Sprintf(f, a...)) }
	for _, v := range []struct {
		name string
		v    float64
		max  float64
		unit string
	}{
		{"time_ms.mean", p.TimeMS.Mean, MaxImportTimeMS, "ms (one hour)"},
		{"time_ms.p50", p.TimeMS.P50, MaxImportTimeMS, "ms (one hour)"},
		{"time_ms.p95", p.TimeMS.P95, MaxImportTimeMS, "ms (one hour)"},
		{"time_ms.stddev", p.TimeMS.Stddev, MaxImportTimeMS, "ms (one hour)"},
		{"power_mw.mean", p.PowerMW.Mean, MaxImportPowerMW, "mW (1 kW)"},
		{"power_mw.stddev", p.PowerMW.Stddev, MaxImportPowerMW, "mW (1 kW)"},
		{"rse", p.RSE, maxImportRSE, ""},
	} {
		if v.v > v.max { // NaN, infinities and negatives: Validate says
			return bad("%s = %g is not a physical value: at most %g%s", v.name, v.v, v.max, v.unit)
		}
	}
	switch {
	case p.Batch > MaxImportBatch:
		return bad("batch %d: at most %d (the protocol's largest batch)", p.Batch, MaxImportBatch)
	case p.Samples > maxImportCount || p.PowerSamples > maxImportCount || p.Warmup > maxImportCount:
		return bad("samples, power_samples and warmup: at most %d each", maxImportCount)
	}
	if sp, ok := spaces[p.Board]; ok && sp != nil {
		if err := sp.Check(p.Mode); err != nil {
			return bad("%v (fulcrumctl board modes lists the board's levels)", err)
		}
		return nil
	}
	m := p.Mode
	if m.Cores > maxImportCores || float64(m.CPUKHz)*1000 > maxImportHz || float64(m.GPUHz) > maxImportHz || float64(m.EMCHz) > maxImportHz {
		return bad("mode %s is no board's: at most %d cores and %g Hz a clock", m, maxImportCores, maxImportHz)
	}
	return nil
}

// errRecordTooLong is what the record limiters return.
var errRecordTooLong = fmt.Errorf("a record over %d bytes (an exported profile is under 1 KB; names are at most %d bytes): is this a profile export?", MaxImportRecordBytes, MaxImportNameBytes)

// csvRecordLimit passes a CSV stream through, failing once one record (from a line
// break outside quotes to the next) exceeds max bytes: encoding/csv would otherwise
// hold a record of any length in memory, several times over.
type csvRecordLimit struct {
	r       io.Reader
	max     int
	n       int
	inQuote bool
	start   bool // at the start of a record
	comment bool // in a '#' line
}

func newCSVRecordLimit(r io.Reader, max int) *csvRecordLimit {
	return &csvRecordLimit{r: r, max: max, start: true}
}

func (l *csvRecordLimit) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	for i, b := range p[:n] {
		l.n++
		if l.n > l.max {
			return i, errRecordTooLong
		}
		if l.comment {
			if b == '\n' {
				l.comment, l.start, l.n = false, true, 0
			}
			continue
		}
		if l.start && b == '#' {
			l.comment = true
			continue
		}
		l.start = false
		switch {
		case b == '"':
			l.inQuote = !l.inQuote // "" inside a quoted field flips twice
		case b == '\n' && !l.inQuote:
			l.start, l.n = true, 0
		}
	}
	return n, err
}

// jsonRecordLimit passes a JSON export through, failing once one profile (or one
// member of the top-level object) exceeds max bytes: json.Decoder buffers a whole value
// before decoding it. It follows strings and nesting only as far as needed to see
// where a profile ends: at depth 2 (inside the profiles array) and above, a ',' or a
// closing bracket ends a record.
type jsonRecordLimit struct {
	r        io.Reader
	max      int
	n        int
	depth    int
	inString bool
	escape   bool
}

func (l *jsonRecordLimit) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	for i, b := range p[:n] {
		l.n++
		if l.n > l.max {
			return i, errRecordTooLong
		}
		if l.inString {
			switch {
			case l.escape:
				l.escape = false
			case b == '\\':
				l.escape = true
			case b == '"':
				l.inString = false
			}
			continue
		}
		switch b {
		case '"':
			l.inString = true
		case '{', '[':
			l.depth++
		case '}', ']':
			l.depth--
			if l.depth <= 2 {
				l.n = 0
			}
		case ',':
			if l.depth <= 2 {
				l.n = 0
			}
		}
	}
	return n, err
}

// spoolPattern names a store's import spools ("." + the store's file name +
// ".import-*"; the undo log is ".import-undo-*" under the same prefix), so they can be
// told apart from another store's in the same directory.
func (s *Store) spoolPattern(kind string) string {
	return "." + filepath.Base(s.path) + kind
}

// RemoveImportLeftovers deletes the temporary files of imports that did not finish:
// the spool (up to the body's size) and the undo log of an import killed mid-way
// (SIGKILL, a power cut), which no later import reuses. fulcrumd calls it right after
// opening the store: holding the store's lock, no import of this store is running.
// It also removes the spools of builds that named them ".import-*" without the store's
// name. A killed import may have stored part of its profiles; importing the same file
// again completes it (docs/operations.md). It returns the paths removed.
func (s *Store) RemoveImportLeftovers() ([]string, error) {
	dir := filepath.Dir(s.path)
	var removed []string
	var errs []error
	for _, pat := range []string{s.spoolPattern(".import-*"), ".import-[0-9]*", ".import-undo-*"} {
		matches, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return nil, err
		}
		for _, m := range matches {
			fi, err := os.Lstat(m)
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			if err := os.Remove(m); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, m)
		}
	}
	if len(errs) > 0 {
		return removed, fmt.Errorf("remove an unfinished import's temporary files in %s: %w (delete them by hand)", dir, errors.Join(errs...))
	}
	return removed, nil
}
