//go:build !linux || 386

package server

import "golang.org/x/sys/unix"

// getsockoptGids: without a getsockopt system call of its own (386 goes through
// socketcall) fulcrumd falls back to reading the groups from /proc at accept.
func getsockoptGids(int, []uint32) (int, error) { return 0, unix.ENOPROTOOPT }
