package paths

import (
	"os"
	"strings"
	"testing"
)

// TestPackagingSpellsTheSamePaths: the files that cannot import this package (the
// systemd unit and tmpfiles, the shipped configuration) name the same directories.
func TestPackagingSpellsTheSamePaths(t *testing.T) {
	for file, want := range map[string][]string{
		"../../systemd/fulcrumd.service": {"--state-dir " + StateDir, "RuntimeDirectory=fulcrum", "StateDirectory=fulcrum"},
		"../../systemd/fulcrum.tmpfiles": {"d " + StateDir + " "},
		"../../configs/fulcrum.yaml":     {"runtime_dir: " + RuntimeDir + "\n", "state_dir: " + StateDir + "\n", "<state_dir>/" + StoreName, "<runtime_dir>/" + ControlSocketName},
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s does not say %q: keep it in step with internal/paths", file, w)
			}
		}
	}
	if RuntimeDir != "/run/fulcrum" || StateDir != "/var/lib/fulcrum" {
		t.Errorf("RuntimeDir %s, StateDir %s: systemd's RuntimeDirectory=/StateDirectory=fulcrum make /run/fulcrum and /var/lib/fulcrum", RuntimeDir, StateDir)
	}
}
