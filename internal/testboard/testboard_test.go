package testboard

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fulcrum-edge/fulcrum/powermode/sim"
)

func TestHelpers(t *testing.T) {
	spec := Spec(t, AGXOrin)
	if spec.Name != AGXOrin {
		t.Fatalf("Spec(%q).Name = %q", AGXOrin, spec.Name)
	}
	if Space(t, spec).Size() == 0 {
		t.Error("empty mode space")
	}
	if len(Workloads(t)) == 0 {
		t.Error("no workloads")
	}
	root := filepath.Join(t.TempDir(), "board")
	b := Sim(t, root, spec, sim.Options{})
	if b.Root() != root {
		t.Errorf("Root() = %s, want %s", b.Root(), root)
	}
	if _, err := os.Stat(filepath.Join(root, sim.ActivityDir)); err != nil {
		t.Error(err)
	}
	Start(t, b)
}
