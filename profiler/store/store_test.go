package store_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/profiler/store/storetest"
	"github.com/fulcrum-edge/fulcrum/truth"
	bolt "go.etcd.io/bbolt"
)

var (
	maxn = powermode.Mode{Cores: 12, CPUKHz: 2201600, GPUHz: 1300500000, EMCHz: 3199000000}
	m30w = powermode.Mode{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000}
)

// sample builds a distinct, valid profile; i varies every number so a mix-up shows.
func sample(board, workload string, role truth.Role, m powermode.Mode, batch, i int) store.Profile {
	start := time.Date(2026, 11, 22, 3, 0, i, 123456789, time.UTC)
	f := float64(i)
	return store.Profile{
		Board: board, Workload: workload, Role: role, Mode: m, Batch: batch,
		TimeMS:  store.TimeStats{Mean: 100.25 + f, P50: 100 + f, P95: 104.5 + f, Stddev: 1.0 / 3},
		PowerMW: store.PowerStats{Mean: 45123.4 + 7*f, Stddev: 812.5},
		Samples: 5 + i, PowerSamples: 9 + i, Warmup: 2,
		StartedAt: start, FinishedAt: start.Add(1500 * time.Millisecond),
		RSE: 0.0123, Source: store.SourceSim,
	}
}

func open(t *testing.T, path string) *store.Store {
	t.Helper()
	return storetest.OpenAt(t, path, store.Options{})
}

// fill stores a small but varied set: two boards, train and infer, several modes and
// batches (including batch 256 > 255 to catch a byte-order mistake in the key).
func fill(t *testing.T, s *store.Store) []store.Profile {
	t.Helper()
	var ps []store.Profile
	i := 0
	for _, board := range []string{"agx-orin-64gb", "orin-nano-8gb"} {
		for _, m := range []powermode.Mode{maxn, m30w} {
			i++
			ps = append(ps, sample(board, "resnet18", truth.Train, m, 32, i))
			for _, b := range []int{1, 8, 256} {
				i++
				ps = append(ps, sample(board, "mobilenet", truth.Infer, m, b, i))
			}
		}
	}
	for _, p := range ps {
		if err := s.Put(p); err != nil {
			t.Fatal(err)
		}
	}
	return ps
}

func TestPutGetListDelete(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "p.db"))
	ps := fill(t, s)
	for _, p := range ps {
		got, err := s.Get(p.Key())
		if err != nil {
			t.Fatal(err)
		}
		if got != p {
			t.Errorf("Get(%s) = %+v, want %+v", p.Key(), got, p)
		}
	}
	if n, err := s.Count(); err != nil || n != len(ps) {
		t.Errorf("Count = %d, %v; want %d", n, err, len(ps))
	}
	tests := []struct {
		name string
		f    store.Filter
		want int
	}{
		{"all", store.Filter{}, 16},
		{"board", store.Filter{Board: "agx-orin-64gb"}, 8},
		{"workload", store.Filter{Workload: "mobilenet"}, 12},
		{"role", store.Filter{Role: truth.Train}, 4},
		{"board+role", store.Filter{Board: "orin-nano-8gb", Role: truth.Infer}, 6},
		{"workload with other role", store.Filter{Workload: "resnet18", Role: truth.Infer}, 0},
		{"unknown board", store.Filter{Board: "nope"}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.List(tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.want {
				t.Fatalf("List(%+v) gave %d profiles, want %d", tc.f, len(got), tc.want)
			}
			for _, p := range got {
				if (tc.f.Board != "" && p.Board != tc.f.Board) || (tc.f.Workload != "" && p.Workload != tc.f.Workload) || (tc.f.Role != "" && p.Role != tc.f.Role) {
					t.Errorf("List(%+v) returned %s", tc.f, p.Key())
				}
			}
		})
	}
	// Batches come back in numeric order (1, 8, 256), not byte order of their text.
	got, _ := s.List(store.Filter{Board: "agx-orin-64gb", Workload: "mobilenet"})
	var batches []int
	for _, p := range got[:3] {
		batches = append(batches, p.Batch)
	}
	if fmt.Sprint(batches) != "[1 8 256]" {
		t.Errorf("batches in list order = %v, want [1 8 256]", batches)
	}

	k := ps[0].Key()
	if err := s.Delete(k); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(k); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get after Delete: err = %v, want ErrNotFound", err)
	}
	if has, _ := s.Has(k); has {
		t.Error("Has after Delete = true")
	}
	if err := s.Delete(k); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second Delete: err = %v, want ErrNotFound", err)
	}
	if n, _ := s.Count(); n != len(ps)-1 {
		t.Errorf("Count after Delete = %d, want %d", n, len(ps)-1)
	}
	if err := s.Check(); err != nil {
		t.Errorf("Check after Delete: %v", err)
	}
}

func TestPutNeverOverwritesUnlessAsked(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "p.db"))
	first := sample("agx-orin-64gb", "resnet18", truth.Train, maxn, 32, 1)
	if err := s.Put(first); err != nil {
		t.Fatal(err)
	}
	second := sample("agx-orin-64gb", "resnet18", truth.Train, maxn, 32, 2)
	err := s.Put(second)
	if !errors.Is(err, store.ErrExists) {
		t.Fatalf("second Put: err = %v, want ErrExists", err)
	}
	if got, _ := s.Get(first.Key()); got != first {
		t.Errorf("after refused Put, stored = %+v, want the first", got)
	}
	if err := s.Put(second, store.Overwrite); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(first.Key()); got != second {
		t.Errorf("after Overwrite, stored = %+v, want the second", got)
	}
	if n, _ := s.Count(); n != 1 {
		t.Errorf("Count = %d, want 1", n)
	}
}

func TestPutRejectsInvalid(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "p.db"))
	good := sample("b", "w", truth.Infer, maxn, 4, 1)
	tests := []struct {
		name   string
		change func(p *store.Profile)
	}{
		{"no board", func(p *store.Profile) { p.Board = "" }},
		{"bad role", func(p *store.Profile) { p.Role = "serve" }},
		{"batch 0", func(p *store.Profile) { p.Batch = 0 }},
		{"zero mode", func(p *store.Profile) { p.Mode = powermode.Mode{} }},
		{"zero time", func(p *store.Profile) { p.TimeMS.Mean = 0 }},
		{"no samples", func(p *store.Profile) { p.Samples = 0 }},
		{"finished before started", func(p *store.Profile) { p.FinishedAt = p.StartedAt.Add(-time.Second) }},
		{"unknown source", func(p *store.Profile) { p.Source = "guess" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := good
			tc.change(&p)
			if err := s.Put(p); err == nil {
				t.Errorf("Put accepted %+v", p)
			}
		})
	}
	if n, _ := s.Count(); n != 0 {
		t.Errorf("Count = %d after only invalid puts, want 0", n)
	}
}

func TestTimesStoredInUTC(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "p.db"))
	p := sample("b", "w", truth.Train, maxn, 32, 1)
	p.StartedAt = time.Now() // carries a monotonic reading and the local zone
	p.FinishedAt = p.StartedAt.Add(time.Second)
	if err := s.Put(p); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Get(p.Key())
	if got.StartedAt.Location() != time.UTC || !got.StartedAt.Equal(p.StartedAt) {
		t.Errorf("StartedAt = %v, want %v in UTC", got.StartedAt, p.StartedAt)
	}
}

func TestOpenLockedByAnotherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	open(t, path)
	// flock locks belong to the open file description, so a second Open in this
	// process conflicts exactly as another process would.
	_, err := store.Open(path, store.Options{Timeout: 100 * time.Millisecond})
	if err == nil {
		t.Fatal("second Open succeeded while the first holds the lock")
	}
	if !strings.Contains(err.Error(), "is locked by another process (is fulcrumd or another fulcrumctl running?)") {
		t.Errorf("error does not explain the lock: %v", err)
	}
	// A read-only open needs a shared lock, which the writer's exclusive lock also blocks.
	if _, err := store.Open(path, store.Options{Timeout: 100 * time.Millisecond, ReadOnly: true}); err == nil {
		t.Error("read-only Open succeeded while a writer holds the lock")
	}
}

func TestReadOnly(t *testing.T) {
	dir := t.TempDir()
	if _, err := store.Open(filepath.Join(dir, "missing.db"), store.Options{ReadOnly: true}); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("read-only open of a missing file: err = %v, want 'does not exist'", err)
	}
	path := filepath.Join(dir, "p.db")
	s, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := sample("b", "w", truth.Train, maxn, 32, 1)
	if err := s.Put(p); err != nil {
		t.Fatal(err)
	}
	s.Close()
	r1, err := store.Open(path, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	r2, err := store.Open(path, store.Options{ReadOnly: true, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("two readers at once: %v", err)
	}
	defer r2.Close()
	if got, err := r2.Get(p.Key()); err != nil || got != p {
		t.Errorf("reader Get = %+v, %v", got, err)
	}
	if err := r1.Check(); err != nil {
		t.Errorf("Check on a reader: %v", err)
	}
	if err := r1.Put(sample("b", "w", truth.Train, m30w, 32, 2)); err == nil {
		t.Error("Put on a read-only store succeeded")
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	s, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), []byte("7"))
	})
	_, err = store.Open(path, store.Options{})
	if err == nil || !strings.Contains(err.Error(), "schema version 7, newer than this build understands (1)") {
		t.Errorf("Open of a v7 file: err = %v", err)
	}
}

func TestRefusesForeignBoltFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket([]byte("etcd"))
		return err
	})
	if _, err := store.Open(path, store.Options{}); err == nil || !strings.Contains(err.Error(), "not a fulcrum profile store") {
		t.Errorf("Open of a foreign bolt file: err = %v", err)
	}
}

// rawUpdate changes the file behind the store's back, as damage or another program would.
func rawUpdate(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o644, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

func TestCheckFindsDamage(t *testing.T) {
	modeBucket := func(tx *bolt.Tx, p store.Profile) *bolt.Bucket {
		return tx.Bucket([]byte("profiles")).Bucket([]byte(p.Board)).Bucket([]byte(p.Workload)).Bucket([]byte(p.Role)).Bucket([]byte(p.Mode.String()))
	}
	batch32 := []byte{0, 0, 0, 0, 0, 0, 0, 32}
	tests := []struct {
		name   string
		damage func(tx *bolt.Tx, p store.Profile) error
		want   string
	}{
		{"value is not JSON", func(tx *bolt.Tx, p store.Profile) error {
			return modeBucket(tx, p).Put(batch32, []byte(`{"board": "agx-orin-64gb", "work`))
		}, "decode profile"},
		{"value has an unknown field", func(tx *bolt.Tx, p store.Profile) error {
			v := modeBucket(tx, p).Get(batch32)
			return modeBucket(tx, p).Put(batch32, append(bytes.TrimSuffix(bytes.Clone(v), []byte("}")), []byte(`,"extra":1}`)...))
		}, "unknown field"},
		{"value disagrees with key", func(tx *bolt.Tx, p store.Profile) error {
			q := p
			q.Batch = 64
			raw, _ := json.Marshal(q)
			return modeBucket(tx, p).Put(batch32, raw)
		}, "the value says"},
		{"invalid value", func(tx *bolt.Tx, p store.Profile) error {
			q := p
			q.TimeMS.Mean = -1
			raw, _ := json.Marshal(q)
			return modeBucket(tx, p).Put(batch32, raw)
		}, "time_ms.mean"},
		{"short batch key", func(tx *bolt.Tx, p store.Profile) error {
			return modeBucket(tx, p).Put([]byte{32}, modeBucket(tx, p).Get(batch32))
		}, "want 8 bytes"},
		{"non-canonical mode key", func(tx *bolt.Tx, p store.Profile) error {
			rb := tx.Bucket([]byte("profiles")).Bucket([]byte(p.Board)).Bucket([]byte(p.Workload)).Bucket([]byte(p.Role))
			_, err := rb.CreateBucket([]byte("012/2201600/1300500000/3199000000"))
			return err
		}, "canonical"},
		{"count out of step", func(tx *bolt.Tx, p store.Profile) error {
			return tx.Bucket([]byte("meta")).Put([]byte("profile_count"), []byte("5"))
		}, "profile_count is 5 but 1 profiles are stored"},
		{"model not JSON", func(tx *bolt.Tx, p store.Profile) error {
			return tx.Bucket([]byte("models")).Put([]byte("gp"), []byte("{oops"))
		}, "models/gp is not valid JSON"},
		{"unknown bucket", func(tx *bolt.Tx, p store.Profile) error {
			_, err := tx.CreateBucket([]byte("junk"))
			return err
		}, `unknown top-level bucket "junk"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.db")
			s, err := store.Open(path, store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			p := sample("agx-orin-64gb", "resnet18", truth.Train, maxn, 32, 1)
			if err := s.Put(p); err != nil {
				t.Fatal(err)
			}
			if err := s.Check(); err != nil {
				t.Fatalf("Check before damage: %v", err)
			}
			s.Close()
			rawUpdate(t, path, func(tx *bolt.Tx) error { return tc.damage(tx, p) })
			s, err = store.Open(path, store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			err = s.Check()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Check = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

func TestModelsAndCampaigns(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "p.db"))
	if _, err := s.GetModel("als/agx"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetModel of nothing: err = %v", err)
	}
	if err := s.PutModel("als/agx", json.RawMessage(`{"kernel":"ard","ls":[1,2]}`)); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetModel("als/agx"); err != nil || string(got) != `{"kernel":"ard","ls":[1,2]}` {
		t.Errorf("GetModel = %s, %v", got, err)
	}
	if err := s.PutModel("x", json.RawMessage(`{not json`)); err == nil {
		t.Error("PutModel accepted invalid JSON")
	}
	if err := s.PutCampaign("c1", json.RawMessage(`{"done":3}`)); err != nil {
		t.Fatal(err)
	}
	all, err := s.Campaigns()
	if err != nil || len(all) != 1 || string(all["c1"]) != `{"done":3}` {
		t.Errorf("Campaigns = %v, %v", all, err)
	}
	if err := s.Check(); err != nil {
		t.Error(err)
	}
}

func TestExportImportRoundTrip(t *testing.T) {
	for _, format := range []store.Format{store.CSV, store.JSON} {
		t.Run(string(format), func(t *testing.T) {
			dir := t.TempDir()
			a := open(t, filepath.Join(dir, "a.db"))
			ps := fill(t, a)
			var first bytes.Buffer
			if err := a.Export(&first, format, store.Filter{}); err != nil {
				t.Fatal(err)
			}
			b := open(t, filepath.Join(dir, "b.db"))
			res, err := b.Import(bytes.NewReader(first.Bytes()), store.ImportOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Added != len(ps) || res.Unchanged != 0 {
				t.Errorf("import result %+v, want %d added", res, len(ps))
			}
			var second bytes.Buffer
			if err := b.Export(&second, format, store.Filter{}); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(first.Bytes(), second.Bytes()) {
				t.Errorf("export → import → export differs:\n%s\n---\n%s", first.String(), second.String())
			}
			for _, p := range ps {
				if got, err := b.Get(p.Key()); err != nil || got != p {
					t.Errorf("imported %s = %+v, %v; want %+v", p.Key(), got, err, p)
				}
			}
			// Importing the same file again changes nothing.
			res, err = b.Import(bytes.NewReader(first.Bytes()), store.ImportOptions{})
			if err != nil || res.Unchanged != len(ps) || res.Added != 0 {
				t.Errorf("re-import: %+v, %v", res, err)
			}
			if err := b.Check(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestExportCSVIsGroundTruth(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "p.db"))
	ps := fill(t, s)
	var buf bytes.Buffer
	if err := s.Export(&buf, store.CSV, store.Filter{Board: "agx-orin-64gb"}); err != nil {
		t.Fatal(err)
	}
	tab, err := truth.Read(&buf)
	if err != nil {
		t.Fatalf("truth.Read of an export: %v", err)
	}
	if len(tab.Rows) != 8 {
		t.Fatalf("got %d rows, want 8", len(tab.Rows))
	}
	for _, p := range ps {
		if p.Board != "agx-orin-64gb" {
			continue
		}
		if row, ok := tab.Lookup(truth.Key{Workload: p.Workload, Role: p.Role, Mode: p.Mode, Batch: p.Batch}); !ok || row != p.Row() {
			t.Errorf("row for %s = %+v, %v; want %+v", p.Key(), row, ok, p.Row())
		}
	}
}

func TestImportPlainGroundTruthAndConflicts(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "p.db"))
	var plain bytes.Buffer
	rows := []truth.Row{
		{Workload: "resnet18", Role: truth.Train, Mode: maxn, Batch: 32, TimeMS: 101.5, PowerMW: 48000},
		{Workload: "resnet18", Role: truth.Train, Mode: m30w, Batch: 32, TimeMS: 180.25, PowerMW: 29000},
	}
	if err := truth.Write(&plain, rows); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(bytes.NewReader(plain.Bytes()), store.ImportOptions{}); err == nil || !strings.Contains(err.Error(), "--board") {
		t.Errorf("plain CSV without a board: err = %v, want a hint about --board", err)
	}
	res, err := s.Import(bytes.NewReader(plain.Bytes()), store.ImportOptions{Board: "agx-orin-64gb"})
	if err != nil || res.Added != 2 {
		t.Fatalf("import = %+v, %v", res, err)
	}
	got, err := s.Get(store.Key{Board: "agx-orin-64gb", Workload: "resnet18", Role: truth.Train, Mode: m30w, Batch: 32})
	if err != nil || got.Row() != rows[1] || got.Source != store.SourceImport || got.Samples != 1 {
		t.Errorf("imported row = %+v, %v", got, err)
	}

	// A conflicting import fails as a whole: the new, non-conflicting row is not stored either.
	rows[0].TimeMS = 99
	extra := truth.Row{Workload: "resnet18", Role: truth.Train, Mode: powermode.Mode{Cores: 4, CPUKHz: 1113600, GPUHz: 408000000, EMCHz: 2133000000}, Batch: 32, TimeMS: 400, PowerMW: 14000}
	plain.Reset()
	if err := truth.Write(&plain, append(rows, extra)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(bytes.NewReader(plain.Bytes()), store.ImportOptions{Board: "agx-orin-64gb"}); err == nil || !strings.Contains(err.Error(), "a different profile is already stored") {
		t.Errorf("conflicting import: err = %v", err)
	}
	if n, _ := s.Count(); n != 2 {
		t.Errorf("after a failed import Count = %d, want 2 (nothing stored)", n)
	}
	res, err = s.Import(bytes.NewReader(plain.Bytes()), store.ImportOptions{Board: "agx-orin-64gb", Overwrite: true})
	if err != nil || res != (store.ImportResult{Added: 1, Unchanged: 1, Replaced: 1}) {
		t.Errorf("overwrite import = %+v, %v", res, err)
	}
	if err := s.Check(); err != nil {
		t.Error(err)
	}
}
