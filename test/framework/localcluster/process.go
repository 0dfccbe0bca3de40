package localcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Process is one child process of the cluster, with its output in a log file.
type Process struct {
	Name    string
	LogFile string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	mu      sync.Mutex
	stopped bool
}

// startProcess starts bin with args; its stdout and stderr go to
// <logDir>/<name>.log. The process gets its own process group (so Stop
// reaches its children) and dies with the harness (Pdeathsig).
func startProcess(logDir, name, bin string, args []string, env []string) (*Process, error) {
	return startProcessIn(logDir, name, bin, args, env, 0)
}

// startProcessIn is startProcess with the process in new namespaces
// (cloneflags, e.g. CLONE_NEWPID|CLONE_NEWNS for the real node's init).
func startProcessIn(logDir, name, bin string, args []string, env []string, cloneflags uintptr) (*Process, error) {
	logFile := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Cloneflags: cloneflags}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	p := &Process{Name: name, LogFile: logFile, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Signal sends sig to the process group.
func (p *Process) Signal(sig syscall.Signal) error {
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

// Stop sends SIGTERM to the process group, then SIGKILL after grace, and
// waits for the process to be reaped.
func (p *Process) Stop(grace time.Duration) error {
	return p.stop(grace, 0, nil)
}

// StopDumping is Stop for a Go program: one still running dumpAfter after
// SIGTERM gets SIGQUIT, on which the Go runtime writes every goroutine's
// stack to the log and exits, so a shutdown that hangs leaves its cause.
// dumped says it had to.
func (p *Process) StopDumping(grace, dumpAfter time.Duration) (dumped bool, err error) {
	err = p.stop(grace, dumpAfter, &dumped)
	return dumped, err
}

func (p *Process) stop(grace, dumpAfter time.Duration, dumped *bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return nil
	}
	p.stopped = true
	if exited, _ := p.Exited(); exited {
		return nil
	}
	_ = p.Signal(syscall.SIGTERM)
	kill := time.After(grace)
	var dump <-chan time.Time // nil: never
	if dumpAfter > 0 && dumpAfter < grace {
		dump = time.After(dumpAfter)
	}
wait:
	for {
		select {
		case <-p.done:
			return nil
		case <-dump:
			// The process alone: its children did not hang its shutdown.
			_ = p.cmd.Process.Signal(syscall.SIGQUIT)
			*dumped, dump = true, nil
		case <-kill:
			break wait
		}
	}
	_ = p.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.Name, p.PID())
	}
}

// waitTCP waits until addr accepts TCP connections, or p exits, or ctx ends.
func waitTCP(ctx context.Context, p *Process, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return nil
		}
		if p != nil {
			if exited, werr := p.Exited(); exited {
				return fmt.Errorf("%s exited (%v) before listening on %s; see %s", p.Name, werr, addr, p.LogFile)
			}
		}
		if time.Now().After(deadline) {
			where := ""
			if p != nil {
				where = "; see " + p.LogFile
			}
			return fmt.Errorf("nothing listening on %s after %s%s", addr, timeout, where)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func hostOf(addr string) string {
	h, _, _ := net.SplitHostPort(addr)
	return h
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
