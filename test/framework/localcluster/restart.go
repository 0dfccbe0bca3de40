package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RestartAPIServer stops kube-apiserver (SIGTERM and, after 15s of
// draining, SIGKILL, as a static pod's restart does), keeps it down for down, starts it again with
// the same flags, certificates and etcd, and waits until it is ready. It
// returns how long the apiserver was unavailable, from the stop to the
// first successful readiness check.
func (c *Cluster) RestartAPIServer(ctx context.Context, down time.Duration) (time.Duration, error) {
	return c.restartComponent(ctx, "kube-apiserver", down, func(ctx context.Context) error {
		return c.Clientset.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
	})
}

// RestartEtcd stops etcd (SIGTERM), keeps it down for down, starts it again
// on the same data directory and URLs, and waits until the apiserver reads
// through it again. It returns how long etcd was unavailable.
func (c *Cluster) RestartEtcd(ctx context.Context, down time.Duration) (time.Duration, error) {
	return c.restartComponent(ctx, "etcd", down, func(ctx context.Context) error {
		// Readiness of the apiserver includes its etcd check.
		return c.Clientset.Discovery().RESTClient().Get().AbsPath("/readyz/etcd").Do(ctx).Error()
	})
}

// restartComponent stops the running process of the cluster binary name
// (envtest's, or one restarted before), waits down, starts it again with the
// same command line and environment as a tracked process, and polls ready.
func (c *Cluster) restartComponent(ctx context.Context, name string, down time.Duration, ready func(context.Context) error) (time.Duration, error) {
	pid, err := c.componentPID(name)
	if err != nil {
		return 0, err
	}
	argv, err := procStrings(pid, "cmdline")
	if err != nil {
		return 0, err
	}
	env, err := procStrings(pid, "environ")
	if err != nil {
		return 0, err
	}
	stopped := time.Now()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return 0, fmt.Errorf("stopping %s (pid %d): %w", name, pid, err)
	}
	// A static pod's restart: SIGTERM, then SIGKILL after a grace period.
	if err := waitGone(ctx, pid, 15*time.Second); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		if err := waitGone(ctx, pid, 10*time.Second); err != nil {
			return 0, fmt.Errorf("%s (pid %d) did not stop: %w", name, pid, err)
		}
	}
	c.untrackWhere(func(p *Process) bool { return p.PID() == pid })
	c.Opts.Log("%s (pid %d) stopped; down for %s", name, pid, down)
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(down):
	}
	// The same binary, flags and environment; Pdeathsig from startProcess
	// replaces setpriv's.
	p, err := startProcessIn(c.logDir(), name+"-restarted", argv[0], argv[1:], env, 0)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	c.processes = append(c.processes, p)
	c.mu.Unlock()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := ready(cctx)
		cancel()
		if err == nil {
			break
		}
		if exited, werr := p.Exited(); exited {
			return 0, fmt.Errorf("%s exited after its restart (%v); see %s", name, werr, p.LogFile)
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s not ready 2m after its restart: %w", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	unavailable := time.Since(stopped)
	c.Opts.Log("%s restarted (pid %d), ready %.1fs after it stopped", name, p.PID(), unavailable.Seconds())
	return unavailable, nil
}

// componentPID finds the live child process of this harness that runs the
// cluster's binary name.
func (c *Cluster) componentPID(name string) (int, error) {
	want, err := filepath.EvalSymlinks(c.bin(name)) // /proc/<pid>/exe is resolved
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || exe != want {
			continue
		}
		if ppid, err := parentPID(pid); err == nil && ppid == self {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no running %s started by this process", want)
}

func parentPID(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ...: comm may hold spaces, so cut at the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, errors.New("malformed stat")
	}
	return strconv.Atoi(f[1])
}

func procStrings(pid int, file string) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), nil
}

// waitGone waits until pid no longer exists (its parent reaped it).
func waitGone(ctx context.Context, pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("still running")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
