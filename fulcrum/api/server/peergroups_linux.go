//go:build linux && !386

package server

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// getsockoptGids reads SO_PEERGROUPS into buf and returns how many gids the peer has
// (more than len(buf) with ERANGE when buf is too small). x/sys/unix has no typed
// wrapper for it, and GetsockoptString stops at the first zero byte of a gid.
func getsockoptGids(fd int, buf []uint32) (int, error) {
	size := uint32(len(buf) * 4)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 {
		return int(size / 4), errno
	}
	return int(size / 4), nil
}
