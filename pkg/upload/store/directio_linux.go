//go:build linux

package store

import (
	"os"

	"golang.org/x/sys/unix"
)

const (
	haveDirectIO = true
	oDirect      = unix.O_DIRECT
)

// setDirect turns f's O_DIRECT on or off.
func setDirect(f *os.File, on bool) error {
	fd := int(f.Fd())
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return err
	}
	if on {
		fl |= unix.O_DIRECT
	} else {
		fl &^= unix.O_DIRECT
	}
	_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl)
	return err
}
