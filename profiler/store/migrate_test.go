package store

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/truth"
	bolt "go.etcd.io/bbolt"
)

// A version-2 schema used only here: it adds a meta key and rewrites every profile
// (as a real migration that changes the value format would), all in one transaction.
func schemaV2(fail bool) schema {
	ms := append([]migration{}, currentSchema.migrations...)
	ms = append(ms, migration{from: 1, name: "test: stamp profiles", apply: func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketMeta).Put([]byte("migrated"), []byte("yes")); err != nil {
			return err
		}
		var keys []Key
		if err := walk(tx, Filter{}, func(k Key, _ []byte) error { keys = append(keys, k); return nil }); err != nil {
			return err
		}
		for _, k := range keys {
			b := modeBucket(tx, k)
			p, err := decodeProfile(b.Get(k.key()))
			if err != nil {
				return err
			}
			p.Source = SourceImport
			raw, _ := encodeProfile(p)
			if err := b.Put(k.key(), raw); err != nil {
				return err
			}
		}
		if fail {
			return errors.New("disk on fire")
		}
		return nil
	}})
	return schema{version: 2, migrations: ms}
}

func TestMigration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	p := Profile{
		Board: "agx-orin-64gb", Workload: "resnet18", Role: truth.Train,
		Mode:  powermode.Mode{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000},
		Batch: 32, TimeMS: TimeStats{Mean: 180, P50: 179, P95: 185, Stddev: 2},
		PowerMW: PowerStats{Mean: 29000, Stddev: 300}, Samples: 8, PowerSamples: 14, Warmup: 2,
		StartedAt: start, FinishedAt: start.Add(2 * time.Second), RSE: 0.01, Source: SourceSim,
	}
	if err := s.Put(p); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.Version(); v != 1 {
		t.Fatalf("new store version = %d, want 1", v)
	}
	s.Close()

	// A migration that fails part way leaves the file exactly as it was.
	if _, err := openSchema(path, Options{}, schemaV2(true)); err == nil || !strings.Contains(err.Error(), "disk on fire") || !strings.Contains(err.Error(), "the file is unchanged") {
		t.Fatalf("failing migration: err = %v", err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatalf("reopen at v1 after a failed migration: %v", err)
	}
	if got, _ := s.Get(p.Key()); got.Source != SourceSim {
		t.Errorf("failed migration changed a profile: source = %q", got.Source)
	}
	s.Close()

	// Read-only opens cannot migrate and say so.
	if _, err := openSchema(path, Options{ReadOnly: true}, schemaV2(false)); err == nil || !strings.Contains(err.Error(), "needs migrating") {
		t.Errorf("read-only open of an old file: err = %v", err)
	}

	s, err = openSchema(path, Options{}, schemaV2(false))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, _ := s.Version(); v != 2 {
		t.Errorf("version after migration = %d, want 2", v)
	}
	if got, _ := s.Get(p.Key()); got.Source != SourceImport {
		t.Errorf("migration did not rewrite the profile: source = %q", got.Source)
	}
	_ = s.db.View(func(tx *bolt.Tx) error {
		if string(tx.Bucket(bucketMeta).Get([]byte("migrated"))) != "yes" {
			t.Error("migration's meta key missing")
		}
		return nil
	})
}
