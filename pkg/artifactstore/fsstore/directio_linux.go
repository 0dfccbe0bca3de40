//go:build linux

package fsstore

import (
	"os"

	"golang.org/x/sys/unix"
)

const (
	haveDirectIO = true
	oDirect      = unix.O_DIRECT
)

// clearDirect turns f's O_DIRECT off (for a tail that is not whole
// blocks, or a file system that refuses direct writes).
func clearDirect(f *os.File) error {
	fd := uintptr(f.Fd())
	fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
	if err != nil {
		return err
	}
	_, err = unix.FcntlInt(fd, unix.F_SETFL, fl&^unix.O_DIRECT)
	return err
}
