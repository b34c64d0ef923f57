package bundle_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/faketree"
	"github.com/fulcrum-edge/fulcrum/profiler/bundle"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/profiler/store/storetest"
	"github.com/fulcrum-edge/fulcrum/truth"
)

var t0 = time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)

// identity builds a fake tree of the catalog board name at the L4T release and detects it,
// as fulcrumctl does on a real board.
func identity(t *testing.T, name, l4t string) bundle.Identity {
	t.Helper()
	cat, spec := testboard.Catalog(t), testboard.Spec(t, name)
	tr, err := faketree.Build(t.TempDir(), spec, faketree.Options{L4T: l4t})
	if err != nil {
		t.Fatal(err)
	}
	_, info, err := powermode.Detect(tr.Root(), cat)
	if err != nil {
		t.Fatal(err)
	}
	id := bundle.IdentityOf(info)
	if id.Board != name || id.L4T != l4t || id.Module == "" {
		t.Fatalf("detected %+v, want board %s, L4T %s and a module", id, name, l4t)
	}
	return id
}

func openStore(t *testing.T, path string) *store.Store {
	t.Helper()
	return storetest.OpenAt(t, path, store.Options{})
}

// profile is a valid profile of board at a mode index i.
func profile(board, workload string, role truth.Role, i, batch int, timeMS float64) store.Profile {
	return store.Profile{
		Board: board, Workload: workload, Role: role,
		Mode:  powermode.Mode{Cores: 4 + i, CPUKHz: 1113600, GPUHz: 612000000, EMCHz: 2133000000},
		Batch: batch, TimeMS: store.TimeStats{Mean: timeMS, P50: timeMS, P95: timeMS * 1.1, Stddev: 0.5},
		PowerMW: store.PowerStats{Mean: 15000 + float64(i)*1000, Stddev: 120}, Samples: 20, PowerSamples: 40,
		Warmup: 2, StartedAt: t0.Add(time.Duration(i) * time.Minute), FinishedAt: t0.Add(time.Duration(i)*time.Minute + 30*time.Second),
		RSE: 0.01, Source: store.SourceTegra,
	}
}

// source makes a store with profiles and models of agx-orin-64gb and of orin-nano-8gb.
func source(t *testing.T) (path string, orin []store.Profile) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "src.db")
	s := openStore(t, path)
	for i := range 3 {
		orin = append(orin,
			profile("agx-orin-64gb", "resnet18", truth.Train, i, 32, 100+float64(i)),
			profile("agx-orin-64gb", "mobilenet", truth.Infer, i, 8, 12.25+float64(i)))
	}
	for _, p := range append(orin, profile("orin-nano-8gb", "resnet18", truth.Train, 0, 32, 300)) {
		if err := s.Put(p); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range map[string]string{
		"agx-orin-64gb/als/resnet18": `{"gp": [1, 2, 3], "pareto": ["4/1113600/612000000/2133000000"]}`,
		"agx-orin-64gb/gmd":          `{"x": 1}`,
		"orin-nano-8gb/als/resnet18": `{"gp": [9]}`,
		"unscoped-model":             `{"y": 2}`,
	} {
		if err := s.PutModel(k, json.RawMessage(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path, orin
}

// export reads the source store the way fulcrumctl does and writes the bundle to a file.
func export(t *testing.T, dbPath string, id bundle.Identity, gz bool) string {
	t.Helper()
	models, err := bundle.ReadModels(dbPath, bundle.ModelPrefix(id.Board), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(dbPath, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b, err := bundle.Export(s, id, models, t0)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "orin.json")
	if gz {
		out += ".gz"
	}
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Write(f, gz); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

func readFile(t *testing.T, path string) *bundle.Bundle {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := bundle.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// assertEmpty checks that a failed import wrote nothing.
func assertEmpty(t *testing.T, s *store.Store) {
	t.Helper()
	if n, err := s.Count(); err != nil || n != 0 {
		t.Fatalf("store has %d profiles (%v) after a refused import, want 0", n, err)
	}
	for _, k := range []string{"agx-orin-64gb/als/resnet18", "agx-orin-64gb/gmd"} {
		if _, err := s.GetModel(k); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("model %s present after a refused import: %v", k, err)
		}
	}
}

// Export on one AGX Orin, import on another of the same model and release: the target
// store holds exactly the board's profiles and board-scoped models; a second import
// changes nothing.
func TestRoundTrip(t *testing.T) {
	for _, gz := range []bool{true, false} {
		src, orin := source(t)
		id := identity(t, "agx-orin-64gb", "R36.4.3")
		file := export(t, src, id, gz)
		b := readFile(t, file)
		if b.Identity != id || len(b.Profiles) != len(orin) || len(b.Models) != 2 || !strings.HasPrefix(b.Checksum, "sha256:") {
			t.Fatalf("bundle: identity %+v, %d profiles, %d models, checksum %q", b.Identity, len(b.Profiles), len(b.Models), b.Checksum)
		}

		dst := openStore(t, filepath.Join(t.TempDir(), "dst.db"))
		target := identity(t, "agx-orin-64gb", "R36.4.3")
		res, err := bundle.Import(dst, b, target, bundle.ImportOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Profiles.Added != len(orin) || res.Models.Added != 2 || len(res.Forced) != 0 {
			t.Fatalf("import result %+v", res)
		}
		got, err := dst.List(store.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		var gotJSON, wantJSON bytes.Buffer
		_ = store.WriteProfiles(&gotJSON, store.JSON, got)
		want, _ := func() ([]store.Profile, error) {
			s, err := store.Open(src, store.Options{ReadOnly: true})
			if err != nil {
				return nil, err
			}
			defer s.Close()
			return s.List(store.Filter{Board: "agx-orin-64gb"})
		}()
		_ = store.WriteProfiles(&wantJSON, store.JSON, want)
		if gotJSON.String() != wantJSON.String() {
			t.Fatalf("imported profiles differ from the source's:\n%s\nwant\n%s", gotJSON.String(), wantJSON.String())
		}
		m, err := dst.GetModel("agx-orin-64gb/als/resnet18")
		if err != nil || !strings.Contains(string(m), `"pareto"`) {
			t.Fatalf("model als/resnet18: %s, %v", m, err)
		}
		for _, k := range []string{"orin-nano-8gb/als/resnet18", "unscoped-model"} {
			if _, err := dst.GetModel(k); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("model %s of another board travelled: %v", k, err)
			}
		}
		again, err := bundle.Import(dst, b, target, bundle.ImportOptions{})
		if err != nil || again.Profiles.Unchanged != len(orin) || again.Profiles.Added != 0 || again.Models.Unchanged != 2 {
			t.Fatalf("second import: %+v, %v", again, err)
		}
	}
}

// A different L4T release or board model is refused with a clear message and nothing is
// written; --force imports and reports what it overrode.
func TestIdentityMismatch(t *testing.T) {
	src, orin := source(t)
	b := readFile(t, export(t, src, identity(t, "agx-orin-64gb", "R36.4.3"), true))
	cases := []struct {
		name, board, l4t string
		fields           []string
		msg              []string
	}{
		{"other L4T", "agx-orin-64gb", "R35.4.1", []string{"l4t"}, []string{"L4T release: bundle R36.4.3, this board R35.4.1", "--force"}},
		{"other board", "orin-nano-8gb", "R36.4.3", []string{"board"}, []string{"board model: bundle agx-orin-64gb", "this board orin-nano-8gb", "--force"}},
		{"both", "orin-nx-16gb", "R35.4.1", []string{"board", "l4t"}, []string{"board model", "L4T release"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			target := identity(t, c.board, c.l4t)
			dst := openStore(t, filepath.Join(t.TempDir(), "dst.db"))
			_, err := bundle.Import(dst, b, target, bundle.ImportOptions{Overwrite: true})
			var me *bundle.MismatchError
			if !errors.As(err, &me) || strings.Join(me.Fields, ",") != strings.Join(c.fields, ",") {
				t.Fatalf("import: %v, want a mismatch of %v", err, c.fields)
			}
			for _, s := range append(c.msg, "nothing was imported") {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("message %q lacks %q", err, s)
				}
			}
			assertEmpty(t, dst)

			res, err := bundle.Import(dst, b, target, bundle.ImportOptions{Force: true})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(res.Forced, ",") != strings.Join(c.fields, ",") || res.Profiles.Added != len(orin) {
				t.Fatalf("forced import: %+v", res)
			}
		})
	}
}

// A stored profile or model that differs from the bundle's refuses the import (nothing
// written, the models included) unless Overwrite.
func TestConflicts(t *testing.T) {
	src, orin := source(t)
	id := identity(t, "agx-orin-64gb", "R36.4.3")
	b := readFile(t, export(t, src, id, false))

	t.Run("profile", func(t *testing.T) {
		dst := openStore(t, filepath.Join(t.TempDir(), "dst.db"))
		local := orin[3]
		local.TimeMS.Mean = 99
		local.TimeMS.P50 = 99
		if err := dst.Put(local); err != nil {
			t.Fatal(err)
		}
		_, err := bundle.Import(dst, b, id, bundle.ImportOptions{})
		if err == nil || !strings.Contains(err.Error(), "--overwrite") || !strings.Contains(err.Error(), "nothing was stored") {
			t.Fatalf("import over a different profile: %v", err)
		}
		if n, _ := dst.Count(); n != 1 {
			t.Fatalf("store has %d profiles after the refused import, want the 1 local one", n)
		}
		if _, err := dst.GetModel("agx-orin-64gb/gmd"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a model was written by the refused import: %v", err)
		}
		res, err := bundle.Import(dst, b, id, bundle.ImportOptions{Overwrite: true})
		if err != nil || res.Profiles.Replaced != 1 || res.Profiles.Added != len(orin)-1 {
			t.Fatalf("overwrite: %+v, %v", res, err)
		}
		if p, _ := dst.Get(local.Key()); p.TimeMS.Mean != orin[3].TimeMS.Mean {
			t.Fatalf("overwrite kept the local profile: %+v", p.TimeMS)
		}
	})
	t.Run("model", func(t *testing.T) {
		dst := openStore(t, filepath.Join(t.TempDir(), "dst.db"))
		if err := dst.PutModel("agx-orin-64gb/gmd", json.RawMessage(`{"x": 2}`)); err != nil {
			t.Fatal(err)
		}
		_, err := bundle.Import(dst, b, id, bundle.ImportOptions{})
		if err == nil || !strings.Contains(err.Error(), "model agx-orin-64gb/gmd") {
			t.Fatalf("import over a different model: %v", err)
		}
		if n, _ := dst.Count(); n != 0 {
			t.Fatalf("profiles written by an import refused for a model conflict: %d", n)
		}
		res, err := bundle.Import(dst, b, id, bundle.ImportOptions{Overwrite: true})
		if err != nil || res.Models.Replaced != 1 || res.Models.Added != 1 {
			t.Fatalf("overwrite: %+v, %v", res, err)
		}
		if m, _ := dst.GetModel("agx-orin-64gb/gmd"); string(m) != `{"x":1}` {
			t.Fatalf("model after overwrite: %s", m)
		}
	})
}

// Any change to the file after export is caught by the checksum or the decoder.
func TestDamagedFiles(t *testing.T) {
	src, _ := source(t)
	id := identity(t, "agx-orin-64gb", "R36.4.3")
	plain, err := os.ReadFile(export(t, src, id, false))
	if err != nil {
		t.Fatal(err)
	}
	gz, err := os.ReadFile(export(t, src, id, true))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"edited time", bytes.Replace(plain, []byte(`"mean": 101`), []byte(`"mean": 91`), 1), "checksum mismatch"},
		{"edited L4T", bytes.Replace(plain, []byte(`"l4t": "R36.4.3"`), []byte(`"l4t": "R35.4.1"`), 1), "checksum mismatch"},
		{"edited model", bytes.Replace(plain, []byte(`"x": 1`), []byte(`"x": 7`), 1), "checksum mismatch"},
		{"truncated", plain[:len(plain)/2], "decode"},
		{"truncated gzip", gz[:len(gz)-20], "decode"},
		{"unknown field", bytes.Replace(plain, []byte(`"format":`), []byte(`"extra": 1, "format":`), 1), "unknown field"},
		{"newer version", bytes.Replace(plain, []byte(`"format_version": 1`), []byte(`"format_version": 2`), 1), "format_version 2"},
		{"not a bundle", []byte(`{"schema_version": 1, "profiles": []}`), "decode"},
	}
	for _, c := range cases {
		if bytes.Equal(c.data, plain) {
			t.Fatalf("%s: the edit did not apply", c.name)
		}
		_, err := bundle.Read(bytes.NewReader(c.data))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	if _, err := bundle.Read(bytes.NewReader(plain)); err != nil {
		t.Fatalf("the unedited file: %v", err)
	}
}

// Exporting a board the store has no profile of says which boards it has.
func TestExportNothing(t *testing.T) {
	src, _ := source(t)
	s, err := store.Open(src, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = bundle.Export(s, identity(t, "orin-nx-16gb", "R36.4.3"), nil, t0)
	if err == nil || !strings.Contains(err.Error(), "no profile of board orin-nx-16gb") || !strings.Contains(err.Error(), "agx-orin-64gb, orin-nano-8gb") {
		t.Fatalf("export of an unprofiled board: %v", err)
	}
}
