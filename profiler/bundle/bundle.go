// Package bundle moves a board model's profiles and learned models from one Jetson to
// others of the same model: profile once, share across a fleet (docs/fleet.md).
//
// A bundle is one JSON document (gzip-compressed when its file name ends in .gz):
//
//	{"format": "fulcrum-profile-bundle", "format_version": 1, "created_at": ...,
//	 "identity": {"board", "model", "module", "soc", "l4t"},
//	 "store_schema_version": 1, "profiles": [store.Profile...],
//	 "models": {"<board>/<key>": <json>...}, "checksum": "sha256:<hex>"}
//
// The checksum is the SHA-256 of the compact JSON encoding of the document with an empty
// checksum, so any edit or truncation is caught before anything is imported.
//
// Learned models travel when their store key starts with "<board>/" (the catalog name):
// searchers that want their models shared name them that way.
package bundle

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
)

// FormatName identifies a bundle document.
const FormatName = "fulcrum-profile-bundle"

// FormatVersion is the bundle layout this code writes and the newest it reads.
const FormatVersion = 1

// Identity says which board a bundle's profiles were measured on.
type Identity struct {
	Board  string `json:"board"`  // catalog name, e.g. agx-orin-64gb: must match to import
	Model  string `json:"model"`  // device-tree model string
	Module string `json:"module"` // module part number, e.g. p3701-0005 (informational)
	SoC    string `json:"soc"`    // e.g. tegra234
	L4T    string `json:"l4t"`    // L4T release, e.g. R36.4.3: must match to import
}

// IdentityOf is the identity of a detected board (powermode.Detect).
func IdentityOf(info powermode.BoardInfo) Identity {
	return Identity{Board: info.Name, Model: info.Model, Module: info.Module, SoC: info.SoC, L4T: info.L4T}
}

// Bundle is a decoded bundle.
type Bundle struct {
	Format        string                     `json:"format"`
	FormatVersion int                        `json:"format_version"`
	CreatedAt     time.Time                  `json:"created_at"`
	Identity      Identity                   `json:"identity"`
	StoreSchema   int                        `json:"store_schema_version"`
	Profiles      []store.Profile            `json:"profiles"`
	Models        map[string]json.RawMessage `json:"models"`
	Checksum      string                     `json:"checksum"`
}

// ModelPrefix is the store key prefix of the learned models that belong to board.
func ModelPrefix(board string) string { return board + "/" }

// New builds a bundle of the given profiles and models for id, stamped now, with its
// checksum. Every profile must be of id.Board and every model key start with
// ModelPrefix(id.Board).
func New(id Identity, profiles []store.Profile, models map[string]json.RawMessage, now time.Time) (*Bundle, error) {
	if models == nil {
		models = map[string]json.RawMessage{}
	}
	if profiles == nil {
		profiles = []store.Profile{}
	}
	b := &Bundle{
		Format: FormatName, FormatVersion: FormatVersion, CreatedAt: now.UTC().Round(0),
		Identity: id, StoreSchema: store.SchemaVersion, Profiles: profiles, Models: models,
	}
	if err := b.validate(); err != nil {
		return nil, err
	}
	sum, err := b.sum()
	if err != nil {
		return nil, err
	}
	b.Checksum = sum
	return b, nil
}

// Export bundles every profile of id.Board in s, and the models given (the caller
// reads them, e.g. with ReadModels, and only those under ModelPrefix(id.Board) are
// kept). It fails when s holds no profile of that board.
func Export(s *store.Store, id Identity, models map[string]json.RawMessage, now time.Time) (*Bundle, error) {
	if id.Board == "" {
		return nil, errors.New("bundle: the board identity has no catalog name")
	}
	ps, err := s.List(store.Filter{Board: id.Board})
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	if len(ps) == 0 {
		all, err := s.List(store.Filter{})
		if err != nil {
			return nil, fmt.Errorf("bundle: %w", err)
		}
		boards := map[string]bool{}
		for _, p := range all {
			boards[p.Board] = true
		}
		return nil, fmt.Errorf("bundle: %s holds no profile of board %s (it has profiles of: %s); profile this board first, or pick the board whose profiles you want",
			s.Path(), id.Board, orNone(slices.Sorted(maps.Keys(boards))))
	}
	kept := map[string]json.RawMessage{}
	for k, v := range models {
		if strings.HasPrefix(k, ModelPrefix(id.Board)) {
			kept[k] = v
		}
	}
	return New(id, ps, kept, now)
}

func orNone(v []string) string {
	if len(v) == 0 {
		return "none"
	}
	return strings.Join(v, ", ")
}

// validate checks what New and Read both require.
func (b *Bundle) validate() error {
	switch {
	case b.Format != FormatName:
		return fmt.Errorf("bundle: format %q: not a Fulcrum profile bundle (want %q)", b.Format, FormatName)
	case b.FormatVersion < 1 || b.FormatVersion > FormatVersion:
		return fmt.Errorf("bundle: format_version %d: this build reads 1 to %d (upgrade fulcrum on this board)", b.FormatVersion, FormatVersion)
	case b.StoreSchema < 1 || b.StoreSchema > store.SchemaVersion:
		return fmt.Errorf("bundle: store_schema_version %d: this build reads 1 to %d (upgrade fulcrum on this board)", b.StoreSchema, store.SchemaVersion)
	case b.Identity.Board == "":
		return errors.New("bundle: identity.board is empty")
	}
	seen := map[store.Key]bool{}
	for i, p := range b.Profiles {
		if p.Board != b.Identity.Board {
			return fmt.Errorf("bundle: profile %d is of board %q, the bundle of %q", i+1, p.Board, b.Identity.Board)
		}
		if err := p.Validate(); err != nil {
			return fmt.Errorf("bundle: profile %d: %w", i+1, err)
		}
		if seen[p.Key()] {
			return fmt.Errorf("bundle: profile %s appears twice", p.Key())
		}
		seen[p.Key()] = true
	}
	for k, v := range b.Models {
		if !strings.HasPrefix(k, ModelPrefix(b.Identity.Board)) || len(k) == len(ModelPrefix(b.Identity.Board)) {
			return fmt.Errorf("bundle: model key %q does not name a model of board %s (want %s<name>)", k, b.Identity.Board, ModelPrefix(b.Identity.Board))
		}
		if !json.Valid(v) {
			return fmt.Errorf("bundle: model %q is not valid JSON", k)
		}
	}
	return nil
}

// sum is the checksum of b with its Checksum field empty.
func (b *Bundle) sum() (string, error) {
	c := *b
	c.Checksum = ""
	raw, err := json.Marshal(&c)
	if err != nil {
		return "", fmt.Errorf("bundle: encode: %w", err)
	}
	h := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(h[:]), nil
}

// Write writes b as indented JSON, gzip-compressed when gz is set.
func (b *Bundle) Write(w io.Writer, gz bool) error {
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(w)
		w = zw
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	if err := enc.Encode(b); err != nil {
		return fmt.Errorf("bundle: write: %w", err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return fmt.Errorf("bundle: write: %w", err)
		}
	}
	return nil
}

// Read decodes a bundle (plain or gzip-compressed JSON) and checks its format, version,
// checksum and contents. A bundle that fails any check is refused whole.
func Read(r io.Reader) (*Bundle, error) {
	br := bufio.NewReader(r)
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("bundle: gzip: %w", err)
		}
		defer zr.Close()
		r = zr
	} else {
		r = br
	}
	var b Bundle
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return nil, fmt.Errorf("bundle: decode: %w (is this a file written by fulcrumctl bundle export?)", err)
	}
	if err := b.validate(); err != nil {
		return nil, err
	}
	want, err := b.sum()
	if err != nil {
		return nil, err
	}
	if b.Checksum != want {
		return nil, fmt.Errorf("bundle: checksum mismatch (file says %q, content gives %q): the file was changed or damaged after export; export it again", b.Checksum, want)
	}
	if b.Models == nil {
		b.Models = map[string]json.RawMessage{}
	}
	return &b, nil
}

// MismatchError is returned by Check (and Import without Force) when the bundle was made
// on a different board model or L4T release than the target.
type MismatchError struct {
	Bundle, Target Identity
	Fields         []string // "board", "l4t"
}

func (e *MismatchError) Error() string {
	var parts []string
	for _, f := range e.Fields {
		switch f {
		case "board":
			parts = append(parts, fmt.Sprintf("board model: bundle %s (%s), this board %s (%s)", e.Bundle.Board, orDash(e.Bundle.Model), orDash(e.Target.Board), orDash(e.Target.Model)))
		case "l4t":
			parts = append(parts, fmt.Sprintf("L4T release: bundle %s, this board %s", orDash(e.Bundle.L4T), orDash(e.Target.L4T)))
		}
	}
	return "bundle does not match this board: " + strings.Join(parts, "; ") +
		" (profiles measured on another board model or BSP release may not hold here; pass --force to import anyway)"
}

func orDash(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// Check compares the bundle's identity with the target board's: the catalog board name
// and the L4T release must be equal (the module part number may differ within a board
// model, e.g. p3701-0000 and p3701-0005).
func Check(b *Bundle, target Identity) error {
	var fields []string
	if b.Identity.Board != target.Board {
		fields = append(fields, "board")
	}
	if b.Identity.L4T != target.L4T {
		fields = append(fields, "l4t")
	}
	if len(fields) > 0 {
		return &MismatchError{Bundle: b.Identity, Target: target, Fields: fields}
	}
	return nil
}

// ImportOptions tune Import.
type ImportOptions struct {
	// Force imports despite a board model or L4T mismatch.
	Force bool
	// Overwrite replaces stored profiles and models that differ from the bundle's;
	// without it such a conflict refuses the import and nothing is written.
	Overwrite bool
}

// Result says what Import did.
type Result struct {
	Profiles store.ImportResult `json:"profiles"`
	Models   ModelResult        `json:"models"`
	// Forced lists the mismatches imported anyway ("board", "l4t").
	Forced []string `json:"forced,omitempty"`
}

// ModelResult counts the learned models Import wrote.
type ModelResult struct {
	Added     int `json:"added"`
	Unchanged int `json:"unchanged"`
	Replaced  int `json:"replaced"`
}

// Import stores b's profiles and models in s after checking b against the target board.
// Every refusal (identity mismatch without Force, a conflicting profile or model without
// Overwrite, an invalid profile) happens before anything is written; the profiles then go
// in one transaction. The models follow, one write each: should one of those fail (an
// I/O error), the error says so and running the import again completes it.
func Import(s *store.Store, b *Bundle, target Identity, opts ImportOptions) (Result, error) {
	var res Result
	if err := Check(b, target); err != nil {
		var me *MismatchError
		if !opts.Force || !errors.As(err, &me) {
			return res, fmt.Errorf("%w (nothing was imported)", err)
		}
		res.Forced = me.Fields
	}
	// Models first, read-only: a conflict must refuse before the profiles are written.
	type modelWrite struct {
		key     string
		blob    json.RawMessage
		replace bool
	}
	var writes []modelWrite
	for _, k := range slices.Sorted(maps.Keys(b.Models)) {
		// Stored compact, as the exporting store most likely held it (the file is indented).
		var cv bytes.Buffer
		if err := json.Compact(&cv, b.Models[k]); err != nil {
			return Result{}, fmt.Errorf("bundle import: model %s: %w (nothing was imported)", k, err)
		}
		v := json.RawMessage(cv.Bytes())
		old, err := s.GetModel(k)
		switch {
		case errors.Is(err, store.ErrNotFound):
			writes = append(writes, modelWrite{key: k, blob: v})
		case err != nil:
			return Result{}, fmt.Errorf("bundle import: %w (nothing was imported)", err)
		case jsonEqual(old, v):
			res.Models.Unchanged++
		case !opts.Overwrite:
			return Result{}, fmt.Errorf("bundle import: model %s: a different model is already stored (pass --overwrite to replace it; nothing was imported)", k)
		default:
			writes = append(writes, modelWrite{key: k, blob: v, replace: true})
		}
	}
	var buf bytes.Buffer
	if err := store.WriteProfiles(&buf, store.JSON, b.Profiles); err != nil {
		return Result{}, fmt.Errorf("bundle import: %w", err)
	}
	pr, err := s.Import(&buf, store.ImportOptions{Format: store.JSON, Overwrite: opts.Overwrite})
	if err != nil {
		return Result{}, fmt.Errorf("bundle %w", err)
	}
	res.Profiles = pr
	for i, w := range writes {
		if err := s.PutModel(w.key, w.blob); err != nil {
			return res, fmt.Errorf("bundle import: the profiles were imported and %d of %d models, then: %w (run the import again to finish it)", i, len(writes), err)
		}
		if w.replace {
			res.Models.Replaced++
		} else {
			res.Models.Added++
		}
	}
	return res, nil
}

// jsonEqual compares two JSON documents byte-wise after compaction.
func jsonEqual(a, b []byte) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}
