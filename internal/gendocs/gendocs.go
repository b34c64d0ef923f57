// Package gendocs writes a command's man pages and shell completions (cobra's doc
// package and completion generators) for `make package` and `make install`. Each binary
// calls Main first thing: `fulcrumctl __gendocs DIR` writes fulcrumctl's files under DIR
// and exits, so the pages always describe the binary's own command tree.
package gendocs

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// Arg is the hidden first argument that asks a binary for its docs.
const Arg = "__gendocs"

// Main handles `BINARY __gendocs DIR`: it writes root's files under DIR and reports
// true (the caller exits with the returned code). Any other argv reports false.
func Main(args []string, root func() *cobra.Command) (handled bool, code int) {
	if len(args) < 2 || args[1] != Arg {
		return false, 0
	}
	if len(args) != 3 {
		fmt.Fprintf(os.Stderr, "usage: %s %s DIR\n", filepath.Base(args[0]), Arg)
		return true, 2
	}
	if err := Write(root(), args[2], sourceDate()); err != nil {
		fmt.Fprintf(os.Stderr, "%s %s: %v\n", filepath.Base(args[0]), Arg, err)
		return true, 1
	}
	return true, 0
}

// sourceDate is SOURCE_DATE_EPOCH (reproducible builds; the Makefile sets it to the
// commit's time) or, without it, today.
func sourceDate() time.Time {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return time.Unix(n, 0).UTC()
		}
	}
	return time.Now().UTC()
}

// Write puts under dir:
//
//	man/man1/NAME.1.gz and NAME-SUB.1.gz ... (gzip -9, no name or time in the header)
//	completions/bash/NAME, completions/zsh/_NAME, completions/fish/NAME.fish
func Write(root *cobra.Command, dir string, date time.Time) error {
	name := root.Name()
	root.DisableAutoGenTag = true // no "Auto generated ... on DATE" line: reproducible pages
	manDir := filepath.Join(dir, "man", "man1")
	if err := os.MkdirAll(manDir, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(dir, ".man-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// No Title: each page gets its own command path (FULCRUMCTL-BOARD-INFO), as man expects.
	hdr := &doc.GenManHeader{Section: "1", Date: &date, Source: "Fulcrum", Manual: "Fulcrum manual"}
	if err := doc.GenManTree(root, hdr, tmp); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	pages, err := os.ReadDir(tmp)
	if err != nil {
		return err
	}
	for _, p := range pages {
		raw, err := os.ReadFile(filepath.Join(tmp, p.Name()))
		if err != nil {
			return err
		}
		if err := writeGzip(filepath.Join(manDir, p.Name()+".gz"), raw); err != nil {
			return err
		}
	}
	for _, c := range []struct {
		shell, file string
		gen         func(*bytes.Buffer) error
	}{
		{"bash", name, func(b *bytes.Buffer) error { return root.GenBashCompletionV2(b, true) }},
		{"zsh", "_" + name, func(b *bytes.Buffer) error { return root.GenZshCompletion(b) }},
		{"fish", name + ".fish", func(b *bytes.Buffer) error { return root.GenFishCompletion(b, true) }},
	} {
		var b bytes.Buffer
		if err := c.gen(&b); err != nil {
			return fmt.Errorf("%s completion: %w", c.shell, err)
		}
		d := filepath.Join(dir, "completions", c.shell)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d, c.file), b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeGzip writes raw gzipped at the best compression with an empty header (no file
// name, zero mtime), as `gzip -9n` would: Debian wants man pages compressed that way.
func writeGzip(path string, raw []byte) error {
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return err
	}
	if _, err := zw.Write(raw); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}
