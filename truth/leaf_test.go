package truth

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestLeaf keeps truth a leaf: the board simulator, the profiler and the planner all
// import it, so a project import beyond powermode's vocabulary (Mode — in powermode/knobs since the wire split —, Space, and the
// embedded catalog powermode reads) would tie those layers together again (issue 14:
// powermode/sim had to import the profiler's folder to get Row and Role).
func TestLeaf(t *testing.T) {
	const module = "github.com/fulcrum-edge/fulcrum"
	allowed := []string{module + "/truth", module + "/powermode", module + "/powermode/knobs", module + "/configs"}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if (p == module || strings.HasPrefix(p, module+"/")) && !slices.Contains(allowed, p) {
			t.Errorf("truth depends on %s: it may use only %v (move the shared type down, not truth up)", p, allowed)
		}
	}
}
