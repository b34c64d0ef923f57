package packaging

import (
	"bytes"
	"compress/gzip"
	"debug/buildinfo"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	if pi := read(t, filepath.Join(ctl, "postinst")); !strings.Contains(pi, "systemd-sysusers fulcrum.conf") || !strings.Contains(pi, "systemctl --system daemon-reload") ||
		!strings.Contains(pi, "deb-systemd-helper update-state fulcrumd.service") || !strings.Contains(pi, "deb-systemd-invoke try-restart fulcrumd.service") {
		t.Errorf("postinst does not run systemd-sysusers, daemon-reload and deb-systemd-helper/invoke:\n%s", pi)
	}
	if pr := read(t, filepath.Join(ctl, "prerm")); !strings.Contains(pr, "deb-systemd-invoke stop fulcrumd.service") {
		t.Errorf("prerm does not stop fulcrumd through deb-systemd-invoke:\n%s", pr)
	}
	if pr := read(t, filepath.Join(ctl, "postrm")); !strings.Contains(pr, "deb-systemd-helper purge fulcrumd.service") {
		t.Errorf("postrm does not purge the unit's state through deb-systemd-helper:\n%s", pr)
	}

	listing := dpkgDeb("-c", deb)
	root := t.TempDir()
	if out, err := exec.Command("dpkg", "-x", deb, root).CombinedOutput(); err != nil {
		t.Fatalf("dpkg -x: %v\n%s", err, out)
	}
	files := tree(t, root)
	for p, mode := range map[string]uint32{
		"/usr/bin/fulcrumd":                                    0o755,
		"/usr/bin/fulcrumctl":                                  0o755,
		"/lib/systemd/system/fulcrumd.service":                 0o644,
		"/usr/lib/sysusers.d/fulcrum.conf":                     0o644,
		"/usr/lib/tmpfiles.d/fulcrum.conf":                     0o644,
		"/etc/fulcrum/fulcrum.yaml":                            0o644,
		"/usr/share/doc/fulcrum/install.md":                    0o644,
		"/usr/share/doc/fulcrum/fleet.md":                      0o644,
		"/usr/share/doc/fulcrum/fulcrumd-metrics.conf":         0o644,
		"/usr/share/doc/fulcrum/operations.md":                 0o644,
		"/usr/share/doc/fulcrum/api.md":                        0o644,
		"/usr/share/doc/fulcrum/copyright":                     0o644,
		"/usr/share/doc/fulcrum/changelog.gz":                  0o644,
		"/usr/share/lintian/overrides/fulcrum":                 0o644,
		"/usr/share/man/man1/fulcrumd.1.gz":                    0o644,
		"/usr/share/man/man1/fulcrumctl.1.gz":                  0o644,
		"/usr/share/man/man1/fulcrumctl-budget-set.1.gz":       0o644,
		"/usr/share/bash-completion/completions/fulcrumd":      0o644,
		"/usr/share/bash-completion/completions/fulcrumctl":    0o644,
		"/usr/share/zsh/vendor-completions/_fulcrumd":          0o644,
		"/usr/share/zsh/vendor-completions/_fulcrumctl":        0o644,
		"/usr/share/fish/vendor_completions.d/fulcrumd.fish":   0o644,
		"/usr/share/fish/vendor_completions.d/fulcrumctl.fish": 0o644,
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
	checkManPage(t, filepath.Join(root, "usr/share/man/man1/fulcrumctl-budget-set.1.gz"), "fulcrumctl-budget-set", "--workload")
	checkManPage(t, filepath.Join(root, "usr/share/man/man1/fulcrumd.1.gz"), "fulcrumd", "--config")
	if bash := read(t, filepath.Join(root, "usr/share/bash-completion/completions/fulcrumctl")); !strings.Contains(bash, "complete -o default -F __start_fulcrumctl fulcrumctl") {
		t.Errorf("bash completion does not register fulcrumctl:\n%.300s", bash)
	}
	if fish := read(t, filepath.Join(root, "usr/share/fish/vendor_completions.d/fulcrumd.fish")); !strings.Contains(fish, "complete -c fulcrumd") {
		t.Errorf("fish completion does not register fulcrumd:\n%.300s", fish)
	}
	if zsh := read(t, filepath.Join(root, "usr/share/zsh/vendor-completions/_fulcrumctl")); !strings.HasPrefix(zsh, "#compdef fulcrumctl") {
		t.Errorf("zsh completion lacks #compdef fulcrumctl:\n%.300s", zsh)
	}
	checkChangelog(t, filepath.Join(root, "usr/share/doc/fulcrum/changelog.gz"), "1.2.3~test")
	checkCopyright(t, root)
	lintianClean(t, deb)

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

// checkChangelog: a Debian changelog, gzip -9n, whose first entry is the package's version.
func checkChangelog(t *testing.T, p, version string) {
	t.Helper()
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Error(err)
		return
	}
	// gzip -9 sets XFL (byte 8) to 2; -n leaves MTIME (bytes 4-7) zero.
	if len(raw) < 10 || raw[8] != 2 || raw[4]|raw[5]|raw[6]|raw[7] != 0 {
		t.Errorf("%s: not gzip -9n (header % x)", p, raw[:min(len(raw), 10)])
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Errorf("%s: %v", p, err)
		return
	}
	text, _ := io.ReadAll(zr)
	first, _, _ := strings.Cut(string(text), "\n")
	if want := "fulcrum (" + version + ") unstable; urgency=medium"; first != want {
		t.Errorf("changelog starts %q, want %q", first, want)
	}
	if !regexp.MustCompile(`(?m)^ -- .+ <.+>  [A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} \+0000$`).Match(text) {
		t.Errorf("changelog has no maintainer line with an RFC 2822 date:\n%s", text)
	}
}

// checkCopyright: the copyright file is machine-readable, says Apache-2.0, points at
// Debian's copy of the licence, and names every Go module linked into the packaged
// binaries (their build info lists them), so that it cannot fall behind go.mod.
func checkCopyright(t *testing.T, root string) {
	t.Helper()
	c := read(t, filepath.Join(root, "usr/share/doc/fulcrum/copyright"))
	for _, s := range []string{"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/", "License: Apache-2.0", "/usr/share/common-licenses/Apache-2.0"} {
		if !strings.Contains(c, s) {
			t.Errorf("copyright lacks %q", s)
		}
	}
	for _, bin := range []string{"usr/bin/fulcrumd", "usr/bin/fulcrumctl"} {
		info, err := buildinfo.ReadFile(filepath.Join(root, bin))
		if err != nil {
			t.Errorf("build info of %s: %v", bin, err)
			continue
		}
		for _, d := range info.Deps {
			if !strings.Contains(c, " "+d.Path+" ") {
				t.Errorf("copyright does not name %s %s, linked into /%s: add it with its licence to packaging/copyright", d.Path, d.Version, bin)
			}
		}
	}
}

// lintianClean runs lintian on the .deb where it is installed (CI installs it): no
// errors; warnings are logged.
func lintianClean(t *testing.T, deb string) {
	t.Helper()
	if _, err := exec.LookPath("lintian"); err != nil {
		t.Log("lintian not installed: the .deb is not checked with it (make package-check installs it as root)")
		return
	}
	out, err := exec.Command("lintian", "--tag-display-limit", "0", deb).CombinedOutput()
	t.Logf("lintian:\n%s", out)
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "E: ") {
			t.Errorf("lintian error: %s", line)
		}
	}
	if err != nil && !strings.Contains(string(out), "E: ") {
		t.Errorf("lintian: %v", err)
	}
}
