package s3server

import "syscall"

// The server dies with the process that started it, even when that one is
// killed outright.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
