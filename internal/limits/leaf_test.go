package limits

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLeaf: limits and internal/units import no project package but limits, so that
// reading a budget a person typed never links the planner (or what it imports).
func TestLeaf(t *testing.T) {
	for _, pkg := range []string{".", "../units"} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "github.com/fulcrum-edge/fulcrum/") && dep != "github.com/fulcrum-edge/fulcrum/internal/limits" && dep != "github.com/fulcrum-edge/fulcrum/internal/units" {
				t.Errorf("%s depends on %s: keep it a leaf", pkg, dep)
			}
		}
	}
}
