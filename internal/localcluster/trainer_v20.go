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
// process in those namespaces (this binary, re-executed) forwards
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
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
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
	trainerV20RelayEnv      = "TETHER_TRAINER_V20_RELAY"
	trainerV20StartTimeout  = 2 * time.Minute
)

// Any binary that links this package doubles as the relay: StartTrainerV20
// re-executes /proc/self/exe with trainerV20RelayEnv set.
func init() {
	if spec := os.Getenv(trainerV20RelayEnv); spec != "" {
		os.Exit(runTrainerV20Relay(spec))
	}
}

// trainerV20RelaySpec is what the relay gets (as JSON in trainerV20RelayEnv).
type trainerV20RelaySpec struct {
	WorkDir   string   // the relay's working directory; socket and PID file names are relative to it
	Binary    string   // the manager
	Args      []string // the manager's arguments
	Env       []string // the manager's environment
	APIListen string   // where the manager expects the apiserver, inside the namespace
}

// StartTrainerV20 starts the manager and returns once its webhook answers TLS on WebhookAddr;
// stop kills every process it started (by PID / process group) and waits for them.
//
// ctx bounds the start only (at most 2 minutes); the processes live until stop.
// It creates the namespace kubeflow-system and the Secret
// kubeflow-trainer-webhook-cert in it (overwriting that Secret).
func StartTrainerV20(ctx context.Context, cfg TrainerV20Config) (stop func() error, err error) {
	if cfg.Binary == "" || cfg.Kubeconfig == "" || cfg.CertDir == "" || cfg.WorkDir == "" || cfg.WebhookAddr == "" || cfg.LogFile == "" {
		return nil, errors.New("trainer v2.0.0: every TrainerV20Config field is required")
	}
	if err := requireLoopback(cfg.WebhookAddr); err != nil {
		return nil, fmt.Errorf("trainer v2.0.0: WebhookAddr: %w", err)
	}
	if fi, err := os.Stat(cfg.Binary); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("trainer v2.0.0: %s is not an executable (build it with `hack/testbin.sh trainer-controller-manager-v2.0.0`)", cfg.Binary)
	}
	workDir, err := filepath.Abs(cfg.WorkDir)
	if err != nil {
		return nil, err
	}
	for _, s := range []string{trainerV20APISocket, trainerV20WebhookSocket} {
		if p := filepath.Join(workDir, s); len(p) >= 108 {
			return nil, fmt.Errorf("trainer v2.0.0: socket path %s is too long for a Unix socket; use a shorter WorkDir", p)
		}
	}
	privateTmp := filepath.Join(workDir, "tmp")
	certDir := filepath.Join(privateTmp, trainerV20CertSubdir)
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chmod(privateTmp, 0o1777); err != nil {
		return nil, err
	}

	// The kubeconfig, made self-contained (paths under /tmp are hidden in the
	// namespace), goes into the private /tmp.
	raw, err := clientcmd.LoadFromFile(cfg.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("trainer v2.0.0: kubeconfig: %w", err)
	}
	if err := clientcmdapi.FlattenConfig(raw); err != nil {
		return nil, fmt.Errorf("trainer v2.0.0: kubeconfig: %w", err)
	}
	restCfg, err := clientcmd.NewDefaultClientConfig(*raw, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("trainer v2.0.0: kubeconfig: %w", err)
	}
	server, err := url.Parse(restCfg.Host)
	if err != nil {
		return nil, fmt.Errorf("trainer v2.0.0: kubeconfig server %q: %w", restCfg.Host, err)
	}
	apiAddr := server.Host
	if server.Port() == "" {
		apiAddr = net.JoinHostPort(server.Hostname(), "443")
	}
	if err := requireLoopback(apiAddr); err != nil {
		return nil, fmt.Errorf("trainer v2.0.0: kubeconfig server: %w", err)
	}
	apiListen := apiAddr
	if strings.EqualFold(server.Hostname(), "localhost") {
		apiListen = net.JoinHostPort("127.0.0.1", portOfAddr(apiAddr))
	}
	kubeconfig, err := clientcmd.Write(*raw)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(privateTmp, "kubeconfig"), kubeconfig, 0o600); err != nil {
		return nil, err
	}

	// The serving cert, where the manager looks for it.
	var caPEM []byte
	for _, name := range []string{"ca.crt", "tls.crt", "tls.key"} {
		b, err := os.ReadFile(filepath.Join(cfg.CertDir, name))
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
	apiRelay := startTrainerV20Relay(apiLn, func() (net.Conn, error) { return net.DialTimeout("tcp", apiAddr, 5*time.Second) })
	cleanups = append(cleanups, func() { apiRelay.close(); _ = os.Remove(apiSock) })
	whLn, err := net.Listen("tcp", cfg.WebhookAddr)
	if err != nil {
		return nil, fmt.Errorf("trainer v2.0.0: webhook address: %w", err)
	}
	whSock := filepath.Join(workDir, trainerV20WebhookSocket)
	whRelay := startTrainerV20Relay(whLn, func() (net.Conn, error) { return net.DialTimeout("unix", whSock, 5*time.Second) })
	cleanups = append(cleanups, whRelay.close)

	spec, err := json.Marshal(trainerV20RelaySpec{
		WorkDir: workDir,
		Binary:  cfg.Binary,
		Args: []string{
			"--kubeconfig=/tmp/kubeconfig",
			"--metrics-bind-address=0",
			"--health-probe-bind-address=0",
			"--leader-elect=false",
			"--webhook-server-port=" + portOfAddr(trainerV20WebhookTarget),
			"--webhook-service-name=" + trainerV20ServiceName,
			"--webhook-secret-name=" + trainerV20SecretName,
		},
		Env:       []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "TMPDIR=/tmp"},
		APIListen: apiListen,
	})
	if err != nil {
		return nil, err
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer statusR.Close()
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{"tether-trainer-v20-relay"},
		Env:        []string{trainerV20RelayEnv + "=" + string(spec), "PATH=/usr/local/bin:/usr/bin:/bin"},
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
	relayPID := cmd.Process.Pid
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()

	managerPID := 0
	var once sync.Once
	var stopErr error
	stopAll := func() error {
		once.Do(func() {
			// The relay stops the manager (SIGTERM, SIGKILL after 5s) and reaps it.
			_ = syscall.Kill(relayPID, syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(-relayPID, syscall.SIGKILL)
				<-exited
			}
			_ = syscall.Kill(-relayPID, syscall.SIGKILL) // anything left in the group
			if managerPID > 0 {
				if err := waitPIDGone(managerPID, 10*time.Second); err != nil {
					_ = syscall.Kill(managerPID, syscall.SIGKILL)
					stopErr = fmt.Errorf("trainer v2.0.0: %w", err)
				}
			}
			cleanup()
		})
		return stopErr
	}
	defer func() {
		if err != nil {
			_ = stopAll()
		}
	}()

	ctx, cancel := context.WithTimeout(ctx, trainerV20StartTimeout)
	defer cancel()
	early := func() error {
		return fmt.Errorf("trainer v2.0.0 manager exited early (%v); see %s:\n%s", waitErr, cfg.LogFile, tailOf(cfg.LogFile, 3000))
	}

	// The relay reports "ready <manager pid>" or "error <message>".
	status := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(statusR).ReadString('\n')
		status <- strings.TrimSpace(line)
	}()
	select {
	case line := <-status:
		if pid, ok := strings.CutPrefix(line, "ready "); ok {
			managerPID, _ = strconv.Atoi(pid)
		} else {
			<-exited
			return nil, fmt.Errorf("trainer v2.0.0 relay failed: %q; see %s", line, cfg.LogFile)
		}
	case <-exited:
		return nil, early()
	case <-ctx.Done():
		return nil, fmt.Errorf("trainer v2.0.0: relay did not start: %w; see %s", ctx.Err(), cfg.LogFile)
	}

	// Ready when the trainjob validator answers through the relay with the
	// caller's CA; it is registered after the rotator's checks, last of three.
	var lastErr error
	for {
		if lastErr = probeTrainerV20(ctx, cfg.WebhookAddr, caPEM); lastErr == nil {
			return stopAll, nil
		}
		select {
		case <-exited:
			return nil, early()
		case <-ctx.Done():
			return nil, fmt.Errorf("trainer v2.0.0 webhook not ready on %s: %v (%w); see %s", cfg.WebhookAddr, lastErr, ctx.Err(), cfg.LogFile)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// trainerV20Probe is an AdmissionReview the TrainJob validator allows without
// looking anything up (ValidateDelete returns nil).
const trainerV20Probe = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{` +
	`"uid":"tether-readiness-probe","operation":"DELETE","name":"probe","namespace":"default","userInfo":{},` +
	`"kind":{"group":"trainer.kubeflow.org","version":"v1alpha1","kind":"TrainJob"},` +
	`"resource":{"group":"trainer.kubeflow.org","version":"v1alpha1","resource":"trainjobs"},` +
	`"oldObject":{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"probe","namespace":"default"}}}}`

// probeTrainerV20 sends trainerV20Probe to the TrainJob validator through
// addr, verifying the webhook's certificate with caPEM: the path answers 404
// until the manager registered its webhooks.
func probeTrainerV20(ctx context.Context, addr string, caPEM []byte) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("no certificate in ca.crt")
	}
	host, _, _ := net.SplitHostPort(addr)
	client := &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
			Proxy:             nil,
		},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+addr+trainerV20ProbePath, strings.NewReader(trainerV20Probe))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
	}
	var review struct {
		Response *struct {
			Allowed bool `json:"allowed"`
		} `json:"response"`
	}
	if err := json.Unmarshal(body, &review); err != nil || review.Response == nil || !review.Response.Allowed {
		return fmt.Errorf("unexpected answer to the readiness probe: %s", bytes.TrimSpace(body))
	}
	return nil
}

// writeTrainerV20Secret creates or replaces the rotator's Secret with
// contents it accepts without rotating (see the top of this file).
func writeTrainerV20Secret(ctx context.Context, cs kubernetes.Interface, callerCA []byte) error {
	ns := trainerV20Namespace
	if b, err := os.ReadFile(trainerV20NSFile); err == nil && strings.TrimSpace(string(b)) != "" {
		ns = strings.TrimSpace(string(b)) // what the manager itself would read
	}
	data, err := trainerV20SecretData(callerCA)
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: trainerV20SecretName, Namespace: ns},
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
	old, err := cs.CoreV1().Secrets(ns).Get(ctx, secret.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = cs.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{})
	case err == nil:
		old.Data, old.StringData, old.Type = data, nil, corev1.SecretTypeOpaque
		_, err = cs.CoreV1().Secrets(ns).Update(ctx, old, metav1.UpdateOptions{})
	}
	return err
}

func trainerV20SecretData(callerCA []byte) (map[string][]byte, error) {
	now := time.Now()
	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: trainerV20CAName, Organization: []string{"tether-local"}},
		DNSNames:              []string{trainerV20CAName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	dns := fmt.Sprintf("%s.%s.svc", trainerV20ServiceName, trainerV20Namespace)
	if b, err := os.ReadFile(trainerV20NSFile); err == nil && strings.TrimSpace(string(b)) != "" {
		dns = fmt.Sprintf("%s.%s.svc", trainerV20ServiceName, strings.TrimSpace(string(b)))
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(2),
		Subject:               pkix.Name{CommonName: dns},
		DNSNames:              []string{dns},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	bundle := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	bundle = append(bundle, bytes.TrimSpace(callerCA)...)
	bundle = append(bundle, '\n')
	return map[string][]byte{
		"ca.crt":  bundle,
		"ca.key":  pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(caKey)}),
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// runTrainerV20Relay is the relay process, started in new network and mount
// namespaces: it brings loopback up, opens its listeners and the manager
// binary, makes WorkDir/tmp the namespace's /tmp, starts the manager, relays
// until SIGTERM (then stops the manager) or until the manager exits.
func runTrainerV20Relay(specJSON string) int {
	status := os.NewFile(3, "status")
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s trainer-v2.0.0 relay: %s\n", time.Now().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
	}
	fail := func(format string, args ...any) int {
		msg := fmt.Sprintf(format, args...)
		logf("%s", msg)
		fmt.Fprintf(status, "error %s\n", msg)
		return 1
	}
	var spec trainerV20RelaySpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return fail("bad spec: %v", err)
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	// Sockets and PID files are named relative to the working directory,
	// which stays reachable after /tmp is mounted over.
	if err := os.Chdir(spec.WorkDir); err != nil {
		return fail("%v", err)
	}
	if err := syscall.Mount("none", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fail("making mounts private: %v", err)
	}
	if err := loopbackUp(); err != nil {
		return fail("bringing lo up: %v", err)
	}
	bin, err := os.Open(spec.Binary)
	if err != nil {
		return fail("%v", err)
	}
	defer bin.Close()
	apiLn, err := net.Listen("tcp", spec.APIListen)
	if err != nil {
		return fail("%v", err)
	}
	_ = os.Remove(trainerV20WebhookSocket)
	whLn, err := net.Listen("unix", trainerV20WebhookSocket)
	if err != nil {
		return fail("%v", err)
	}
	if err := syscall.Mount(filepath.Join(spec.WorkDir, "tmp"), "/tmp", "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fail("mounting the private /tmp: %v", err)
	}
	apiRelay := startTrainerV20Relay(apiLn, func() (net.Conn, error) {
		return net.DialTimeout("unix", trainerV20APISocket, 5*time.Second)
	})
	defer apiRelay.close()
	whRelay := startTrainerV20Relay(whLn, func() (net.Conn, error) {
		return net.DialTimeout("tcp", trainerV20WebhookTarget, 5*time.Second)
	})
	defer whRelay.close()

	// The binary may sit under the old /tmp: exec it through the open file.
	cmd := &exec.Cmd{
		Path:        fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), bin.Fd()),
		Args:        append([]string{"trainer-controller-manager"}, spec.Args...),
		Env:         spec.Env,
		Stdout:      os.Stdout,
		Stderr:      os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	}
	if err := cmd.Start(); err != nil {
		return fail("starting %s: %v", spec.Binary, err)
	}
	pid := cmd.Process.Pid
	logf("manager %s started, pid %d; relaying %s and %s", spec.Binary, pid, spec.APIListen, trainerV20WebhookTarget)
	_ = os.WriteFile(TrainerV20RelayPIDFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
	_ = os.WriteFile(TrainerV20ManagerPIDFile, []byte(strconv.Itoa(pid)+"\n"), 0o644)
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
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf("manager stopped")
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

// trainerV20Relay accepts connections and pipes each to a new connection from dial.
type trainerV20Relay struct {
	ln    net.Listener
	dial  func() (net.Conn, error)
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
	wg    sync.WaitGroup
}

func startTrainerV20Relay(ln net.Listener, dial func() (net.Conn, error)) *trainerV20Relay {
	r := &trainerV20Relay{ln: ln, dial: dial, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.serve()
	return r
}

func (r *trainerV20Relay) serve() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.wg.Add(1)
		go r.pipe(c)
	}
}

func (r *trainerV20Relay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return false
	}
	for _, c := range cs {
		r.conns[c] = struct{}{}
	}
	return true
}

func (r *trainerV20Relay) pipe(a net.Conn) {
	defer r.wg.Done()
	defer a.Close()
	b, err := r.dial()
	if err != nil {
		return
	}
	defer b.Close()
	if !r.track(a, b) {
		return
	}
	defer func() {
		r.mu.Lock()
		delete(r.conns, a)
		delete(r.conns, b)
		r.mu.Unlock()
	}()
	var wg sync.WaitGroup
	wg.Add(2)
	half := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	go half(a, b)
	go half(b, a)
	wg.Wait()
}

func (r *trainerV20Relay) close() {
	r.mu.Lock()
	r.done = true
	_ = r.ln.Close()
	for c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
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
