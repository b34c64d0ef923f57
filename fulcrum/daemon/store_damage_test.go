package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// writeStore writes a sound profile store of about 4 MB at path: 40 profiles and 64
// model blobs of 64 KB (overflow pages), every page in use, so damage anywhere in the
// file lands on data.
func writeStore(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
	for i := range 40 {
		m := powermode.Mode{Cores: 4 + i%8, CPUKHz: 1113600, GPUHz: 408000000, EMCHz: 2133000000}
		p := store.Profile{Board: "agx-orin-64gb", Workload: "resnet18", Role: truth.Infer, Mode: m, Batch: 1 + i,
			TimeMS: store.TimeStats{Mean: 10, P50: 10, P95: 11, Stddev: 0.5}, PowerMW: store.PowerStats{Mean: 20000, Stddev: 100},
			Samples: 10, PowerSamples: 10, StartedAt: start, FinishedAt: start.Add(time.Second), RSE: 0.01, Source: store.SourceSim}
		if err := s.Put(p); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 64 {
		blob, _ := json.Marshal(map[string]string{"pad": strings.Repeat(fmt.Sprintf("%02d", i), 32<<10)})
		if err := s.PutModel(fmt.Sprintf("model-%02d", i), blob); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func overwrite(t *testing.T, path string, b []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func randomBytes(n int) []byte {
	r := rand.New(rand.NewPCG(26, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// startDaemon opens and runs a daemon until the test ends, and returns it with a
// client of its control socket.
func startDaemon(t *testing.T, o Options) (*Daemon, *client.Client) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d, err := Open(ctx, o)
	if err != nil {
		cancel()
		t.Fatalf("daemon Open: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	cl := client.New(filepath.Join(o.Server.RuntimeDir, api.SocketName))
	t.Cleanup(func() {
		cl.Close()
		cancel()
		<-done
	})
	return d, cl
}

// fulcrumd on a profile store damaged on disk (cut short, 256 KB of random bytes in the
// middle, a meta page zeroed) does not crash: it moves the file aside, byte for byte,
// starts on a fresh store, says so in an event and in its status, and serves.
func TestDaemonMovesDamagedStoreAside(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string, size int64)
	}{
		{"truncated to half", func(t *testing.T, path string, size int64) {
			if err := os.Truncate(path, size/2); err != nil {
				t.Fatal(err)
			}
		}},
		{"256 KB of random bytes mid-file", func(t *testing.T, path string, size int64) {
			overwrite(t, path, randomBytes(256<<10), size/2)
		}},
		{"meta page 0 zeroed", func(t *testing.T, path string, size int64) {
			overwrite(t, path, make([]byte, 4096), 0)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			log := slog.New(slog.DiscardHandler)
			o, _, _ := openReliabilityBoard(t, dir, log)
			db := filepath.Join(o.StateDir, "profiles.db")
			writeStore(t, db)
			fi, err := os.Stat(db)
			if err != nil {
				t.Fatal(err)
			}
			tc.damage(t, db, fi.Size())
			damaged, err := os.ReadFile(db)
			if err != nil {
				t.Fatal(err)
			}

			d, cl := startDaemon(t, o)
			ctx := context.Background()
			asides, _ := filepath.Glob(db + ".damaged-*")
			if len(asides) != 1 {
				t.Fatalf("damaged files kept: %v; want one profiles.db.damaged-<time>", asides)
			}
			if kept, err := os.ReadFile(asides[0]); err != nil || !bytes.Equal(kept, damaged) {
				t.Fatalf("the file moved aside is not the damaged file byte for byte (%v)", err)
			}
			if n, err := d.Store.Count(); err != nil || n != 0 {
				t.Fatalf("the fresh store: %d profiles, %v", n, err)
			}
			if err := d.Store.Check(); err != nil {
				t.Fatalf("the fresh store: %v", err)
			}
			st, err := cl.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Notices) != 1 || !strings.Contains(st.Notices[0], asides[0]) || !strings.Contains(st.Notices[0], "fresh") {
				t.Fatalf("status notices %q; want one naming %s and the fresh store", st.Notices, asides[0])
			}
			evs, err := cl.Events(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, e := range evs.Events {
				found = found || (e.Kind == string(control.KindStore) && strings.Contains(e.Message, asides[0]))
			}
			if !found {
				t.Fatalf("no %q event naming %s in %+v", control.KindStore, asides[0], evs.Events)
			}
			if ps, err := cl.Profiles(ctx, api.ProfileFilter{}); err != nil || len(ps) != 0 {
				t.Fatalf("GET /v1/profiles on the fresh store: %d, %v", len(ps), err)
			}
			t.Logf("notice: %s", st.Notices[0])
		})
	}
}

// A store cut short under a running fulcrumd (its pages now lie past the end of the
// file, which faults on access): the control API answers GET /v1/profiles with an
// error saying the store is damaged instead of dropping the connection, and fulcrumd
// keeps serving.
func TestDaemonStoreDamagedWhileRunning(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	o, _, _ := openReliabilityBoard(t, dir, log)
	db := filepath.Join(o.StateDir, "profiles.db")
	writeStore(t, db)
	_, cl := startDaemon(t, o)
	ctx := context.Background()
	if ps, err := cl.Profiles(ctx, api.ProfileFilter{}); err != nil || len(ps) != 40 {
		t.Fatalf("GET /v1/profiles before the damage: %d, %v", len(ps), err)
	}
	if err := os.Truncate(db, 8192); err != nil { // the two meta pages stay
		t.Fatal(err)
	}
	_, err := cl.Profiles(ctx, api.ProfileFilter{})
	var ae *api.Error
	if !errors.As(err, &ae) || !strings.Contains(ae.Message, "damaged") {
		t.Fatalf("GET /v1/profiles on a store cut short: %v; want an API error saying the store is damaged", err)
	}
	t.Logf("GET /v1/profiles: %d %v", ae.Status, err)
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatalf("status after the store failed: %v", err)
	}
	if len(st.Notices) != 1 || !strings.Contains(st.Notices[0], "restart fulcrumd") {
		t.Fatalf("status notices %q; want one saying the store failed and to restart", st.Notices)
	}
}

// Moving a damaged store aside loses no operator setting: budgets set through the API
// live in the state directory's settings file, apart from the store, and the restart on
// a fresh store still runs with them.
func TestDamagedStoreKeepsOperatorSettings(t *testing.T) {
	dir := t.TempDir()
	o, _, _ := openReliabilityBoard(t, dir, slog.New(slog.DiscardHandler))
	db := filepath.Join(o.StateDir, "profiles.db")
	writeStore(t, db)
	ctx, cancel := context.WithCancel(context.Background())
	d, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	cl := client.New(filepath.Join(o.Server.RuntimeDir, api.SocketName))
	lat := 80.0
	if _, err := cl.SetBudgets(ctx, api.BudgetsUpdate{LatencyMS: &lat}); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	cancel()
	<-done

	if err := os.Truncate(db, 8192); err != nil {
		t.Fatal(err)
	}
	_, cl2 := startDaemon(t, o)
	st, err := cl2.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Notices) != 1 {
		t.Fatalf("notices %q; want the damaged store's", st.Notices)
	}
	if st.Budgets.LatencyMS != lat {
		t.Fatalf("latency budget %v ms after the store was moved aside; want the operator's %v", st.Budgets.LatencyMS, lat)
	}
}
