package tegra

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// FileSystem is the seam through which the backend reads and writes the board's control
// and sensor files. Paths are board paths ("/sys/devices/..."), not host paths: the
// implementation resolves them under the filesystem root. Tests wrap OSFS to record
// writes or to refuse one with EINVAL/EPERM the way a kernel does, whatever the uid.
type FileSystem interface {
	ReadFile(boardPath string) ([]byte, error)
	WriteFile(boardPath string, data []byte) error
}

// OSFS is the real FileSystem: board paths resolved under Root.
type OSFS struct {
	Root string
}

// ReadFile reads the file at boardPath under the root.
func (o OSFS) ReadFile(boardPath string) ([]byte, error) {
	return os.ReadFile(hostPath(o.Root, boardPath))
}

// WriteFile writes data with one write(2), as sysfs needs: a sysfs attribute is stored
// from a single write, and a refused value (EINVAL, EBUSY, EPERM) leaves it unchanged.
// The file must exist (sysfs files cannot be created); O_TRUNC matters only for the
// plain files of a fake tree.
func (o OSFS) WriteFile(boardPath string, data []byte) error {
	f, err := os.OpenFile(hostPath(o.Root, boardPath), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr != nil {
		return werr
	}
	return cerr
}

// hostPath maps a board path to the host path under root.
func hostPath(root, boardPath string) string {
	return filepath.Join(root, filepath.FromSlash(boardPath))
}

// tree gives discovery what the narrow FileSystem seam does not: listing, globbing and
// symlink resolution, all confined to the root.
type tree struct {
	root string
	fs   FileSystem
}

func (t tree) host(boardPath string) string { return hostPath(t.root, boardPath) }

// Globber is a FileSystem that also globs (board paths in and out, sorted, as glob
// answers): the daemon on virtual time caches the simulated tree's listings between its
// physics steps (fulcrum/lifetime). tree.glob asks it when the FileSystem is one.
type Globber interface {
	Glob(pattern string) ([]string, error)
}

// Glob returns the board paths under root matching pattern (a board path with *
// wildcards), sorted.
func Glob(root, pattern string) ([]string, error) { return tree{root: root}.globOS(pattern) }

// glob returns the board paths matching pattern (a board path with * wildcards), sorted.
func (t tree) glob(pattern string) ([]string, error) {
	if g, ok := t.fs.(Globber); ok {
		return g.Glob(pattern)
	}
	return t.globOS(pattern)
}

func (t tree) globOS(pattern string) ([]string, error) {
	matches, err := filepath.Glob(t.host(pattern))
	if err != nil {
		return nil, fmt.Errorf("glob %s: %w", pattern, err)
	}
	out := make([]string, 0, len(matches))
	for _, m := range matches {
		rel, err := filepath.Rel(t.root, m)
		if err != nil {
			return nil, err
		}
		out = append(out, "/"+filepath.ToSlash(rel))
	}
	return out, nil
}

// exists reports whether boardPath exists (following symlinks inside the root).
func (t tree) exists(boardPath string) bool {
	real, err := t.realpath(boardPath)
	if err != nil {
		return false
	}
	_, err = os.Stat(t.host(real))
	return err == nil
}

// realpath resolves every symlink in boardPath, keeping the result inside the root:
// absolute link targets are taken relative to the root and ".." stops at it. sysfs
// links are relative (class/devfreq/x -> ../../devices/...), but a hand-made tree may
// use absolute ones, which must not escape to the host's /sys.
func (t tree) realpath(boardPath string) (string, error) {
	parts := strings.Split(strings.TrimPrefix(path.Clean("/"+boardPath), "/"), "/")
	cur := "/"
	links := 0
	for len(parts) > 0 {
		part := parts[0]
		parts = parts[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, part)
		fi, err := os.Lstat(t.host(next))
		if err != nil {
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > 40 {
			return "", fmt.Errorf("resolve %s: too many symlinks", boardPath)
		}
		target, err := os.Readlink(t.host(next))
		if err != nil {
			return "", err
		}
		target = filepath.ToSlash(target)
		if path.IsAbs(target) {
			cur = "/"
		}
		parts = append(strings.Split(target, "/"), parts...)
	}
	return cur, nil
}

// readString reads a small text file through the seam, trimmed of whitespace and the
// NUL that device-tree properties end with.
func (t tree) readString(boardPath string) (string, error) {
	b, err := t.fs.ReadFile(boardPath)
	if err != nil {
		return "", err
	}
	return strings.Trim(string(b), " \t\r\n\x00"), nil
}
