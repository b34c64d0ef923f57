package store

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// readBody decodes an import body with Import's own readers.
func readBody(t *testing.T, body []byte, format Format) []Profile {
	t.Helper()
	var next func() (Profile, bool, error)
	var err error
	if format == JSON {
		next, err = jsonProfiles(bytes.NewReader(body))
	} else {
		next, err = csvProfiles(bytes.NewReader(body), "")
	}
	if err != nil {
		t.Fatal(err)
	}
	var ps []Profile
	for {
		p, ok, err := next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return ps
		}
		ps = append(ps, p)
	}
}

// dump is every stored profile, encoded, by key, and the stored count.
func dump(t *testing.T, s *Store) (map[Key]string, int) {
	t.Helper()
	ps, err := s.List(Filter{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[Key]string{}
	for _, p := range ps {
		raw, err := encodeProfile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[p.Key()] = string(raw)
	}
	n, err := s.Count()
	if err != nil {
		t.Fatal(err)
	}
	return out, n
}

// An import that fails after some chunks were committed takes them back: added
// profiles are deleted, replaced ones restored, the count is as before.
func TestImportFailingMidwayTakesBackCommittedChunks(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "p.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 3*importChunk + 10 // four write chunks
	body := importBody(t, JSON, n)
	// Stored before: a different version of a profile the first chunk replaces, and one
	// profile the import does not touch.
	old := readBody(t, importBody(t, JSON, 1), JSON)[0]
	old.TimeMS.Mean = 99
	other := old
	other.Workload = "untouched-infer"
	for _, p := range []Profile{old, other} {
		if err := s.Put(p); err != nil {
			t.Fatal(err)
		}
	}
	before, count := dump(t, s)

	var chunks []int
	s.importFault = func(chunk int) error {
		chunks = append(chunks, chunk)
		if chunk == 2 {
			return errors.New("disk full (injected)")
		}
		return nil
	}
	_, err = s.Import(bytes.NewReader(body), ImportOptions{Format: JSON, Overwrite: true})
	if err == nil || !strings.Contains(err.Error(), "disk full (injected)") || !strings.Contains(err.Error(), "nothing was stored") {
		t.Fatalf("import: %v, want the injected failure and 'nothing was stored'", err)
	}
	if len(chunks) != 3 {
		t.Fatalf("write chunks tried %v, want 0, 1, 2 (two committed before the failure)", chunks)
	}
	after, countAfter := dump(t, s)
	if countAfter != count || len(after) != len(before) {
		t.Fatalf("after the failed import: %d profiles (count %d), want %d (count %d)", len(after), countAfter, len(before), count)
	}
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s: %s after, want %s", k, after[k], v)
		}
	}

	// The same import without the fault stores everything.
	s.importFault = nil
	res, err := s.Import(bytes.NewReader(body), ImportOptions{Format: JSON, Overwrite: true})
	if err != nil || res.Added != n-1 || res.Replaced != 1 {
		t.Fatalf("import: %+v, %v; want %d added, 1 replaced", res, err, n-1)
	}
	if _, c := dump(t, s); c != n+1 {
		t.Fatalf("count %d, want %d", c, n+1)
	}
}

// A conflict found before the write phase stores nothing and never opens a write chunk.
func TestImportConflictCheckedBeforeWriting(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "p.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	body := importBody(t, CSV, importChunk+5)
	ps := readBody(t, body, CSV)
	last := ps[len(ps)-1] // in the second chunk
	last.TimeMS.Mean++
	if err := s.Put(last); err != nil {
		t.Fatal(err)
	}
	s.importFault = func(int) error { t.Error("a write chunk ran despite the conflict"); return nil }
	_, err = s.Import(bytes.NewReader(body), ImportOptions{Format: CSV})
	var ie *InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "a different profile is already stored") {
		t.Fatalf("import: %v, want an InputError naming the conflict", err)
	}
	if _, c := dump(t, s); c != 1 {
		t.Fatalf("count %d after a refused import, want 1", c)
	}
}

// A profile given twice is refused with both entries named; nothing is stored.
func TestImportDuplicateEntries(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "p.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	body := importBody(t, CSV, 3)
	lines := strings.SplitAfter(string(body), "\n")
	body = append(body, lines[2]...) // entry 2 again, as entry 4
	_, err = s.Import(bytes.NewReader(body), ImportOptions{Format: CSV})
	var ie *InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "entries 2 and 4 are both") || !strings.Contains(err.Error(), "nothing was stored") {
		t.Fatalf("import: %v, want an InputError naming entries 2 and 4", err)
	}
	if _, c := dump(t, s); c != 0 {
		t.Fatalf("count %d after a refused import, want 0", c)
	}
}
