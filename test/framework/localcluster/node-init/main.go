// Command node-init is PID 1 of the real node's private PID and mount
// namespaces (test/framework/localcluster/node.go). The harness starts it
// with CLONE_NEWPID|CLONE_NEWNS; it makes every mount private, mounts a /proc
// of its own, bind-mounts the node's directories over the host paths the
// kubelet and containerd hard-code (/var/lib, /var/log, /run) and value files
// over the host sysctls the kubelet rewrites, then runs the node's processes
// in order (containerd, image imports, the kubelet, on the cluster network's
// nodes kube-proxy) and reaps every orphan
// (containerd's shims re-parent to it).
//
// One namespace for all of them matters twice: runc must see the kubelet's
// Secret and emptyDir mounts, and when node-init ends the kernel kills every
// process left in the PID namespace — shims and containers included — so no
// node process outlives the harness, even one killed outright.
//
// On SIGTERM it stops the long-running processes newest first (SIGTERM, then
// SIGKILL after the spec's grace) and exits; the kernel ends the rest.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/tether-dev/tether/test/framework/localcluster/nodespec"
)

func main() {
	specPath := flag.String("spec", "", "path of the JSON Spec")
	flag.Parse()
	if err := run(*specPath); err != nil {
		fmt.Fprintf(os.Stderr, "node-init: %v\n", err)
		os.Exit(1)
	}
}

// reaper collects every child's exit status (PID 1 must reap orphans) and
// hands the ones node-init started to their waiters.
type reaper struct {
	mu      sync.Mutex
	waiters map[int]chan syscall.WaitStatus
	exited  map[int]syscall.WaitStatus
}

func (r *reaper) watch(pid int) <-chan syscall.WaitStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := make(chan syscall.WaitStatus, 1)
	if ws, ok := r.exited[pid]; ok {
		ch <- ws
		delete(r.exited, pid)
		return ch
	}
	r.waiters[pid] = ch
	return ch
}

func (r *reaper) loop(sigchld <-chan os.Signal) {
	for range sigchld {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
			r.mu.Lock()
			if ch, ok := r.waiters[pid]; ok {
				ch <- ws
				delete(r.waiters, pid)
			} else {
				// Started but not yet watched, or an orphan (its status is
				// dropped when nobody asks). Bounded: only started pids are kept.
				r.exited[pid] = ws
				if len(r.exited) > 4096 {
					clear(r.exited)
				}
			}
			r.mu.Unlock()
		}
	}
}

type daemon struct {
	step nodespec.Step
	pid  int
	done <-chan syscall.WaitStatus
}

func run(specPath string) error {
	if os.Getpid() != 1 {
		return errors.New("must run as PID 1 of a new PID namespace (the harness starts it with CLONE_NEWPID|CLONE_NEWNS)")
	}
	raw, err := os.ReadFile(specPath)
	if err != nil {
		return err
	}
	var spec nodespec.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return fmt.Errorf("spec %s: %w", specPath, err)
	}
	grace, err := time.ParseDuration(spec.StopGrace)
	if err != nil {
		grace = 10 * time.Second
	}

	sigchld := make(chan os.Signal, 64)
	signal.Notify(sigchld, syscall.SIGCHLD)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	r := &reaper{waiters: map[int]chan syscall.WaitStatus{}, exited: map[int]syscall.WaitStatus{}}
	go r.loop(sigchld)

	if err := setupMounts(spec.Binds); err != nil {
		return err
	}
	fmt.Println("node-init: mounts ready")
	if spec.WaitFile != "" {
		if err := waitFile(spec.WaitFile, term); err != nil {
			return err
		}
		fmt.Println("node-init: network ready")
	}

	var daemons []daemon
	stopAll := func() {
		for i := len(daemons) - 1; i >= 0; i-- {
			d := daemons[i]
			_ = syscall.Kill(-d.pid, syscall.SIGTERM)
			select {
			case <-d.done:
			case <-time.After(grace):
				_ = syscall.Kill(-d.pid, syscall.SIGKILL)
				<-d.done
			}
			fmt.Printf("node-init: %s stopped\n", d.step.Name)
		}
	}
	failed := make(chan string, len(spec.Steps))
	for _, st := range spec.Steps {
		pid, err := start(st)
		if err != nil {
			stopAll()
			return err
		}
		done := r.watch(pid)
		fmt.Printf("node-init: started %s (pid %d in the node's namespace)\n", st.Name, pid)
		switch {
		case st.RunToCompletion:
			select {
			case ws := <-done:
				if ws.ExitStatus() != 0 {
					stopAll()
					return fmt.Errorf("%s exited with %d; see %s", st.Name, ws.ExitStatus(), st.Log)
				}
			case <-term:
				stopAll()
				return nil
			}
			continue
		case st.WaitSocket != "":
			if err := waitSocket(st, done); err != nil {
				stopAll()
				return err
			}
		}
		// A daemon that ends by itself ends the node: the harness sees
		// node-init exit and reports it with the daemon's log.
		relay := make(chan syscall.WaitStatus, 1)
		go func(name string) {
			ws := <-done
			relay <- ws
			failed <- fmt.Sprintf("%s exited (%v)", name, ws)
		}(st.Name)
		daemons = append(daemons, daemon{step: st, pid: pid, done: relay})
	}
	fmt.Println("node-init: all steps started")
	select {
	case <-term:
		stopAll()
		return nil
	case why := <-failed:
		stopAll()
		return errors.New(why)
	}
}

func start(st nodespec.Step) (int, error) {
	logf, err := os.OpenFile(st.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer devnull.Close()
	p, err := os.StartProcess(st.Path, append([]string{st.Path}, st.Args...), &os.ProcAttr{
		Env:   st.Env,
		Files: []*os.File{devnull, logf, logf},
		// Its own process group, so stopAll reaches its children (ctr, shims
		// started without setsid) and the harness's group signal reaches only
		// node-init, which stops the node in order.
		Sys: &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		return 0, fmt.Errorf("starting %s (%s): %w", st.Name, st.Path, err)
	}
	pid := p.Pid
	// The reaper owns waiting; the os.Process handle is not used again.
	_ = p.Release()
	return pid, nil
}

// waitFile waits (at most two minutes) for the harness to create path; a
// SIGTERM meanwhile ends node-init with nothing started.
func waitFile(path string, term <-chan os.Signal) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not created within 2m: the harness did not finish the node's network", path)
		}
		select {
		case <-term:
			return errors.New("stopped while waiting for the node's network")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func waitSocket(st nodespec.Step, done <-chan syscall.WaitStatus) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		if c, err := net.Dial("unix", st.WaitSocket); err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case ws := <-done:
			return fmt.Errorf("%s exited (%v) before creating %s; see %s", st.Name, ws, st.WaitSocket, st.Log)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not create %s within 60s; see %s", st.Name, st.WaitSocket, st.Log)
		}
	}
}

// setupMounts makes this namespace's mounts private (nothing propagates to
// the host), mounts /proc for the new PID namespace, and makes the binds.
func setupMounts(binds []nodespec.Bind) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private: %w", err)
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	for _, b := range binds {
		if _, err := os.Stat(b.Target); err != nil {
			return fmt.Errorf("bind target %s: %w", b.Target, err)
		}
		if err := syscall.Mount(b.Source, b.Target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s over %s: %w", b.Source, b.Target, err)
		}
	}
	// Paths the harness created are absolute; make sure the ones the daemons
	// hard-code below the binds exist.
	for _, d := range []string{"/var/lib/kubelet/device-plugins", "/var/log/containers", "/var/log/pods", "/run/containerd"} {
		if err := os.MkdirAll(filepath.Clean(d), 0o755); err != nil {
			return err
		}
	}
	return nil
}
