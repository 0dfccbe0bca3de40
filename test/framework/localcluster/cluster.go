package localcluster

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/test/framework/testenv"
)

// Versions of the components; they match hack/testbin.sh.
const (
	TrainerV23    = "v2.3.0"
	TrainerV20    = "v2.0.0"
	JobSetVersion = "v0.12.0"
	KueueVersion  = "v0.17.0"
	// KubernetesVersion is kube-apiserver's and the real node's kubelet's.
	KubernetesVersion = "v1.37.2"
)

// Options choose what the cluster runs.
type Options struct {
	// Dir holds logs, certificates, kubeconfigs and artifacts (default: a
	// new temporary directory, removed by Stop unless KeepDir).
	Dir     string
	KeepDir bool
	// TrainerVersion is TrainerV23 (default) or TrainerV20.
	TrainerVersion string
	// Kueue starts Kueue and a ClusterQueue (needs Trainer >= v2.2).
	Kueue bool
	// Nodes is the number of kwok nodes (default 2), each 16 CPU / 64 GiB.
	Nodes int
	// RealNode starts the cluster network (network.go: two real nodes run
	// by real kubelets and containerd, pod networking, kube-proxy, CoreDNS;
	// needs `hack/testbin.sh network`, `make images` and root), and runs
	// Tether's control plane behind its Service there (StartTether). With
	// Kueue, the LocalQueues made by RealNodeQueue place their pods on the
	// network's nodes.
	RealNode bool
	// Install installs Tether from its chart once the real nodes are up
	// (InstallHelm, install.go; needs RealNode): Cluster.Installed, and no
	// StartTether (whose webhook names would clash).
	Install InstallMode
	// FastNodeLoss shortens what follows a node that stops answering (a
	// node-loss scenario would otherwise wait five minutes): the node
	// lifecycle controller marks it after NodeMonitorGrace instead of 50 s,
	// the taint eviction controller runs, and pods tolerate the
	// not-ready and unreachable taints for NodeLossToleration instead of
	// 300 s (the apiserver's DefaultTolerationSeconds).
	FastNodeLoss bool
	// Log receives one line per step (nil: silent).
	Log func(format string, args ...any)
}

// What Options.FastNodeLoss sets.
const (
	NodeMonitorGrace   = 20 * time.Second
	NodeLossToleration = 10 * time.Second
)

// Cluster is a running local cluster.
type Cluster struct {
	Opts Options
	Dir  string
	// Assets is the directory of the binaries hack/testbin.sh built.
	Assets string
	// Kubeconfig is an admin kubeconfig (system:masters) for kubectl.
	Kubeconfig string
	Config     *rest.Config
	Client     client.Client
	Clientset  kubernetes.Interface
	Scheme     *runtime.Scheme
	CA         *CA
	CertDir    string
	// Network is the cluster network of two real nodes with pod
	// networking, Services and DNS (network.go), or nil.
	Network *ClusterNetwork
	// Installed is Tether installed from its chart (Options.Install), or nil.
	Installed *Installed

	env *envtest.Environment
	// hostBindingURL is the binding server's URL for host processes
	// (Tether.BindingURL), once StartTether ran: PodRunner's sidecars use
	// it without the network (with it, they run in the kwok pods'
	// namespace and dial the Service).
	hostBindingURL string

	mu        sync.Mutex
	processes []*Process
	stops     []func() error
}

// Start brings up the cluster: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kwok with fake nodes, JobSet, Trainer and (optionally) Kueue.
// On error everything started so far is stopped.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.TrainerVersion == "" {
		opts.TrainerVersion = TrainerV23
	}
	if opts.Nodes == 0 {
		opts.Nodes = 2
	}
	if opts.Log == nil {
		opts.Log = func(string, ...any) {}
	}
	if opts.Kueue && opts.TrainerVersion == TrainerV20 {
		return nil, errors.New("kueue v0.17 needs Trainer >= v2.2: start Trainer v2.0.0 without Kueue")
	}
	if opts.Install != "" && !opts.RealNode {
		return nil, errors.New("Options.Install runs Tether on the real nodes: set Options.RealNode too")
	}
	c = &Cluster{Opts: opts, Dir: opts.Dir}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "tether-localcluster-"); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			_ = c.Stop()
			c = nil
		}
	}()
	if c.Assets, err = assets(opts); err != nil {
		return c, err
	}
	if c.CA, err = newCA(); err != nil {
		return c, err
	}
	if opts.RealNode {
		// Before the serving certificate, which names the host's veth
		// address, and kube-apiserver, which listens there.
		start := time.Now()
		if err = c.startNetwork(); err != nil {
			return c, fmt.Errorf("starting the cluster network: %w", err)
		}
		opts.Log("started the cluster network's bridge and host veth on %s (%.1fs)", c.Network.Block(), time.Since(start).Seconds())
	}
	c.CertDir = filepath.Join(c.Dir, "certs")
	if err = c.writeServingCert(c.CertDir); err != nil {
		return c, err
	}
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"kube-apiserver and etcd", c.startAPIServer},
		{"kube-controller-manager", c.startControllerManager},
		{"kube-scheduler", c.startScheduler},
		{"kwok and fake nodes", c.startKwok},
		{"jobset " + JobSetVersion, c.startJobSet},
		{"trainer " + opts.TrainerVersion, c.startTrainer},
	}
	if opts.Kueue {
		steps = append(steps, struct {
			name string
			fn   func(context.Context) error
		}{"kueue " + KueueVersion, c.startKueue})
	}
	if opts.RealNode {
		steps = append(steps, struct {
			name string
			fn   func(context.Context) error
		}{"cluster network nodes (kubelet " + KubernetesVersion + ", containerd, runc, kube-proxy) and CoreDNS", c.startNetNodes}, struct {
			name string
			fn   func(context.Context) error
		}{"real node queue", c.installRealNodeQueues}, struct {
			name string
			fn   func(context.Context) error
		}{"the kwok pods' network namespace and its kube-proxy", c.startHostPodsNet})
		if opts.Install != "" {
			steps = append(steps, struct {
				name string
				fn   func(context.Context) error
			}{"tether from charts/tether (helm install, replicas Ready, webhooks served)", c.startInstall})
		}
	}
	for _, s := range steps {
		start := time.Now()
		if err = s.fn(ctx); err != nil {
			return c, fmt.Errorf("starting %s: %w", s.name, err)
		}
		opts.Log("started %s (%.1fs)", s.name, time.Since(start).Seconds())
	}
	return c, nil
}

// Stop stops every process the cluster started, newest first, then etcd and
// kube-apiserver, and removes the directory unless Options.KeepDir.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	procs, stops := c.processes, c.stops
	c.processes, c.stops = nil, nil
	c.mu.Unlock()
	var errs []error
	for i := len(stops) - 1; i >= 0; i-- {
		errs = append(errs, stops[i]())
	}
	for i := len(procs) - 1; i >= 0; i-- {
		errs = append(errs, procs[i].Stop(5*time.Second))
	}
	if c.env != nil {
		errs = append(errs, c.env.Stop())
	}
	// After kube-apiserver, which listens on the host's veth address.
	if c.Network != nil {
		start := time.Now()
		errs = append(errs, c.Network.stop())
		c.logf("stopped the cluster network's bridge and host veth (%.1fs)", time.Since(start).Seconds())
	}
	if !c.Opts.KeepDir && c.Dir != "" && c.Opts.Dir == "" {
		_ = os.RemoveAll(c.Dir)
	}
	return errors.Join(errs...)
}

// PIDs lists the processes the cluster started and still tracks.
func (c *Cluster) PIDs() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var pids []int
	for _, p := range c.processes {
		pids = append(pids, p.PID())
	}
	return pids
}

// start starts a tracked process; Stop stops it.
func (c *Cluster) start(name, bin string, args []string, env ...string) (*Process, error) {
	p, err := startProcess(c.logDir(), name, bin, args, env)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.processes = append(c.processes, p)
	c.mu.Unlock()
	return p, nil
}

// untrack forgets p (it was stopped by its owner).
func (c *Cluster) untrack(p *Process) { c.untrackWhere(func(q *Process) bool { return q == p }) }

// untrackWhere forgets the first tracked process match selects.
func (c *Cluster) untrackWhere(match func(*Process) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, q := range c.processes {
		if match(q) {
			c.processes = append(c.processes[:i], c.processes[i+1:]...)
			return
		}
	}
}

// logf is Options.Log, which a Cluster made by a test may lack.
func (c *Cluster) logf(format string, args ...any) {
	if c.Opts.Log != nil {
		c.Opts.Log(format, args...)
	}
}

func (c *Cluster) onStop(fn func() error) {
	c.mu.Lock()
	c.stops = append(c.stops, fn)
	c.mu.Unlock()
}

func (c *Cluster) logDir() string {
	d := filepath.Join(c.Dir, "logs")
	_ = os.MkdirAll(d, 0o700)
	return d
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.Assets, name) }

// startAPIServer starts etcd and kube-apiserver through envtest (which
// builds their flags, certificates and an admin user) and writes an admin
// kubeconfig.
func (c *Cluster) startAPIServer(ctx context.Context) error {
	c.Scheme = runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, tetherv1.AddToScheme, trainer.AddToScheme} {
		if err := add(c.Scheme); err != nil {
			return err
		}
	}
	c.env = &envtest.Environment{BinaryAssetsDirectory: c.Assets, Scheme: c.Scheme}
	apiserver := c.env.ControlPlane.GetAPIServer()
	// The apiserver must not publish its own Endpoints (no Service network here).
	apiserver.Configure().Set("endpoint-reconciler-type", "none")
	if c.Network != nil {
		if err := c.Network.configureAPIServer(apiserver); err != nil {
			return err
		}
	}
	// Pods are admitted as a real cluster admits them: envtest turns the
	// default-on ServiceAccount plugin off, and it is what sets a pod's
	// spec.serviceAccountName before the webhooks run (Tether's injector
	// refuses a pod without one: the sidecar's pod token needs it). Its
	// default ServiceAccounts come from kube-controller-manager.
	apiserver.Configure().Disable("disable-admission-plugins")
	if c.Opts.FastNodeLoss {
		secs := strconv.Itoa(int(NodeLossToleration.Seconds()))
		apiserver.Configure().Set("default-not-ready-toleration-seconds", secs).Set("default-unreachable-toleration-seconds", secs)
	}
	// The real nodes' kubelets serve on their node addresses with a
	// certificate from the cluster CA and accepts this client certificate:
	// `kubectl logs` and the pods/log API go through it.
	kubeletClient := filepath.Join(c.Dir, "kubelet-client")
	if err := c.CA.writeCert(kubeletClient, "client", certRequest{commonName: "kube-apiserver-kubelet-client",
		organization: []string{"system:masters"}, usage: x509.ExtKeyUsageClientAuth}); err != nil {
		return err
	}
	if err := c.configureFrontProxy(apiserver); err != nil {
		return err
	}
	apiserver.Configure().
		Set("kubelet-certificate-authority", filepath.Join(kubeletClient, "ca.crt")).
		Set("kubelet-client-certificate", filepath.Join(kubeletClient, "client.crt")).
		Set("kubelet-client-key", filepath.Join(kubeletClient, "client.key")).
		Set("kubelet-preferred-address-types", "InternalIP,Hostname")
	// envtest starts these two without a parent-death signal; through
	// setpriv they die with the harness even if it is killed outright.
	if wrapped, err := c.dieWithParent("kube-apiserver"); err == nil {
		apiserver.Path = wrapped
	}
	if wrapped, err := c.dieWithParent("etcd"); err == nil {
		c.env.ControlPlane.Etcd = &envtest.Etcd{Path: wrapped}
	}
	cfg, err := c.env.Start()
	if err != nil {
		return fmt.Errorf("envtest with binaries from %s: %w", c.Assets, err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	c.Config = cfg
	if c.Client, err = client.New(cfg, client.Options{Scheme: c.Scheme}); err != nil {
		return err
	}
	if c.Clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	admin, err := c.env.ControlPlane.AddUser(envtest.User{Name: "localcluster-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kc, err := admin.KubeConfig()
	if err != nil {
		return err
	}
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	return os.WriteFile(c.Kubeconfig, kc, 0o600)
}

// installCRDs applies CRDs and waits until they are established.
func (c *Cluster) installCRDs(ctx context.Context, crds []*unstructured.Unstructured) error {
	if err := apply(ctx, c.Client, crds...); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, u := range crds {
		for {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := c.Client.Get(ctx, client.ObjectKey{Name: u.GetName()}, &crd); err != nil {
				return err
			}
			if established(&crd) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("CRD %s not established after 30s", u.GetName())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, cond := range crd.Status.Conditions {
		if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// moduleDir is the module cache directory of module@version (downloaded if
// needed; hack/testbin.sh already fetched it when it built the binary).
func moduleDir(module, version string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir = testenv.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %w", module, version, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return "", fmt.Errorf("go mod download %s@%s: no module directory in %s", module, version, out)
	}
	return mod.Dir, nil
}

// dieWithParent writes a script that execs the named binary under
// `setpriv --pdeathsig KILL` (util-linux), and returns its path.
func (c *Cluster) dieWithParent(name string) (string, error) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.Dir, "bin", name+"-pdeathsig")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	script := fmt.Sprintf("#!/bin/sh\nexec %s --pdeathsig KILL %s \"$@\"\n", setpriv, c.bin(name))
	return path, os.WriteFile(path, []byte(script), 0o700)
}
