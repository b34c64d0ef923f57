package store_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
	bolt "go.etcd.io/bbolt"
)

// oldProfileJSON is a training profile as the code before issue 32's micro-batch rows
// wrote it: no micro_batch field, under an 8-byte batch key.
const oldProfileJSON = `{"board":"agx-orin-64gb","workload":"resnet18","role":"train","mode":{"cores":12,"cpu_khz":2201600,"gpu_hz":1300500000,"emc_hz":3199000000},` +
	`"batch":32,"time_ms":{"mean":101.5,"p50":101,"p95":104,"stddev":1.5},"power_mw":{"mean":45000,"stddev":0},"samples":5,"power_samples":9,"warmup":1,` +
	`"started_at":"2026-11-22T03:00:00Z","finished_at":"2026-11-22T03:00:01Z","rse":0.01,"source":"live"}`

// writeOldStore writes, with bbolt alone, a store in the layout the code before micro-batch
// rows wrote: schema version 1, one training profile at batch 32 under an 8-byte key.
func writeOldStore(t *testing.T, path string) {
	t.Helper()
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucket([]byte("meta"))
		if err != nil {
			return err
		}
		for _, b := range []string{"models", "campaigns"} {
			if _, err := tx.CreateBucket([]byte(b)); err != nil {
				return err
			}
		}
		if err := meta.Put([]byte("schema_version"), []byte("1")); err != nil {
			return err
		}
		if err := meta.Put([]byte("profile_count"), []byte("1")); err != nil {
			return err
		}
		b, err := tx.CreateBucket([]byte("profiles"))
		if err != nil {
			return err
		}
		for _, name := range []string{"agx-orin-64gb", "resnet18", "train", maxn.String()} {
			if b, err = b.CreateBucket([]byte(name)); err != nil {
				return err
			}
		}
		return b.Put([]byte{0, 0, 0, 0, 0, 0, 0, 32}, []byte(oldProfileJSON))
	})
}

// Issue 32: a store written before micro-batch rows existed reads as before (its
// profiles are whole minibatches), takes micro-batch rows beside them, and checks clean;
// each micro-batch row is its own profile, found, listed and deleted by its key.
func TestOldStoreTakesMicroBatchRows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	writeOldStore(t, path)
	s := open(t, path) // storetest checks the file when the test ends
	if err := s.Check(); err != nil {
		t.Fatalf("an old store: %v", err)
	}
	whole := store.Key{Board: "agx-orin-64gb", Workload: "resnet18", Role: truth.Train, Mode: maxn, Batch: 32}
	old, err := s.Get(whole)
	if err != nil || old.MicroBatch != 0 || old.TimeMS.Mean != 101.5 {
		t.Fatalf("old profile: %+v, %v", old, err)
	}
	for i, mb := range []int{16, 8} {
		p := sample("agx-orin-64gb", "resnet18", truth.Train, maxn, 32, 10+i)
		p.MicroBatch = mb
		if err := s.Put(p); err != nil {
			t.Fatalf("put micro-batch %d: %v", mb, err)
		}
	}
	ps, err := s.List(store.Filter{Workload: "resnet18"})
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, p := range ps {
		got = append(got, p.MicroBatch)
	}
	if len(ps) != 3 || got[0] != 0 || got[1] != 8 || got[2] != 16 {
		t.Fatalf("listed micro-batches %v (%d profiles): want the minibatch, then 8 and 16", got, len(ps))
	}
	if n, _ := s.Count(); n != 3 {
		t.Errorf("count %d, want 3", n)
	}
	if p, err := s.Get(store.Key{Board: whole.Board, Workload: whole.Workload, Role: whole.Role, Mode: maxn, Batch: 32, MicroBatch: 8}); err != nil || p.MicroBatch != 8 || p.Row().MicroBatch != 8 {
		t.Errorf("micro-batch 8: %+v, %v", p, err)
	}
	if err := s.Check(); err != nil {
		t.Fatalf("an old store with micro-batch rows: %v", err)
	}
	// The old whole-minibatch profile is still the same bytes' value.
	if again, err := s.Get(whole); err != nil || again != old {
		t.Errorf("old profile after micro-batch rows: %+v, %v", again, err)
	}
	if err := s.Delete(store.Key{Board: whole.Board, Workload: whole.Workload, Role: whole.Role, Mode: maxn, Batch: 32, MicroBatch: 16}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.Has(whole); !ok {
		t.Error("deleting a micro-batch row lost the minibatch's")
	}
}

// A micro-batch row must be a training turn of a divisor of its minibatch.
func TestMicroBatchRowsValidated(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "p.db"))
	for _, c := range []struct {
		role        truth.Role
		batch, mb   int
		errContains string
	}{
		{truth.Infer, 8, 4, "only training"},
		{truth.Train, 32, 12, "not a divisor"},
		{truth.Train, 32, 32, "not a divisor"},
		{truth.Train, 32, -1, "micro-batch -1"},
	} {
		p := sample("agx-orin-64gb", "w", c.role, maxn, c.batch, 1)
		p.MicroBatch = c.mb
		if err := s.Put(p); err == nil || !strings.Contains(err.Error(), c.errContains) {
			t.Errorf("%s batch %d micro %d: err = %v, want %q", c.role, c.batch, c.mb, err, c.errContains)
		}
	}
}

// Micro-batch rows round-trip through both export formats; the CSV is a ground-truth
// table with the micro_batch column, which a store without them does not write.
func TestExportImportMicroBatchRows(t *testing.T) {
	for _, format := range []store.Format{store.CSV, store.JSON} {
		t.Run(string(format), func(t *testing.T) {
			dir := t.TempDir()
			a := open(t, filepath.Join(dir, "a.db"))
			ps := fill(t, a)
			var plain bytes.Buffer
			if err := a.Export(&plain, format, store.Filter{}); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(plain.String(), "micro_batch") {
				t.Fatalf("a store without micro-batch rows exported micro_batch:\n%s", plain.String())
			}
			for i, mb := range []int{4, 16} {
				p := sample("agx-orin-64gb", "resnet18", truth.Train, m30w, 32, 40+i)
				p.MicroBatch = mb
				if err := a.Put(p); err != nil {
					t.Fatal(err)
				}
				ps = append(ps, p)
			}
			var first bytes.Buffer
			if err := a.Export(&first, format, store.Filter{}); err != nil {
				t.Fatal(err)
			}
			b := open(t, filepath.Join(dir, "b.db"))
			if res, err := b.Import(bytes.NewReader(first.Bytes()), store.ImportOptions{}); err != nil || res.Added != len(ps) {
				t.Fatalf("import: %+v, %v", res, err)
			}
			for _, p := range ps {
				if got, err := b.Get(p.Key()); err != nil || got != p {
					t.Errorf("imported %s = %+v, %v; want %+v", p.Key(), got, err, p)
				}
			}
			var second bytes.Buffer
			if err := b.Export(&second, format, store.Filter{}); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(first.Bytes(), second.Bytes()) {
				t.Errorf("export → import → export differs")
			}
			if format != store.CSV {
				return
			}
			var agx bytes.Buffer // one board: a ground-truth table has one row per key
			if err := a.Export(&agx, format, store.Filter{Board: "agx-orin-64gb"}); err != nil {
				t.Fatal(err)
			}
			tab, err := truth.Read(&agx)
			if err != nil {
				t.Fatalf("truth.Read of an export with micro-batch rows: %v", err)
			}
			if got := tab.MicroBatches("resnet18", 32); len(got) != 2 || got[0] != 4 || got[1] != 16 {
				t.Errorf("ground truth's micro-batches %v, want [4 16]", got)
			}
		})
	}
}

// An old build's reader sees a 16-byte key it does not know: this build's Check still
// reports keys that are neither form.
func TestCheckReportsBadMicroKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	writeOldStore(t, path)
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("profiles")).Bucket([]byte("agx-orin-64gb")).Bucket([]byte("resnet18")).Bucket([]byte("train")).Bucket([]byte(maxn.String()))
		if b == nil {
			return errors.New("no mode bucket")
		}
		// micro-batch 32 of a minibatch of 32: out of range.
		return b.Put([]byte{0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 0, 0, 0, 0, 32}, []byte(oldProfileJSON))
	})
	s, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Check(); err == nil || !strings.Contains(err.Error(), "micro-batch 32 out of range") {
		t.Errorf("check of a bad micro-batch key: %v", err)
	}
}
