package packaging

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// repoRoot is the checkout this package lives in (tests run in the package directory).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "Makefile")); err != nil {
		t.Fatalf("no Makefile in %s: %v", root, err)
	}
	return root
}

// runMake runs make in the repository root with args and returns its output.
func runMake(t *testing.T, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed (CI has it)")
	}
	cmd := exec.Command("make", append([]string{"--no-print-directory", "-C", repoRoot(t)}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// tree lists every regular file under dir as "MODE path" relative to dir.
func tree(t *testing.T, dir string) map[string]fs.FileMode {
	t.Helper()
	got := map[string]fs.FileMode{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		got["/"+filepath.ToSlash(rel)] = info.Mode().Perm()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// `make install DESTDIR=...` puts exactly the expected files there, with their modes;
// the unit points at $(BINDIR); a second install keeps an edited configuration; make
// uninstall removes what install added except the configuration.
func TestMakeInstall(t *testing.T) {
	dest := t.TempDir()
	runMake(t, "install", "DESTDIR="+dest)

	docs := []string{"README.md", "LICENSE", "install.md", "fleet.md", "board-layer.md", "profiler.md", "runtime.md", "protocol.md", "operations.md", "api.md", "fulcrum.yaml.example", "fulcrumd-metrics.conf"}
	want := map[string]fs.FileMode{
		"/usr/local/bin/fulcrumd":              0o755,
		"/usr/local/bin/fulcrumctl":            0o755,
		"/lib/systemd/system/fulcrumd.service": 0o644,
		"/usr/lib/sysusers.d/fulcrum.conf":     0o644,
		"/usr/lib/tmpfiles.d/fulcrum.conf":     0o644,
		"/etc/fulcrum/fulcrum.yaml":            0o644,
	}
	for _, d := range docs {
		want["/usr/local/share/doc/fulcrum/"+d] = 0o644
	}
	// Man pages and completions (make gendocs): one page per command, so the exact set
	// follows fulcrumctl's commands; these must be there, and every page is a man page.
	for _, p := range []string{
		"/usr/local/share/man/man1/fulcrumd.1.gz", "/usr/local/share/man/man1/fulcrumctl.1.gz",
		"/usr/local/share/man/man1/fulcrumctl-budget-set.1.gz", "/usr/local/share/man/man1/fulcrumctl-status.1.gz",
		"/usr/local/share/bash-completion/completions/fulcrumd", "/usr/local/share/bash-completion/completions/fulcrumctl",
		"/usr/local/share/zsh/site-functions/_fulcrumd", "/usr/local/share/zsh/site-functions/_fulcrumctl",
		"/usr/local/share/fish/vendor_completions.d/fulcrumd.fish", "/usr/local/share/fish/vendor_completions.d/fulcrumctl.fish",
	} {
		want[p] = 0o644
	}
	got := tree(t, dest)
	for p, m := range got {
		if strings.HasPrefix(p, "/usr/local/share/man/man1/fulcrumctl-") && strings.HasSuffix(p, ".1.gz") {
			want[p] = 0o644
			if m != 0o644 {
				t.Errorf("%s: mode %v", p, m)
			}
		}
	}
	checkManPage(t, filepath.Join(dest, "usr/local/share/man/man1/fulcrumctl-budget-set.1.gz"), "fulcrumctl-budget-set", "--workload")
	for p, m := range want {
		if gm, ok := got[p]; !ok {
			t.Errorf("missing %s", p)
		} else if gm != m {
			t.Errorf("%s: mode %v, want %v", p, gm, m)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("unexpected file %s", p)
		}
	}

	unit := read(t, filepath.Join(dest, "lib/systemd/system/fulcrumd.service"))
	for _, line := range []string{
		"ExecStart=/usr/local/bin/fulcrumd",
		"ExecStopPost=-/usr/local/bin/fulcrumctl board restore --state-dir /var/lib/fulcrum",
		"Documentation=file:/usr/local/share/doc/fulcrum/install.md",
		"Type=notify", "RuntimeDirectory=fulcrum", "RuntimeDirectoryMode=0750", "StateDirectory=fulcrum",
		"ProtectSystem=strict",
	} {
		if !hasLine(unit, line) {
			t.Errorf("installed unit lacks the line %q", line)
		}
	}
	if strings.Contains(unit, "/usr/bin/") || hasLine(unit, "ProtectKernelTunables=yes") {
		t.Errorf("installed unit still names /usr/bin or makes /sys read-only:\n%s", unit)
	}
	if cfg, src := read(t, filepath.Join(dest, "etc/fulcrum/fulcrum.yaml")), read(t, filepath.Join(repoRoot(t), "configs/fulcrum.yaml")); cfg != src {
		t.Error("installed /etc/fulcrum/fulcrum.yaml differs from configs/fulcrum.yaml")
	}
	verifyUnit(t, dest, unit)

	// The installed binaries run.
	out, err := exec.Command(filepath.Join(dest, "usr/local/bin/fulcrumctl"), "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "fulcrumctl") {
		t.Fatalf("installed fulcrumctl --help: %v\n%s", err, out)
	}

	// Reinstall over an edited configuration: kept.
	edited := "budgets:\n  latency_ms: 42\n"
	if err := os.WriteFile(filepath.Join(dest, "etc/fulcrum/fulcrum.yaml"), []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	out2 := runMake(t, "install", "DESTDIR="+dest)
	if got := read(t, filepath.Join(dest, "etc/fulcrum/fulcrum.yaml")); got != edited {
		t.Fatalf("make install overwrote an existing configuration:\n%s", got)
	}
	if !strings.Contains(out2, "kept the existing") {
		t.Errorf("make install did not say it kept the configuration:\n%s", out2)
	}

	runMake(t, "uninstall", "DESTDIR="+dest)
	left := tree(t, dest)
	if len(left) != 1 || left["/etc/fulcrum/fulcrum.yaml"] == 0 {
		t.Fatalf("after uninstall want only /etc/fulcrum/fulcrum.yaml, have %v", slices.Sorted(maps.Keys(left)))
	}
}

// PREFIX and the directory variables move what they should.
func TestMakeInstallPrefix(t *testing.T) {
	dest := t.TempDir()
	runMake(t, "install", "DESTDIR="+dest, "PREFIX=/opt/fulcrum", "SYSTEMDUNITDIR=/etc/systemd/system")
	for _, p := range []string{"/opt/fulcrum/bin/fulcrumd", "/opt/fulcrum/share/doc/fulcrum/install.md", "/etc/systemd/system/fulcrumd.service", "/usr/lib/sysusers.d/fulcrum.conf"} {
		if _, err := os.Stat(filepath.Join(dest, p)); err != nil {
			t.Errorf("PREFIX=/opt/fulcrum: %v", err)
		}
	}
	if unit := read(t, filepath.Join(dest, "etc/systemd/system/fulcrumd.service")); !hasLine(unit, "ExecStart=/opt/fulcrum/bin/fulcrumd") {
		t.Errorf("unit ExecStart does not follow PREFIX:\n%s", unit)
	}
}

// verifyUnit runs systemd-analyze verify on the installed unit, pointed at the installed
// binaries (verify checks that ExecStart exists), when systemd-analyze is available.
func verifyUnit(t *testing.T, dest, unit string) {
	t.Helper()
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze not installed: unit not verified")
		return
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "fulcrumd.service")
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(unit, "/usr/local/bin/", filepath.Join(dest, "usr/local/bin")+"/")), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(sa, "verify", p)
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) || stderr.Len() > 0 {
		t.Fatalf("systemd-analyze verify fulcrumd.service: %v\n%s", err, stderr.String())
	}
	if err != nil {
		t.Fatalf("systemd-analyze: %v", err)
	}
}

// checkManPage gunzips a man page and checks its header, name and that it documents want.
func checkManPage(t *testing.T, p, name, want string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Errorf("%s: not gzip: %v", p, err)
		return
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("%s: gzip header has name %q, time %v; want neither (gzip -n)", p, zr.Name, zr.ModTime)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Errorf("%s: %v", p, err)
		return
	}
	page := string(raw)
	if !strings.Contains(page, ".TH \""+strings.ToUpper(name)+"\" \"1\"") || !strings.Contains(page, ".SH NAME\n"+name+" - ") || !strings.Contains(page, want) {
		t.Errorf("%s: want a section-1 page for %s mentioning %s:\n%.600s", p, name, want, page)
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func hasLine(text, line string) bool {
	return slices.Contains(strings.Split(text, "\n"), line)
}
