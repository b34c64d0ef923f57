package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// `make package` for amd64 builds a .deb whose control data, scripts, conffiles and
// contents are right, and whose fulcrumctl runs. It installs nfpm with `go install` (the
// Go proxy) and cross-builds the binaries, so it runs only with FULCRUM_TEST_PACKAGE=1.
func TestMakePackage(t *testing.T) {
	if os.Getenv("FULCRUM_TEST_PACKAGE") != "1" {
		t.Skip("set FULCRUM_TEST_PACKAGE=1 to build and check the .deb (installs nfpm from the Go proxy)")
	}
	for _, tool := range []string{"dpkg-deb", "dpkg"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("FULCRUM_TEST_PACKAGE=1 needs %s: %v", tool, err)
		}
	}
	dist := t.TempDir()
	runMake(t, "package", "PACKAGE_ARCHS=amd64", "DISTDIR="+dist, "VERSION=1.2.3~test")
	deb := filepath.Join(dist, "fulcrum_1.2.3~test_amd64.deb")
	if _, err := os.Stat(deb); err != nil {
		entries, _ := os.ReadDir(dist)
		t.Fatalf("no %s (DISTDIR has %v): %v", filepath.Base(deb), entries, err)
	}
	dpkgDeb := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("dpkg-deb", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("dpkg-deb %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	for field, want := range map[string]string{"Package": "fulcrum", "Version": "1.2.3~test", "Architecture": "amd64"} {
		if got := strings.TrimSpace(dpkgDeb("-f", deb, field)); got != want {
			t.Errorf("control %s = %q, want %q", field, got, want)
		}
	}
	info := dpkgDeb("-I", deb)
	for _, s := range []string{"postinst", "prerm", "postrm", "conffiles"} {
		if !strings.Contains(info, s) {
			t.Errorf("control archive lacks %s:\n%s", s, info)
		}
	}
	ctl := t.TempDir()
	dpkgDeb("-e", deb, ctl)
	if got := strings.TrimSpace(read(t, filepath.Join(ctl, "conffiles"))); got != "/etc/fulcrum/fulcrum.yaml" {
		t.Errorf("conffiles = %q, want /etc/fulcrum/fulcrum.yaml", got)
	}
	if pi := read(t, filepath.Join(ctl, "postinst")); !strings.Contains(pi, "systemd-sysusers fulcrum.conf") || !strings.Contains(pi, "systemctl daemon-reload") {
		t.Errorf("postinst does not run systemd-sysusers and daemon-reload:\n%s", pi)
	}

	listing := dpkgDeb("-c", deb)
	root := t.TempDir()
	if out, err := exec.Command("dpkg", "-x", deb, root).CombinedOutput(); err != nil {
		t.Fatalf("dpkg -x: %v\n%s", err, out)
	}
	files := tree(t, root)
	for p, mode := range map[string]uint32{
		"/usr/bin/fulcrumd":                            0o755,
		"/usr/bin/fulcrumctl":                          0o755,
		"/lib/systemd/system/fulcrumd.service":         0o644,
		"/usr/lib/sysusers.d/fulcrum.conf":             0o644,
		"/usr/lib/tmpfiles.d/fulcrum.conf":             0o644,
		"/etc/fulcrum/fulcrum.yaml":                    0o644,
		"/usr/share/doc/fulcrum/install.md":            0o644,
		"/usr/share/doc/fulcrum/fleet.md":              0o644,
		"/usr/share/doc/fulcrum/fulcrumd-metrics.conf": 0o644,
	} {
		if m, ok := files[p]; !ok {
			t.Errorf("package lacks %s; dpkg-deb -c:\n%s", p, listing)
		} else if uint32(m) != mode {
			t.Errorf("%s: mode %v, want %o", p, m, mode)
		}
	}
	if unit := read(t, filepath.Join(root, "lib/systemd/system/fulcrumd.service")); !hasLine(unit, "ExecStart=/usr/bin/fulcrumd") {
		t.Errorf("packaged unit does not start /usr/bin/fulcrumd")
	}
	for _, bin := range []string{"fulcrumctl", "fulcrumd"} {
		out, err := exec.Command(filepath.Join(root, "usr/bin", bin), "--help").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Usage:") {
			t.Errorf("packaged %s --help: %v\n%s", bin, err, out)
		}
		out, err = exec.Command(filepath.Join(root, "usr/bin", bin), "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "1.2.3~test") {
			t.Errorf("packaged %s --version: %v %q, want the package version 1.2.3~test", bin, err, out)
		}
	}
}
