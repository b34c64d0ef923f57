package store

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// Format is an export/import file format.
type Format string

// The formats Export writes and Import reads.
const (
	// CSV is the ground-truth table of docs/design.md §8 (its nine columns first, so every tool
	// that reads ground truth reads it) followed by the columns that make it lossless.
	CSV Format = "csv"
	// JSON is {"schema_version": N, "profiles": [Profile, ...]}.
	JSON Format = "json"
)

// ParseFormat accepts "csv" or "json".
func ParseFormat(s string) (Format, error) {
	switch Format(strings.ToLower(s)) {
	case CSV:
		return CSV, nil
	case JSON:
		return JSON, nil
	}
	return "", fmt.Errorf("format %q: want csv or json", s)
}

// extraColumns follow truth.Header() in an exported CSV. A plain ground-truth table
// lacks them; Import fills defaults then (see ImportOptions).
var extraColumns = []string{
	"board", "time_p50_ms", "time_p95_ms", "time_stddev_ms", "power_stddev_mw",
	"samples", "power_samples", "warmup", "started_at", "finished_at", "rse", "source",
}

// csvHeader is the full exported header.
func csvHeader() []string { return append(truth.Header(), extraColumns...) }

// jsonFile is the JSON export document.
type jsonFile struct {
	SchemaVersion int       `json:"schema_version"`
	Profiles      []Profile `json:"profiles"`
}

// Export writes the profiles matching f, in key order. Both formats are lossless:
// Import of an export into an empty store, exported again, gives the same bytes.
func (s *Store) Export(w io.Writer, format Format, f Filter) error {
	ps, err := s.List(f)
	if err != nil {
		return err
	}
	return WriteProfiles(w, format, ps)
}

// WriteProfiles writes ps in format, in the order given.
func WriteProfiles(w io.Writer, format Format, ps []Profile) error {
	switch format {
	case JSON:
		if ps == nil {
			ps = []Profile{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(jsonFile{SchemaVersion: SchemaVersion, Profiles: ps})
	case CSV:
		cw := csv.NewWriter(w)
		// The micro_batch column (issue 32) only when a profile has one, so stores
		// without micro-batch profiles export exactly as before.
		micro := slices.ContainsFunc(ps, func(p Profile) bool { return p.MicroBatch != 0 })
		head := csvHeader()
		if micro {
			head = append(head, truth.MicroColumn)
		}
		if err := cw.Write(head); err != nil {
			return err
		}
		g := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
		for _, p := range ps {
			rec := []string{
				p.Workload, string(p.Role),
				strconv.Itoa(p.Mode.Cores), strconv.FormatInt(p.Mode.CPUKHz, 10),
				strconv.FormatInt(p.Mode.GPUHz, 10), strconv.FormatInt(p.Mode.EMCHz, 10),
				strconv.Itoa(p.Batch), g(p.TimeMS.Mean), g(p.PowerMW.Mean),
				p.Board, g(p.TimeMS.P50), g(p.TimeMS.P95), g(p.TimeMS.Stddev), g(p.PowerMW.Stddev),
				strconv.Itoa(p.Samples), strconv.Itoa(p.PowerSamples), strconv.Itoa(p.Warmup),
				p.StartedAt.UTC().Format(time.RFC3339Nano), p.FinishedAt.UTC().Format(time.RFC3339Nano),
				g(p.RSE), p.Source,
			}
			if micro {
				rec = append(rec, strconv.Itoa(p.MicroBatch))
			}
			if err := cw.Write(rec); err != nil {
				return err
			}
		}
		cw.Flush()
		return cw.Error()
	}
	return fmt.Errorf("export: unknown format %q: want csv or json", format)
}

// ImportOptions tune Import.
type ImportOptions struct {
	// Format is CSV or JSON; empty guesses from the first non-blank byte ('{' is JSON).
	Format Format
	// Board is used for CSV rows without a board column (a plain ground-truth table).
	Board string
	// Overwrite replaces stored profiles that differ; without it such a conflict fails
	// the whole import and changes nothing.
	Overwrite bool
	// Spaces are the mode spaces of the boards known to the importer (fulcrumd: its own
	// board): a profile of such a board must be at one of its modes.
	Spaces map[string]*powermode.Space
}

// ImportResult counts what Import did.
type ImportResult struct {
	Added     int `json:"added"`
	Unchanged int `json:"unchanged"` // identical profile already stored
	Replaced  int `json:"replaced"`  // only with Overwrite
}

// InputError is an import that failed on its input — the format, a row, a value, a
// duplicate, a conflict with a stored profile — rather than on the store: the caller's
// to fix (the control API answers it with a 400). Nothing was stored.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

func sniff(br *bufio.Reader) Format {
	for i := 1; ; i++ {
		b, err := br.Peek(i)
		if err != nil || len(b) < i {
			return CSV
		}
		switch b[i-1] {
		case ' ', '\t', '\r', '\n':
			continue
		case '{':
			return JSON
		}
		return CSV
	}
}

// jsonProfiles reads the JSON export document up to its profiles array and returns a
// function giving one profile at a time (false at the end of the array).
// schema_version must come before profiles, as Export writes it.
func jsonProfiles(r io.Reader) (func() (Profile, bool, error), error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	delim := func(want json.Delim, what string) error {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("json: %w", err)
		}
		if d, ok := tok.(json.Delim); !ok || d != want {
			return fmt.Errorf("json: want %s, found %v", what, tok)
		}
		return nil
	}
	if err := delim('{', `an object {"schema_version": N, "profiles": [...]}`); err != nil {
		return nil, err
	}
	version := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("json: %w", err)
		}
		switch tok {
		case "schema_version":
			if err := dec.Decode(&version); err != nil {
				return nil, fmt.Errorf("json: schema_version: %w", err)
			}
			continue
		case "profiles":
		case json.Delim('}'):
			return nil, errors.New(`json: no "profiles" array`)
		default:
			return nil, fmt.Errorf("json: unknown field %v: want schema_version and profiles", tok)
		}
		break
	}
	if version < 1 || version > SchemaVersion {
		return nil, fmt.Errorf("json: schema_version %d: this build reads 1 to %d (and it must come before profiles)", version, SchemaVersion)
	}
	if err := delim('[', "profiles to be an array"); err != nil {
		return nil, err
	}
	i, done := 0, false
	return func() (Profile, bool, error) {
		if done {
			return Profile{}, false, nil
		}
		if !dec.More() {
			done = true
			if err := delim(']', "the end of profiles"); err != nil {
				return Profile{}, false, err
			}
			if err := delim('}', "the end of the document (nothing after profiles)"); err != nil {
				return Profile{}, false, err
			}
			return Profile{}, false, nil
		}
		i++
		var p Profile
		if err := dec.Decode(&p); err != nil {
			return Profile{}, false, fmt.Errorf("json: profile %d: %w", i, err)
		}
		return p, true, nil
	}, nil
}

// csvProfiles reads the header and returns a function giving one row's profile at a
// time (false at the end).
func csvProfiles(r io.Reader, board string) (func() (Profile, bool, error), error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.ReuseRecord = true
	head, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, errors.New("csv: empty file: want a header line " + strings.Join(csvHeader(), ","))
	}
	if err != nil {
		return nil, fmt.Errorf("csv header: %w", err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[strings.TrimSpace(strings.ToLower(h))] = i
	}
	var missing []string
	for _, h := range truth.Header() {
		if _, ok := col[h]; !ok {
			missing = append(missing, h)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("csv header lacks column(s) %s (want a header line %s)", strings.Join(missing, ", "), strings.Join(csvHeader(), ","))
	}
	if _, ok := col["board"]; !ok && board == "" {
		return nil, errors.New("csv has no board column (a plain ground-truth table): pass --board NAME")
	}
	return func() (Profile, bool, error) {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return Profile{}, false, nil
		}
		if err != nil {
			return Profile{}, false, fmt.Errorf("csv: %w", err)
		}
		line, _ := cr.FieldPos(0)
		p, err := parseCSVRow(rec, col, board)
		if err != nil {
			return Profile{}, false, fmt.Errorf("csv line %d: %w", line, err)
		}
		return p, true, nil
	}, nil
}

func parseCSVRow(rec []string, col map[string]int, board string) (Profile, error) {
	has := func(name string) bool { _, ok := col[name]; return ok }
	get := func(name string) string { return strings.TrimSpace(rec[col[name]]) }
	var firstErr error
	// The message quotes the value clipped, and says why without strconv's or time's
	// own text (which repeats the whole value).
	fail := func(name, why string) {
		if firstErr == nil {
			firstErr = fmt.Errorf("column %s: %q: %s", name, clip(get(name)), why)
		}
	}
	numErr := func(err error) string {
		var ne *strconv.NumError
		if errors.As(err, &ne) {
			return ne.Err.Error()
		}
		return err.Error()
	}
	integer := func(name string) int64 {
		v, err := strconv.ParseInt(get(name), 10, 64)
		if err != nil {
			fail(name, "want an integer: "+numErr(err))
		}
		return v
	}
	real := func(name string) float64 {
		v, err := strconv.ParseFloat(get(name), 64)
		switch {
		case err != nil:
			fail(name, "want a number: "+numErr(err))
		case math.IsNaN(v) || math.IsInf(v, 0):
			fail(name, "not a finite number")
		}
		return v
	}
	stamp := func(name string) time.Time {
		if get(name) == "" {
			return time.Time{}
		}
		v, err := time.Parse(time.RFC3339Nano, get(name))
		if err != nil {
			fail(name, "want an RFC 3339 time, e.g. 2026-11-25T10:00:00Z")
		}
		return v.UTC()
	}
	p := Profile{
		Board: board, Workload: get("workload"), Role: truth.Role(get("role")),
		Mode:   powermode.Mode{Cores: int(integer("cores")), CPUKHz: integer("cpu_khz"), GPUHz: integer("gpu_hz"), EMCHz: integer("emc_hz")},
		Batch:  int(integer("batch")),
		Source: SourceImport, Samples: 1,
	}
	p.TimeMS.Mean = real("time_ms")
	p.TimeMS.P50, p.TimeMS.P95 = p.TimeMS.Mean, p.TimeMS.Mean
	p.PowerMW.Mean = real("power_mw")
	if has("board") {
		p.Board = get("board")
	}
	if has("time_p50_ms") {
		p.TimeMS.P50 = real("time_p50_ms")
	}
	if has("time_p95_ms") {
		p.TimeMS.P95 = real("time_p95_ms")
	}
	if has("time_stddev_ms") {
		p.TimeMS.Stddev = real("time_stddev_ms")
	}
	if has("power_stddev_mw") {
		p.PowerMW.Stddev = real("power_stddev_mw")
	}
	if has("samples") {
		p.Samples = int(integer("samples"))
	}
	if has("power_samples") {
		p.PowerSamples = int(integer("power_samples"))
	}
	if has("warmup") {
		p.Warmup = int(integer("warmup"))
	}
	if has("started_at") {
		p.StartedAt = stamp("started_at")
	}
	if has("finished_at") {
		p.FinishedAt = stamp("finished_at")
	}
	if has("rse") {
		p.RSE = real("rse")
	}
	if has("source") {
		p.Source = get("source")
	}
	if has(truth.MicroColumn) && get(truth.MicroColumn) != "" {
		p.MicroBatch = int(integer(truth.MicroColumn)) // Validate checks it against the batch
	}
	return p, firstErr
}
