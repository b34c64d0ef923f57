package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode/faketree"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/profiler/store/storetest"
)

func runBundle(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append([]string{"bundle"}, args...))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func orinTree(t *testing.T, l4t string) string {
	t.Helper()
	tr, err := faketree.Build(t.TempDir(), testboard.Spec(t, testboard.AGXOrin), faketree.Options{L4T: l4t})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Root()
}

// export on one (fake) AGX Orin, inspect, import on a twin; a board on another L4T
// release refuses with nothing written until --force.
func TestBundleCommands(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src.db")
	seeded := seedStore(t, src)
	func() {
		s := storetest.OpenAt(t, src, store.Options{})
		defer s.Close()
		if err := s.PutModel("agx-orin-64gb/als/mobilenetv3-infer", json.RawMessage(`{"pareto":[1,2]}`)); err != nil {
			t.Fatal(err)
		}
	}()
	file := filepath.Join(dir, "orin.json.gz")
	_, stderr, err := runBundle(t, "export", "--db", src, "--root", orinTree(t, "R36.4.3"), "--out", file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "board agx-orin-64gb") || !strings.Contains(stderr, "L4T R36.4.3") || !strings.Contains(stderr, "4 profiles, 1 models") {
		t.Fatalf("export summary: %s", stderr)
	}
	out, _, err := runBundle(t, "inspect", file)
	if err != nil || !strings.Contains(out, "checksum ok") || !strings.Contains(out, "agx-orin-64gb/als/mobilenetv3-infer") || !strings.Contains(out, "mobilenetv3-infer infer") {
		t.Fatalf("inspect: %v\n%s", err, out)
	}

	// Another release: refused, nothing written (the store file is not even created),
	// then forced.
	dst := filepath.Join(dir, "dst.db")
	old := orinTree(t, "R35.4.1")
	_, _, err = runBundle(t, "import", file, "--db", dst, "--root", old)
	if err == nil || !strings.Contains(err.Error(), "L4T release: bundle R36.4.3, this board R35.4.1") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("import on R35.4.1: %v", err)
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatalf("refused import created the store: %v", err)
	}
	out, _, err = runBundle(t, "import", file, "--db", dst, "--root", old, "--force")
	if err != nil || !strings.Contains(out, "warning: imported despite a different l4t") || !strings.Contains(out, "profiles 4 added") {
		t.Fatalf("forced import: %v\n%s", err, out)
	}

	// A twin on the same release: imported; again: unchanged.
	twin := filepath.Join(dir, "twin.db")
	root := orinTree(t, "R36.4.3")
	out, _, err = runBundle(t, "import", file, "--db", twin, "--root", root)
	if err != nil || !strings.Contains(out, "profiles 4 added, 0 unchanged, 0 replaced; models 1 added") {
		t.Fatalf("import on a twin: %v\n%s", err, out)
	}
	out, _, err = runBundle(t, "import", file, "--db", twin, "--root", root, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Profiles store.ImportResult `json:"profiles"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Profiles.Unchanged != len(seeded) {
		t.Fatalf("second import --json: %v\n%s", err, out)
	}

	// Exporting away from the board needs the release.
	if _, _, err := runBundle(t, "export", "--db", src, "--board", "agx-orin-64gb", "--out", filepath.Join(dir, "x.json")); err == nil || !strings.Contains(err.Error(), "needs --l4t") {
		t.Fatalf("export --board without --l4t: %v", err)
	}
	plain := filepath.Join(dir, "x.json")
	if _, _, err := runBundle(t, "export", "--db", src, "--board", "agx-orin-64gb", "--l4t", "R36.4.3", "--out", plain); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(plain)
	if err != nil || !bytes.HasPrefix(raw, []byte("{")) {
		t.Fatalf("a .json bundle should be plain JSON: %v %q", err, raw[:min(len(raw), 20)])
	}
}
