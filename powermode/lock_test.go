package powermode

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The board lock is exclusive across open file descriptions (two daemons), names the
// holder's pid from /proc/locks, and is free again once released.
func TestLockBoard(t *testing.T) {
	node := t.TempDir() // a directory, as the GPU's devfreq node is
	l, err := LockBoard(node)
	if err != nil {
		t.Fatal(err)
	}
	_, err = LockBoard(node)
	// The holder is this test binary: named by its command (a fulcrumd says "another
	// fulcrumd (pid N) drives this board", cmd/fulcrumd's process test checks that).
	if !errors.Is(err, ErrBoardLocked) || !strings.Contains(err.Error(), fmt.Sprintf(`"powermode.test" (pid %d) holds this board`, os.Getpid())) {
		t.Fatalf("second lock: %v; want ErrBoardLocked naming this process and pid %d", err, os.Getpid())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := LockBoard(node)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	l2.Close()
	if _, err := LockBoard(node + "/missing"); err == nil || errors.Is(err, ErrBoardLocked) {
		t.Fatalf("lock on a missing node: %v", err)
	}
}

// lockHolder reads the holder from a /proc/locks listing, skipping waiters, POSIX
// locks and other inodes.
func TestLockHolderParsesProcLocks(t *testing.T) {
	f, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	ino := inodeOf(t, fi)
	listing := fmt.Sprintf(`1: POSIX  ADVISORY  WRITE 11 %[1]s 0 EOF
2: FLOCK  ADVISORY  WRITE 22 00:01:1 0 EOF
3: -> FLOCK  ADVISORY  WRITE 33 %[1]s 0 EOF
3: FLOCK  ADVISORY  WRITE 4242 %[1]s 0 EOF
`, ino)
	p := t.TempDir() + "/locks"
	if err := os.WriteFile(p, []byte(listing), 0o644); err != nil {
		t.Fatal(err)
	}
	if pid, ok := lockHolder(f, p); !ok || pid != 4242 {
		t.Fatalf("holder %d, %v; want 4242", pid, ok)
	}
	if err := os.WriteFile(p, []byte("1: FLOCK  ADVISORY  WRITE 0 "+ino+" 0 EOF\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if pid, ok := lockHolder(f, p); ok {
		t.Fatalf("holder %d from another pid namespace (0); want unknown", pid)
	}
}

// inodeOf is fi's inode as /proc/locks writes it (major:minor:inode).
func inodeOf(t *testing.T, fi fs.FileInfo) string {
	t.Helper()
	st := fi.Sys().(*syscall.Stat_t)
	return fmt.Sprintf("%02x:%02x:%d", unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)), st.Ino)
}
