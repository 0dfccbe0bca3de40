package upload

import (
	"os/exec"
	"syscall"
)

// On Linux, versitygw dies with the test binary even when that is killed.
func init() {
	configureServerCmd = func(c *exec.Cmd) {
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
}
