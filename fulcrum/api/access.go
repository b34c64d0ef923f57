package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
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
	Allow(c Caller) error
}

// PolicyFunc adapts a function to Policy.
type PolicyFunc func(Caller) error

// Allow calls f.
func (f PolicyFunc) Allow(c Caller) error { return f(c) }

// GroupPolicy is the default policy: root, members of the group with GID (primary or
// supplementary), and the configured extra uids and gids may change things.
type GroupPolicy struct {
	GID       int    // the fulcrum group's gid; -1 when the group does not exist
	GroupName string // for messages
	AllowUIDs []int
	AllowGIDs []int
}

// Allow implements Policy.
func (p GroupPolicy) Allow(c Caller) error {
	if c.UID == 0 || slices.Contains(p.AllowUIDs, c.UID) {
		return nil
	}
	gids := append([]int{c.GID}, c.Groups...)
	for _, g := range gids {
		if (p.GID >= 0 && g == p.GID) || slices.Contains(p.AllowGIDs, g) {
			return nil
		}
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

type callerKey struct{}

// withPeer stores the connection's peer credentials in ctx (http.Server.ConnContext).
// A connection whose credentials cannot be read gets none: it may only read.
func withPeer(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || serr != nil {
		return ctx
	}
	return context.WithValue(ctx, callerKey{}, Caller{UID: int(cred.Uid), GID: int(cred.Gid), PID: int(cred.Pid)})
}

// callerFrom returns the peer of the request's connection.
func callerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// fillProc adds the caller's command name and supplementary groups from
// <procRoot>/<pid>/. SO_PEERCRED gives the pid as seen in fulcrumd's pid namespace, so
// the lookup is right for callers in containers too; a caller that already exited keeps
// only its primary gid.
func fillProc(procRoot string, c Caller) Caller {
	if c.PID <= 0 {
		return c
	}
	dir := filepath.Join(procRoot, strconv.Itoa(c.PID))
	if b, err := os.ReadFile(filepath.Join(dir, "comm")); err == nil {
		c.Comm = strings.TrimSpace(string(b))
	}
	f, err := os.Open(filepath.Join(dir, "status"))
	if err != nil {
		return c
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Groups:")
		if !ok {
			continue
		}
		for _, g := range strings.Fields(rest) {
			if n, err := strconv.Atoi(g); err == nil {
				c.Groups = append(c.Groups, n)
			}
		}
		break
	}
	return c
}
