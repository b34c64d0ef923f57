package gendocs

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

func tree() *cobra.Command {
	root := &cobra.Command{Use: "demo", Short: "a demo tool"}
	set := &cobra.Command{Use: "set", Short: "set a budget", RunE: func(*cobra.Command, []string) error { return nil }}
	set.Flags().String("latency", "", "p99 latency budget")
	group := &cobra.Command{Use: "budget", Short: "budgets"}
	group.AddCommand(set)
	root.AddCommand(group)
	return root
}

// Write makes one man page per command, gzip -9n, dated by the given time and without
// cobra's "Auto generated" line, and the three completion scripts.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	date := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	if err := Write(tree(), dir, date); err != nil {
		t.Fatal(err)
	}
	page := gunzip(t, filepath.Join(dir, "man/man1/demo-budget-set.1.gz"))
	for _, want := range []string{`.TH "DEMO-BUDGET-SET" "1" "Mar 2026"`, "--latency", "p99 latency budget"} {
		if !strings.Contains(page, want) {
			t.Errorf("man page lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "Auto generated") {
		t.Errorf("man page has cobra's auto-generated line (not reproducible):\n%s", page)
	}
	for _, p := range []string{"man/man1/demo.1.gz", "man/man1/demo-budget.1.gz", "completions/bash/demo", "completions/zsh/_demo", "completions/fish/demo.fish"} {
		if fi, err := os.Stat(filepath.Join(dir, p)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", p, err)
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".man-") {
			t.Errorf("temporary directory %s left behind", e.Name())
		}
	}
}

// Main handles only `BIN __gendocs DIR`; a wrong argument count is a usage error.
func TestMainHook(t *testing.T) {
	if ok, _ := Main([]string{"demo", "budget"}, tree); ok {
		t.Error("Main handled an ordinary command line")
	}
	if ok, code := Main([]string{"demo", Arg}, tree); !ok || code != 2 {
		t.Errorf("Main without DIR = %v, %d; want handled, 2", ok, code)
	}
	dir := t.TempDir()
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	if ok, code := Main([]string{"demo", Arg, dir}, tree); !ok || code != 0 {
		t.Fatalf("Main = %v, %d", ok, code)
	}
	if page := gunzip(t, filepath.Join(dir, "man/man1/demo.1.gz")); !strings.Contains(page, `"Nov 2023"`) {
		t.Errorf("SOURCE_DATE_EPOCH 1700000000 (Nov 2023) not used as the date:\n%.300s", page)
	}
}

func gunzip(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("%s: gzip header name %q, time %v: want none (gzip -n)", p, zr.Name, zr.ModTime)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}
