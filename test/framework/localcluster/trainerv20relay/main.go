package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/tether-dev/tether/test/framework/localcluster/connrelay"
)

// envFlag collects the repeated -manager-env flag.
type envFlag []string

func (e *envFlag) String() string     { return strings.Join(*e, " ") }
func (e *envFlag) Set(v string) error { *e = append(*e, v); return nil }

type config struct {
	workDir, apiListen, apiSocket, webhookSocket, webhookTarget string
	privateTmp, relayPIDFile, managerPIDFile                    string
	managerEnv                                                  envFlag
	manager                                                     []string // binary, then its arguments
}

func main() { os.Exit(run()) }

func run() int {
	var cfg config
	fs := flag.NewFlagSet("trainerv20relay", flag.ContinueOnError)
	fs.StringVar(&cfg.workDir, "workdir", "", "working directory; socket and PID file names are relative to it")
	fs.StringVar(&cfg.apiListen, "api-listen", "", "host:port inside the namespace where the manager expects the kube-apiserver")
	fs.StringVar(&cfg.apiSocket, "api-socket", "", "Unix socket (relative to -workdir) that reaches the kube-apiserver")
	fs.StringVar(&cfg.webhookSocket, "webhook-socket", "", "Unix socket (relative to -workdir) to listen on for the manager's webhook")
	fs.StringVar(&cfg.webhookTarget, "webhook-target", "", "host:port inside the namespace where the manager's webhook listens")
	fs.StringVar(&cfg.privateTmp, "private-tmp", "", "directory bind-mounted over /tmp in the mount namespace")
	fs.StringVar(&cfg.relayPIDFile, "relay-pid-file", "", "file (relative to -workdir) this process's PID is written to")
	fs.StringVar(&cfg.managerPIDFile, "manager-pid-file", "", "file (relative to -workdir) the manager's PID is written to")
	fs.Var(&cfg.managerEnv, "manager-env", "KEY=VALUE of the manager's environment (repeated)")
	// Not open, fd 3 may be the runtime's own (its poller's): only a pipe
	// is the status pipe.
	var st syscall.Stat_t
	if err := syscall.Fstat(3, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		fmt.Fprintln(os.Stderr, "trainerv20relay: file descriptor 3 is not the status pipe: StartTrainerV20 (test/framework/localcluster) starts this command")
		return 2
	}
	status := os.NewFile(3, "status")
	if err := fs.Parse(os.Args[1:]); err != nil {
		fmt.Fprintf(status, "error %v\n", err)
		return 2
	}
	cfg.manager = fs.Args()
	for name, v := range map[string]string{"-workdir": cfg.workDir, "-api-listen": cfg.apiListen, "-api-socket": cfg.apiSocket,
		"-webhook-socket": cfg.webhookSocket, "-webhook-target": cfg.webhookTarget, "-private-tmp": cfg.privateTmp,
		"-relay-pid-file": cfg.relayPIDFile, "-manager-pid-file": cfg.managerPIDFile} {
		if v == "" {
			fmt.Fprintf(status, "error %s is required\n", name)
			return 2
		}
	}
	if len(cfg.manager) == 0 {
		fmt.Fprintln(status, "error no manager binary given after the flags")
		return 2
	}
	return relay(cfg, status)
}

// relay is the process in the new namespaces: it brings loopback up, opens
// its listeners and the manager binary, makes the private tmp the
// namespace's /tmp, starts the manager, relays until SIGTERM (then stops the
// manager) or until the manager exits.
func relay(cfg config, status *os.File) int {
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s trainer-v2.0.0 relay: %s\n", time.Now().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
	}
	fail := func(format string, args ...any) int {
		msg := fmt.Sprintf(format, args...)
		logf("%s", msg)
		fmt.Fprintf(status, "error %s\n", msg)
		return 1
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	// Sockets and PID files are named relative to the working directory,
	// which stays reachable after /tmp is mounted over.
	if err := os.Chdir(cfg.workDir); err != nil {
		return fail("%v", err)
	}
	if err := syscall.Mount("none", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fail("making mounts private: %v", err)
	}
	if err := loopbackUp(); err != nil {
		return fail("bringing lo up: %v", err)
	}
	bin, err := os.Open(cfg.manager[0])
	if err != nil {
		return fail("%v", err)
	}
	defer bin.Close()
	apiLn, err := net.Listen("tcp", cfg.apiListen)
	if err != nil {
		return fail("%v", err)
	}
	_ = os.Remove(cfg.webhookSocket)
	whLn, err := net.Listen("unix", cfg.webhookSocket)
	if err != nil {
		return fail("%v", err)
	}
	if err := syscall.Mount(cfg.privateTmp, "/tmp", "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fail("mounting the private /tmp: %v", err)
	}
	apiRelay := connrelay.Start(apiLn, func() (net.Conn, error) {
		return net.DialTimeout("unix", cfg.apiSocket, 5*time.Second)
	})
	defer apiRelay.Close()
	whRelay := connrelay.Start(whLn, func() (net.Conn, error) {
		return net.DialTimeout("tcp", cfg.webhookTarget, 5*time.Second)
	})
	defer whRelay.Close()

	// The binary may sit under the old /tmp: exec it through the open file.
	cmd := &exec.Cmd{
		Path:        fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), bin.Fd()),
		Args:        append([]string{"trainer-controller-manager"}, cfg.manager[1:]...),
		Env:         cfg.managerEnv,
		Stdout:      os.Stdout,
		Stderr:      os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	}
	if err := cmd.Start(); err != nil {
		return fail("starting %s: %v", cfg.manager[0], err)
	}
	pid := cmd.Process.Pid
	logf("manager %s started, pid %d; relaying %s and %s", cfg.manager[0], pid, cfg.apiListen, cfg.webhookTarget)
	_ = os.WriteFile(cfg.relayPIDFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
	_ = os.WriteFile(cfg.managerPIDFile, []byte(strconv.Itoa(pid)+"\n"), 0o644)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	fmt.Fprintf(status, "ready %d\n", pid)
	_ = status.Close()

	select {
	case err := <-done:
		logf("manager exited: %v", err)
		return 1
	case sig := <-signals:
		logf("%v: stopping the manager", sig)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			logf("manager stopped: %v", err)
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			logf("manager killed after 5s: %v", <-done)
		}
		return 0
	}
}

// loopbackUp sets IFF_UP on lo (a new network namespace starts with lo down).
func loopbackUp() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var req struct {
		Name  [syscall.IFNAMSIZ]byte
		Flags uint16
		_     [22]byte
	}
	copy(req.Name[:], "lo")
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCGIFFLAGS, uintptr(unsafe.Pointer(&req))); e != 0 {
		return e
	}
	req.Flags |= syscall.IFF_UP
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&req))); e != 0 {
		return e
	}
	return nil
}
