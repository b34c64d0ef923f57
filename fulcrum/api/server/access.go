package server

import (
	"bufio"
	"errors"
	"fmt"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Policy decides whether a caller may change things (PUT, POST). Reads (GET) are open to
// whoever can open the socket; the socket's mode and group decide that.
type Policy interface {
	// Allow returns nil, or an error saying why not and what to do.
	Allow(c api.Caller) error
}

// PolicyFunc adapts a function to Policy.
type PolicyFunc func(api.Caller) error

// Allow calls f.
func (f PolicyFunc) Allow(c api.Caller) error { return f(c) }

// GroupPolicy is the default policy: root, members of the group with GID (primary or
// supplementary), and the configured extra uids and gids may change things.
type GroupPolicy struct {
	GID       int    // the fulcrum group's gid; -1 when the group does not exist
	GroupName string // for messages
	AllowUIDs []int
	AllowGIDs []int
}

// Allow implements Policy.
func (p GroupPolicy) Allow(c api.Caller) error {
	if c.UID == 0 || slices.Contains(p.AllowUIDs, c.UID) {
		return nil
	}
	gids := append([]int{c.GID}, c.Groups...)
	for _, g := range gids {
		if (p.GID >= 0 && g == p.GID) || slices.Contains(p.AllowGIDs, g) {
			return nil
		}
	}
	if p.GID < 0 && (p.GroupName == "-" || p.GroupName == "") {
		return fmt.Errorf("uid %d may not change fulcrumd: only root and control.allow_uids/allow_gids may (control.group is %q: no group; list the uid in control.allow_uids, or use sudo)", c.UID, p.GroupName)
	}
	if p.GID < 0 {
		return fmt.Errorf("uid %d may not change fulcrumd: only root may (the group %q does not exist here; create it, or list the uid in control.allow_uids)", c.UID, p.GroupName)
	}
	return fmt.Errorf("uid %d may not change fulcrumd: only root and members of the group %q may (sudo usermod -aG %s $USER, then log in again; or use sudo)", c.UID, p.GroupName, p.GroupName)
}

// lookupGroup returns the gid of name, or -1 when there is no such group.
func lookupGroup(name string) (int, error) {
	if name == "" {
		return -1, nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		var unknown user.UnknownGroupError
		if errors.As(err, &unknown) {
			return -1, nil
		}
		return -1, fmt.Errorf("look up group %q: %w", name, err)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return -1, fmt.Errorf("group %q has a non-numeric gid %q", name, g.Gid)
	}
	return gid, nil
}

// peerCredentials takes the peer's credentials once, when the connection is accepted:
// uid, gid and pid from SO_PEERCRED and the supplementary groups from SO_PEERGROUPS, both
// as the kernel recorded them at connect(). Only on a kernel without SO_PEERGROUPS
// (before Linux 4.13) are the groups read from <procRoot>/<pid>/status, still at accept,
// so a later reuse of the pid cannot lend its groups to this connection; the command name
// (for logs and events) is read there too. A caller that already exited keeps only its
// primary gid.
func peerCredentials(uc *net.UnixConn, procRoot string) (api.Caller, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return api.Caller{}, err
	}
	var cred *unix.Ucred
	var groups []int
	var serr, gerr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if serr == nil {
			groups, gerr = peerGroups(int(fd))
		}
	}); err != nil {
		return api.Caller{}, err
	}
	if serr != nil {
		return api.Caller{}, fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	c := api.Caller{UID: int(cred.Uid), GID: int(cred.Gid), PID: int(cred.Pid), Groups: groups}
	if gerr != nil {
		c.Groups = procGroups(procRoot, c.PID)
	}
	if c.PID > 0 {
		if b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(c.PID), "comm")); err == nil {
			c.Comm = strings.TrimSpace(string(b))
		}
	}
	return c, nil
}

// peerGroups reads SO_PEERGROUPS: the peer's supplementary gids at connect().
func peerGroups(fd int) ([]int, error) {
	buf := make([]uint32, 64)
	for {
		n, err := getsockoptGids(fd, buf)
		if errors.Is(err, unix.ERANGE) && n > len(buf) && n <= 1<<16 {
			buf = make([]uint32, n)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("SO_PEERGROUPS: %w", err)
		}
		out := make([]int, n)
		for i, g := range buf[:n] {
			out[i] = int(g)
		}
		return out, nil
	}
}

// procGroups reads the Groups line of <procRoot>/<pid>/status (nil when unreadable).
func procGroups(procRoot string, pid int) []int {
	if pid <= 0 {
		return nil
	}
	f, err := os.Open(filepath.Join(procRoot, strconv.Itoa(pid), "status"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Groups:")
		if !ok {
			continue
		}
		for _, g := range strings.Fields(rest) {
			if n, err := strconv.Atoi(g); err == nil {
				out = append(out, n)
			}
		}
		break
	}
	return out
}
