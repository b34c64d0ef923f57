package buildinfo

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStampedVersion builds fulcrumctl with the link-time stamp make uses and checks
// that --version reports it; without the stamp a test binary says (devel).
func TestStampedVersion(t *testing.T) {
	if got := Version(); got != "(devel)" {
		t.Errorf("unstamped Version() = %q, want (devel)", got)
	}
	if testing.Short() {
		t.Skip("builds fulcrumctl")
	}
	bin := filepath.Join(t.TempDir(), "fulcrumctl")
	build := exec.Command("go", "build", "-o", bin, "-ldflags", "-X github.com/fulcrum-edge/fulcrum/internal/buildinfo.version=1.2.3-test", "../../cmd/fulcrumctl")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "1.2.3-test") {
		t.Errorf("fulcrumctl --version: %v %q, want it to name 1.2.3-test", err, out)
	}
}
