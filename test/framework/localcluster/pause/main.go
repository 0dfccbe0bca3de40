// Command pause is the sandbox ("pause") image of the local cluster's real
// containerd nodes: it holds the pod sandbox (and so the pod's network
// namespace) by blocking until SIGTERM or SIGINT, then exits 0. It is a
// static Go program so the image needs nothing but the binary. Unlike the
// upstream pause it reaps no children: with no shared PID namespace it is
// no pod's init.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
