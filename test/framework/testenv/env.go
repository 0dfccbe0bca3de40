package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/tether-dev/tether/pkg/controlplane"
)

// RepoRoot is the root of the Tether repository.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// ErrNoAssets says the control-plane binaries are not built.
var ErrNoAssets = errors.New("kube-apiserver/etcd not found: run `hack/testbin.sh` (or `make testbin`) to build them from the Go module proxy")

// Assets returns the directory holding kube-apiserver, etcd and kubectl:
// $KUBEBUILDER_ASSETS, else what hack/testbin.sh prints.
func Assets() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		out, err := exec.Command("bash", filepath.Join(RepoRoot(), "hack", "testbin.sh"), "--print-dir").Output()
		if err != nil {
			return "", fmt.Errorf("hack/testbin.sh --print-dir: %w", err)
		}
		dir = strings.TrimSpace(string(out))
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return "", fmt.Errorf("%w (looked in %s)", ErrNoAssets, dir)
		}
	}
	return dir, nil
}

// TrainerCRDDir is the directory of Trainer's CRDs in the module cache, at
// the version go.mod requires.
func TrainerCRDDir() (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/kubeflow/trainer/v2")
	cmd.Dir = RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locating the Trainer module: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "manifests", "base", "crds"), nil
}

// Options tune Start.
type Options struct {
	// ControlPlane overrides fields of the in-process control plane's options.
	ControlPlane func(*controlplane.Options)
	// NoControlPlane starts only the API server (webhook configuration still
	// installed, pointing at the address in Env.Webhook).
	NoControlPlane bool
	// WebhookHostName is the host name the API server uses to call the
	// webhooks (default: the IP address they listen on). A self-managed
	// certificate has DNS names only, so tests of it use "localhost".
	WebhookHostName string
	// AsAdmin runs the control plane with the test's admin credentials instead
	// of as its ServiceAccount under the RBAC that manifests/ ships.
	AsAdmin bool
	// FrontProxy starts the API server with a front-proxy client
	// certificate and the --requestheader-* flags, so it proxies aggregated
	// APIs (the read API) as a real cluster's does.
	FrontProxy bool
}

// Env is a running local control plane.
type Env struct {
	Config  *rest.Config
	Client  client.Client
	Assets  string
	Webhook envtest.WebhookInstallOptions
	// CAFile is the CA that signed the webhook's serving certificate; the
	// control plane puts it into token Secrets.
	CAFile string
	// MetricsAddr is the control plane's /metrics address.
	MetricsAddr string
	// BindingAddr is the binding server's address; BindingURL its base URL.
	BindingAddr, BindingURL string
	// ArtifactDir is the fs artifact backend's directory.
	ArtifactDir string

	env    *envtest.Environment
	cancel context.CancelFunc
	done   chan error
	// cpConfig and cpOpts start the control plane again on restart.
	cpConfig *rest.Config
	cpOpts   Options
	// frontProxyDir holds the front proxy's certificate (Options.FrontProxy).
	frontProxyDir string
}

// RestartControlPlane stops the in-process control plane and starts it again
// with the same credentials and options, as a rolling restart would.
func (e *Env) RestartControlPlane(ctx context.Context) error {
	if err := e.stopControlPlane(); err != nil {
		return err
	}
	return e.StartControlPlane(ctx, e.cpConfig, e.cpOpts)
}

// StopControlPlane stops the in-process control plane, as an outage of
// every replica would: its webhooks and binding server stop answering while
// the API server goes on. RestartControlPlane starts it again.
func (e *Env) StopControlPlane() error { return e.stopControlPlane() }

func (e *Env) stopControlPlane() error {
	if e.cancel == nil {
		return nil
	}
	e.cancel()
	err := <-e.done
	e.cancel = nil
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// Start starts kube-apiserver, etcd and (unless opts.NoControlPlane) Tether's
// control plane, and waits until the webhooks answer.
func Start(ctx context.Context, opts Options) (*Env, error) {
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	crds, err := TrainerCRDDir()
	if err != nil {
		return nil, err
	}
	hooks, err := webhookConfigs()
	if err != nil {
		return nil, err
	}
	e := &Env{Assets: assets}
	e.env = &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths: []string{crds, filepath.Join(RepoRoot(), "manifests", "base", "crd"),
			// Kueue's Workload, which client.Cancel deactivates.
			filepath.Join(RepoRoot(), "test", "framework", "testenv", "crds")},
		ErrorIfCRDPathMissing: true,
		WebhookInstallOptions: envtest.WebhookInstallOptions{MutatingWebhooks: hooks, LocalServingHost: "127.0.0.1",
			LocalServingHostExternalName: opts.WebhookHostName},
		Scheme: controlplane.NewScheme(),
	}
	if err := trainer.AddToScheme(e.env.Scheme); err != nil {
		return nil, err
	}
	if opts.FrontProxy {
		dir, err := os.MkdirTemp("", "tether-front-proxy-")
		if err != nil {
			return nil, err
		}
		e.frontProxyDir = dir
		if err := configureFrontProxy(e.env.ControlPlane.GetAPIServer(), dir); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	cfg, err := e.env.Start()
	if err != nil {
		if e.frontProxyDir != "" {
			_ = os.RemoveAll(e.frontProxyDir)
		}
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", assets, err)
	}
	e.Config = cfg
	e.Webhook = e.env.WebhookInstallOptions
	if e.Client, err = client.New(cfg, client.Options{Scheme: e.env.Scheme}); err != nil {
		_ = e.Stop()
		return nil, err
	}
	if e.MetricsAddr, err = FreeAddr(); err != nil {
		_ = e.Stop()
		return nil, err
	}
	if e.BindingAddr, err = FreeAddr(); err != nil {
		_ = e.Stop()
		return nil, err
	}
	e.BindingURL = "https://" + e.BindingAddr
	if e.ArtifactDir, err = os.MkdirTemp("", "tether-artifacts-"); err != nil {
		_ = e.Stop()
		return nil, err
	}
	e.CAFile = filepath.Join(e.Webhook.LocalServingCertDir, "ca.crt")
	if err := os.WriteFile(e.CAFile, e.Webhook.LocalServingCAData, 0o600); err != nil {
		_ = e.Stop()
		return nil, err
	}
	if opts.NoControlPlane {
		return e, nil
	}
	cpConfig := cfg
	if !opts.AsAdmin {
		if cpConfig, err = e.ServiceAccountConfig(ctx); err != nil {
			_ = e.Stop()
			return nil, err
		}
	} else if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tether-system"}}); err != nil {
		// The control plane's own namespace holds its leader-election lease.
		_ = e.Stop()
		return nil, err
	}
	if err := e.StartControlPlane(ctx, cpConfig, opts); err != nil {
		_ = e.Stop()
		return nil, err
	}
	return e, nil
}

// ControlPlaneConfig is the credentials the running control plane uses
// (its ServiceAccount's, unless Options.AsAdmin).
func (e *Env) ControlPlaneConfig() *rest.Config { return e.cpConfig }

// StartControlPlane starts Tether's control plane in-process with cfg's
// credentials, configured for this environment, then modified by opts.ControlPlane.
//
// The control plane's client has the production settings
// (controlplane.ClientSettings), whatever cfg says: envtest's admin config
// allows 1000 QPS and a ServiceAccount's config client-go's default 5, and
// either would make a test's timings say nothing about a real cluster.
func (e *Env) StartControlPlane(ctx context.Context, cfg *rest.Config, opts Options) error {
	cfg = controlplane.ClientSettings(cfg)
	e.cpConfig, e.cpOpts = cfg, opts
	mgr, err := controlplane.New(cfg, e.controlPlaneOptions(opts))
	if err != nil {
		return err
	}
	ctx, e.cancel = context.WithCancel(ctx)
	e.done = make(chan error, 1)
	go func() { e.done <- mgr.Start(ctx) }()

	deadline := time.Now().Add(30 * time.Second)
	for mgr.Ready() != nil {
		select {
		case err := <-e.done:
			return fmt.Errorf("control plane stopped: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("control plane not ready within 30s: %w", mgr.Ready())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return errors.New("control plane caches did not sync")
	}
	return nil
}

// controlPlaneOptions configures a control plane for this environment.
func (e *Env) controlPlaneOptions(opts Options) controlplane.Options {
	cp := controlplane.DefaultOptions()
	cp.Namespace = "tether-system"
	cp.CertMode = controlplane.CertModeExternal
	cp.CertDir = e.Webhook.LocalServingCertDir
	cp.CABundleFile = e.CAFile
	cp.WebhookHost = e.Webhook.LocalServingHost
	cp.WebhookPort = e.Webhook.LocalServingPort
	cp.MetricsAddr = e.MetricsAddr
	cp.HealthAddr = "0"
	// No Service routes here (the tests dial the replica itself), so there
	// is nothing to drain: a restart stops serving at once, as the suites'
	// reconnect tests expect. The drain is the e2e's and drain_test.go's.
	cp.ShutdownDelay = 0
	cp.LeaderElect = true
	cp.BindingAddr = e.BindingAddr
	cp.ServerURL = e.BindingURL
	cp.StatusInterval = 2 * time.Second
	// Liveness-only writes every 5s instead of 10m: a test's quiet binding
	// is then reconciled as often as its heartbeats used to make it (a
	// deleted token Secret is noticed at the next reconcile). Tests of the
	// rare writes themselves set the production value.
	cp.LivenessWriteInterval = 5 * time.Second
	cp.ArtifactGrace = 2 * time.Second
	cp.ArtifactDir = e.ArtifactDir
	if opts.ControlPlane != nil {
		opts.ControlPlane(&cp)
	}
	return cp
}

// Stop stops the control plane, then the API server and etcd.
func (e *Env) Stop() error {
	var errs []error
	if err := e.stopControlPlane(); err != nil {
		errs = append(errs, err)
	}
	if e.env != nil {
		errs = append(errs, e.env.Stop())
	}
	if e.ArtifactDir != "" {
		_ = os.RemoveAll(e.ArtifactDir)
	}
	if e.frontProxyDir != "" {
		_ = os.RemoveAll(e.frontProxyDir)
	}
	return errors.Join(errs...)
}

// Kubectl returns the path of the kubectl built next to kube-apiserver.
func (e *Env) Kubectl() string { return filepath.Join(e.Assets, "kubectl") }

// webhookConfigs reads the shipped MutatingWebhookConfiguration and rewrites
// its service references to the local webhook server's paths; envtest fills
// in host, port and caBundle.
func webhookConfigs() ([]*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	raw, err := os.ReadFile(filepath.Join(RepoRoot(), "manifests", "base", "mutatingwebhookconfiguration.yaml"))
	if err != nil {
		return nil, err
	}
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(raw, &cfg); err != nil {
		return nil, fmt.Errorf("manifests/base/mutatingwebhookconfiguration.yaml: %w", err)
	}
	for i := range cfg.Webhooks {
		// envtest joins host:port and the path with a '/', so drop ours.
		svc := cfg.Webhooks[i].ClientConfig.Service
		svc.Path = ptr.To(strings.TrimPrefix(*svc.Path, "/"))
	}
	return []*admissionregistrationv1.MutatingWebhookConfiguration{&cfg}, nil
}

func writeFile(path string, b []byte) error { return os.WriteFile(path, b, 0o600) }
