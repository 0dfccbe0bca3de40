//go:build !linux

package s3server

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
