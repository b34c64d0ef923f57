package powermode

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrBoardLocked is wrapped by LockBoard's error when another process holds the board.
var ErrBoardLocked = errors.New("the board is locked")

// BoardLock is an exclusive flock(2) on a node of the board's own tree (the GPU's devfreq
// directory on a Jetson or a simulated board, the GPU's PCI device directory with NVML).
// It is tied to the board, not to a runtime or state directory, so two daemons given
// different directories still find each other. flock is implemented by the VFS for
// every file system, sysfs included; the lock goes with the process (a crash releases
// it), and it is advisory: it keeps fulcrumd off a board another fulcrumd drives, not
// someone writing the files by hand.
type BoardLock struct {
	f    *os.File
	path string
}

// LockBoard takes the board lock on node without waiting. When another process holds
// it, the error wraps ErrBoardLocked and names that process's pid where /proc/locks
// shows it.
func LockBoard(node string) (*BoardLock, error) {
	f, err := os.Open(node)
	if err != nil {
		return nil, fmt.Errorf("board lock: open %s: %w", node, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := "another fulcrumd (pid unknown) drives this board"
		if pid, ok := lockHolder(f, "/proc/locks"); ok {
			holder = holderName(pid)
		}
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: stop it first (systemctl stop fulcrumd, or end that pid) or use another board; nothing on the board or in the state directory was touched (%w: flock on %s)",
				holder, ErrBoardLocked, node)
		}
		return nil, fmt.Errorf("board lock: flock %s: %w", node, err)
	}
	return &BoardLock{f: f, path: node}, nil
}

// Path is the node the lock is held on.
func (l *BoardLock) Path() string { return l.path }

// Close releases the lock.
func (l *BoardLock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// holderName words who holds the lock: a fulcrumd by its command name (fulcrumd,
// fulcrumd.test), else the command /proc names (a fulcrumctl board apply, profile run).
func holderName(pid int) string {
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	name := strings.TrimSpace(string(comm))
	if err != nil || name == "" || strings.HasPrefix(name, "fulcrumd") {
		return fmt.Sprintf("another fulcrumd (pid %d) drives this board", pid)
	}
	return fmt.Sprintf("%q (pid %d) holds this board", name, pid)
}

// lockHolder finds the pid holding a FLOCK on f's inode in a /proc/locks listing
// ("1: FLOCK  ADVISORY  WRITE 1234 00:1f:5678 0 EOF"; waiters are "1: -> FLOCK ...").
// The pid is the one that took the lock, in the reader's pid namespace (0 or absent
// from another namespace, when it is not known).
func lockHolder(f *os.File, locks string) (int, bool) {
	fi, err := f.Stat()
	if err != nil {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)), st.Ino)
	lf, err := os.Open(locks)
	if err != nil {
		return 0, false
	}
	defer lf.Close()
	sc := bufio.NewScanner(lf)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[1] != "FLOCK" || fs[5] != want {
			continue
		}
		if pid, err := strconv.Atoi(fs[4]); err == nil && pid > 0 {
			return pid, true
		}
	}
	return 0, false
}
