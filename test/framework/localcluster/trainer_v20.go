package localcluster

// Kubeflow Trainer v2.0.0's controller manager, run with every listener on
// loopback.
//
// What v2.0.0 offers (cmd/trainer-controller-manager/main.go, pkg/util/cert):
//   - flags: --metrics-bind-address (default "0" = off), --health-probe-bind-address
//     (default ":8081"), --leader-elect (default false), --metrics-secure,
//     --enable-http2, --webhook-server-port (default 9443), --webhook-service-name,
//     --webhook-secret-name, --kubeconfig, --zap-*; no config file.
//   - the webhook server is given only a port, so it listens on all interfaces;
//   - cert management cannot be turned off: open-policy-agent/cert-controller's
//     rotator keeps the Secret kubeflow-system/kubeflow-trainer-webhook-cert
//     (the namespace is read from the service-account namespace file when
//     present). The Secret must exist before start or the manager exits. When
//     its CA (checked for the DNS name "kubeflow-trainer-ca") or its serving cert
//     (checked for "<service>.<namespace>.svc") is not valid for 90 more days, it
//     writes new ones into the Secret. It never writes the cert files: it waits
//     up to ~17 min for tls.crt in the fixed directory
//     /tmp/k8s-webhook-server/serving-certs, which the webhook server also reads
//     (os.TempDir()-based, so it is the same path with TMPDIR unset). It copies
//     the Secret's ca.crt into the caBundle of the ValidatingWebhookConfiguration
//     "validator.trainer.kubeflow.org" when that exists; a missing one is only
//     logged, so it need not be created beforehand.
//
// So flags cannot keep the webhook listener off other interfaces, and the cert
// directory is fixed: the manager runs in its own network and mount namespaces
// (root), where the only interface is loopback and /tmp is WorkDir/tmp. A relay
// process in those namespaces (the trainerv20relay command, built into
// WorkDir/bin) forwards
//
//	127.0.0.1:<apiserver port> in the namespace -> WorkDir/apiserver.sock -> the kube-apiserver
//	cfg.WebhookAddr on the host -> WorkDir/webhook.sock -> 127.0.0.1:9443 in the namespace
//
// (path-based Unix sockets work across network namespaces). Metrics and health
// probes are off (the probe default :8081 would be all interfaces); readiness is
// an AdmissionReview sent through the relay. The Secret is
// written so that the rotator accepts it as is and injects a caBundle that
// includes the caller's CA: ca.crt is a throw-away RSA CA named
// kubeflow-trainer-ca (the rotator reads only the first certificate and needs
// its PKCS#1 key in ca.key) followed by the caller's ca.crt, and tls.crt/tls.key
// are a throw-away cert for the in-cluster service name. The files the webhook
// actually serves are the caller's.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/tether-dev/tether/test/framework/localcluster/connrelay"
)

// TrainerV20Config describes how to run Trainer v2.0.0's manager against a local kube-apiserver.
type TrainerV20Config struct {
	Binary      string // the v2.0.0 trainer-controller-manager binary
	Kubeconfig  string // admin kubeconfig; its server is https://127.0.0.1:<port>
	CertDir     string // tls.crt, tls.key (serving cert valid for 127.0.0.1 and localhost), ca.crt
	WorkDir     string // private directory for logs, sockets, a private tmp
	WebhookAddr string // 127.0.0.1:<port> on the host where the apiserver will call Trainer's webhooks
	LogFile     string // where the manager's stdout/stderr go
}

const (
	// TrainerV20WebhookConfigurationName is the ValidatingWebhookConfiguration
	// whose caBundle v2.0.0's cert rotator overwrites (with a bundle that
	// includes the caller's CA, see above).
	TrainerV20WebhookConfigurationName = "validator.trainer.kubeflow.org"
	// TrainerV20RelayPIDFile and TrainerV20ManagerPIDFile (in WorkDir) hold the
	// PIDs of the relay and of the manager once StartTrainerV20 returned.
	TrainerV20RelayPIDFile = "relay.pid"
	// TrainerV20ManagerPIDFile: see TrainerV20RelayPIDFile.
	TrainerV20ManagerPIDFile = "manager.pid"

	trainerV20Namespace     = "kubeflow-system"
	trainerV20SecretName    = "kubeflow-trainer-webhook-cert"
	trainerV20ServiceName   = "kubeflow-trainer-controller-manager"
	trainerV20CAName        = "kubeflow-trainer-ca"
	trainerV20NSFile        = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
	trainerV20CertSubdir    = "k8s-webhook-server/serving-certs"
	trainerV20WebhookTarget = "127.0.0.1:9443" // inside the namespace
	trainerV20ProbePath     = "/validate-trainer-kubeflow-org-v1alpha1-trainjob"
	trainerV20APISocket     = "apiserver.sock"
	trainerV20WebhookSocket = "webhook.sock"
	trainerV20StartTimeout  = 2 * time.Minute
)

// StartTrainerV20 starts the manager and returns once its webhook answers TLS on WebhookAddr;
// stop kills every process it started (by PID / process group) and waits for them.
//
// ctx bounds the start only (at most 2 minutes); the processes live until stop.
// It creates the namespace kubeflow-system and the Secret
// kubeflow-trainer-webhook-cert in it (overwriting that Secret).
func StartTrainerV20(ctx context.Context, cfg TrainerV20Config) (stop func() error, err error) {
	workDir, err := checkTrainerV20Config(cfg)
	if err != nil {
		return nil, err
	}
	relayBin, err := buildTrainerV20Relay(workDir)
	if err != nil {
		return nil, fmt.Errorf("trainer v2.0.0: building the relay: %w", err)
	}
	privateTmp := filepath.Join(workDir, "tmp")
	certDir := filepath.Join(privateTmp, trainerV20CertSubdir)
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chmod(privateTmp, 0o1777); err != nil {
		return nil, err
	}
	restCfg, apiAddr, apiListen, err := writeTrainerV20Kubeconfig(cfg.Kubeconfig, privateTmp)
	if err != nil {
		return nil, err
	}
	caPEM, err := installTrainerV20Certs(ctx, cfg.CertDir, certDir, restCfg)
	if err != nil {
		return nil, err
	}

	logFile, err := os.OpenFile(cfg.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	var cleanups []func()
	cleanup := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
		cleanups = nil
	}
	cleanups = append(cleanups, func() { _ = logFile.Close() })
	defer func() {
		if err != nil {
			cleanup()
		}
	}()

	// Host side of the relay.
	apiSock := filepath.Join(workDir, trainerV20APISocket)
	_ = os.Remove(apiSock)
	apiLn, err := net.Listen("unix", apiSock)
	if err != nil {
		return nil, fmt.Errorf("trainer v2.0.0: %w", err)
	}
	apiRelay := connrelay.Start(apiLn, func() (net.Conn, error) { return net.DialTimeout("tcp", apiAddr, 5*time.Second) })
	cleanups = append(cleanups, func() { apiRelay.Close(); _ = os.Remove(apiSock) })
	whLn, err := net.Listen("tcp", cfg.WebhookAddr)
	if err != nil {
		return nil, fmt.Errorf("trainer v2.0.0: webhook address: %w", err)
	}
	whSock := filepath.Join(workDir, trainerV20WebhookSocket)
	whRelay := connrelay.Start(whLn, func() (net.Conn, error) { return net.DialTimeout("unix", whSock, 5*time.Second) })
	cleanups = append(cleanups, whRelay.Close)

	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer statusR.Close()
	cmd := &exec.Cmd{
		Path:       relayBin,
		Args:       append([]string{"trainerv20relay"}, trainerV20RelayArgs(cfg.Binary, workDir, apiListen, privateTmp)...),
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		Stdout:     logFile,
		Stderr:     logFile,
		ExtraFiles: []*os.File{statusW},
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:      true,
			Pdeathsig:    syscall.SIGKILL,
			Unshareflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS,
		},
	}
	err = cmd.Start()
	_ = statusW.Close()
	if err != nil {
		return nil, fmt.Errorf("trainer v2.0.0: starting the relay in new network and mount namespaces (needs root): %w", err)
	}
	run := &trainerV20Run{cfg: cfg, relayPID: cmd.Process.Pid, exited: make(chan struct{}), cleanup: cleanup}
	go func() { run.waitErr = cmd.Wait(); close(run.exited) }()
	defer func() {
		if err != nil {
			_ = run.stop()
		}
	}()

	ctx, cancel := context.WithTimeout(ctx, trainerV20StartTimeout)
	defer cancel()
	if err := run.waitReady(ctx, statusR, caPEM); err != nil {
		return nil, err
	}
	return run.stop, nil
}

// checkTrainerV20Config checks cfg and returns WorkDir made absolute.
func checkTrainerV20Config(cfg TrainerV20Config) (workDir string, err error) {
	if cfg.Binary == "" || cfg.Kubeconfig == "" || cfg.CertDir == "" || cfg.WorkDir == "" || cfg.WebhookAddr == "" || cfg.LogFile == "" {
		return "", errors.New("trainer v2.0.0: every TrainerV20Config field is required")
	}
	if err := requireLoopback(cfg.WebhookAddr); err != nil {
		return "", fmt.Errorf("trainer v2.0.0: WebhookAddr: %w", err)
	}
	if fi, err := os.Stat(cfg.Binary); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("trainer v2.0.0: %s is not an executable (build it with `hack/testbin.sh trainer-controller-manager-v2.0.0`)", cfg.Binary)
	}
	workDir, err = filepath.Abs(cfg.WorkDir)
	if err != nil {
		return "", err
	}
	for _, s := range []string{trainerV20APISocket, trainerV20WebhookSocket} {
		if p := filepath.Join(workDir, s); len(p) >= 108 {
			return "", fmt.Errorf("trainer v2.0.0: socket path %s is too long for a Unix socket; use a shorter WorkDir", p)
		}
	}
	return workDir, nil
}

// writeTrainerV20Kubeconfig writes the kubeconfig, made self-contained
// (paths under /tmp are hidden in the namespace), into the private /tmp.
// apiAddr is the apiserver's loopback address on the host; apiListen is
// where the relay listens for it in the namespace.
func writeTrainerV20Kubeconfig(path, privateTmp string) (restCfg *rest.Config, apiAddr, apiListen string, err error) {
	raw, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, "", "", fmt.Errorf("trainer v2.0.0: kubeconfig: %w", err)
	}
	if err := clientcmdapi.FlattenConfig(raw); err != nil {
		return nil, "", "", fmt.Errorf("trainer v2.0.0: kubeconfig: %w", err)
	}
	restCfg, err = clientcmd.NewDefaultClientConfig(*raw, nil).ClientConfig()
	if err != nil {
		return nil, "", "", fmt.Errorf("trainer v2.0.0: kubeconfig: %w", err)
	}
	server, err := url.Parse(restCfg.Host)
	if err != nil {
		return nil, "", "", fmt.Errorf("trainer v2.0.0: kubeconfig server %q: %w", restCfg.Host, err)
	}
	apiAddr = server.Host
	if server.Port() == "" {
		apiAddr = net.JoinHostPort(server.Hostname(), "443")
	}
	if err := requireLoopback(apiAddr); err != nil {
		return nil, "", "", fmt.Errorf("trainer v2.0.0: kubeconfig server: %w", err)
	}
	apiListen = apiAddr
	if strings.EqualFold(server.Hostname(), "localhost") {
		apiListen = net.JoinHostPort("127.0.0.1", portOfAddr(apiAddr))
	}
	kubeconfig, err := clientcmd.Write(*raw)
	if err != nil {
		return nil, "", "", err
	}
	if err := os.WriteFile(filepath.Join(privateTmp, "kubeconfig"), kubeconfig, 0o600); err != nil {
		return nil, "", "", err
	}
	return restCfg, apiAddr, apiListen, nil
}

// installTrainerV20Certs copies the caller's serving cert to where the
// manager looks for it, writes the Secret its rotator checks, and returns
// the caller's CA.
func installTrainerV20Certs(ctx context.Context, from, certDir string, restCfg *rest.Config) (caPEM []byte, err error) {
	for _, name := range []string{"ca.crt", "tls.crt", "tls.key"} {
		b, err := os.ReadFile(filepath.Join(from, name))
		if err != nil {
			return nil, fmt.Errorf("trainer v2.0.0: CertDir: %w", err)
		}
		if name == "ca.crt" {
			caPEM = b
		}
		if err := os.WriteFile(filepath.Join(certDir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("trainer v2.0.0: %w", err)
	}
	if err := writeTrainerV20Secret(ctx, cs, caPEM); err != nil {
		return nil, fmt.Errorf("trainer v2.0.0: cert secret: %w", err)
	}
	return caPEM, nil
}

// trainerV20RelayArgs are the relay's flags, then the manager's command
// line: every listener off but the webhook's, inside the namespace.
func trainerV20RelayArgs(binary, workDir, apiListen, privateTmp string) []string {
	return []string{
		"-workdir=" + workDir,
		"-api-listen=" + apiListen,
		"-api-socket=" + trainerV20APISocket,
		"-webhook-socket=" + trainerV20WebhookSocket,
		"-webhook-target=" + trainerV20WebhookTarget,
		"-private-tmp=" + privateTmp,
		"-relay-pid-file=" + TrainerV20RelayPIDFile,
		"-manager-pid-file=" + TrainerV20ManagerPIDFile,
		"-manager-env=PATH=/usr/local/bin:/usr/bin:/bin", "-manager-env=HOME=/tmp", "-manager-env=TMPDIR=/tmp",
		"--",
		binary,
		"--kubeconfig=/tmp/kubeconfig",
		"--metrics-bind-address=0",
		"--health-probe-bind-address=0",
		"--leader-elect=false",
		"--webhook-server-port=" + portOfAddr(trainerV20WebhookTarget),
		"--webhook-service-name=" + trainerV20ServiceName,
		"--webhook-secret-name=" + trainerV20SecretName,
	}
}

// trainerV20Run is the running relay (which runs the manager in its
// namespaces) and what to undo once it stopped.
type trainerV20Run struct {
	cfg        TrainerV20Config
	relayPID   int
	managerPID int // once the relay reported it
	exited     chan struct{}
	waitErr    error // the relay's exit, set before exited is closed
	cleanup    func()

	once    sync.Once
	stopErr error
}

// stop stops the relay, which stops the manager (SIGTERM, SIGKILL after 5s)
// and reaps it, kills anything left in its process group, and cleans up.
func (r *trainerV20Run) stop() error {
	r.once.Do(func() {
		_ = syscall.Kill(r.relayPID, syscall.SIGTERM)
		select {
		case <-r.exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-r.relayPID, syscall.SIGKILL)
			<-r.exited
		}
		_ = syscall.Kill(-r.relayPID, syscall.SIGKILL) // anything left in the group
		if r.managerPID > 0 {
			if err := waitPIDGone(r.managerPID, 10*time.Second); err != nil {
				_ = syscall.Kill(r.managerPID, syscall.SIGKILL)
				r.stopErr = fmt.Errorf("trainer v2.0.0: %w", err)
			}
		}
		r.cleanup()
	})
	return r.stopErr
}

func (r *trainerV20Run) early() error {
	return fmt.Errorf("trainer v2.0.0 manager exited early (%v); see %s:\n%s", r.waitErr, r.cfg.LogFile, tailOf(r.cfg.LogFile, 3000))
}

// waitReady waits for the relay's status line on statusR, "ready <manager
// pid>" or "error <message>", and then until the trainjob validator answers
// through the relay with the caller's CA; it is registered after the
// rotator's checks, last of three.
func (r *trainerV20Run) waitReady(ctx context.Context, statusR *os.File, caPEM []byte) error {
	status := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(statusR).ReadString('\n')
		status <- strings.TrimSpace(line)
	}()
	select {
	case line := <-status:
		if pid, ok := strings.CutPrefix(line, "ready "); ok {
			r.managerPID, _ = strconv.Atoi(pid)
		} else {
			<-r.exited
			return fmt.Errorf("trainer v2.0.0 relay failed: %q; see %s", line, r.cfg.LogFile)
		}
	case <-r.exited:
		return r.early()
	case <-ctx.Done():
		return fmt.Errorf("trainer v2.0.0: relay did not start: %w; see %s", ctx.Err(), r.cfg.LogFile)
	}

	var lastErr error
	for {
		if lastErr = probeTrainerV20(ctx, r.cfg.WebhookAddr, caPEM); lastErr == nil {
			return nil
		}
		select {
		case <-r.exited:
			return r.early()
		case <-ctx.Done():
			return fmt.Errorf("trainer v2.0.0 webhook not ready on %s: %v (%w); see %s", r.cfg.WebhookAddr, lastErr, ctx.Err(), r.cfg.LogFile)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// buildTrainerV20Relay builds the trainerv20relay command into
// workDir/bin, as the harness builds its other helpers (goBuild).
func buildTrainerV20Relay(workDir string) (string, error) {
	dir := filepath.Join(workDir, "bin")
	if err := goBuild(dir, "./test/framework/localcluster/trainerv20relay"); err != nil {
		return "", err
	}
	return filepath.Join(dir, "trainerv20relay"), nil
}

func requireLoopback(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if _, err := strconv.Atoi(port); err != nil {
		return fmt.Errorf("%s: bad port", addr)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%s is not a loopback address", addr)
	}
	return nil
}

func portOfAddr(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// waitPIDGone waits until pid no longer exists (reaped).
func waitPIDGone(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d still exists after %v", pid, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func tailOf(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		_, _ = f.Seek(fi.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}
