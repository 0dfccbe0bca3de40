package localcluster

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/tether-dev/tether/test/framework/s3server"
	"github.com/tether-dev/tether/test/framework/testenv"
)

// TetherOptions configure Tether's control plane in the cluster.
type TetherOptions struct {
	// Replicas of cmd/tether-control-plane (default 1); they share one
	// leader lease.
	Replicas int
	// S3 installs manifests/overlays/quick-start, the default install, and
	// runs its artifact store (versitygw, or S3Impl) as a local process
	// with the bucket and credentials the overlay ships (required with more
	// than one replica); otherwise overlays/self-managed and the fs backend
	// in <Dir>/artifacts.
	S3 bool
	// S3Impl is the S3 server with S3 (default: versitygw).
	S3Impl s3server.Impl
	// S3Fault puts the tests' S3 front (s3server.Front) with this fault
	// between the control plane (and the sidecars' presigned PUTs) and the
	// store: FaultRandomETag is an SSE-KMS-like store. The harness's own
	// reads (S3.Get) go to the store itself.
	S3Fault s3server.Fault
	// Args are extra control-plane flags (e.g. --status-interval=2s).
	Args []string
}

// Tether is Tether's control plane running in the cluster: replicas of the
// real cmd/tether-control-plane binary under the ServiceAccount and RBAC that
// manifests/overlays/self-managed ships. On the cluster network they are
// behind the shipped Service tether-control-plane (EndpointSlices of the
// harness's making, endpoints.go): the apiserver calls the webhooks there,
// pods dial ControlPlaneBindingURL. Host processes (the kwok pods' sidecars,
// the tests) reach the binding server through a loopback forwarder
// following the same readiness; without the network the webhooks are
// called through one too.
type Tether struct {
	c          *Cluster
	opts       TetherOptions
	bin        string
	kubeconfig string
	args       []string
	// webhookLB is the webhooks' loopback forwarder without the network
	// (nil with it: the apiserver dials the Service's endpoints).
	webhookLB *balancer
	// bindingLB is the binding server's forwarder for host processes.
	bindingLB *balancer
	// endpoints are the Service's EndpointSlices (nil without the network).
	endpoints *serviceEndpoints
	// ArtifactDir is the fs backend's directory ("" with S3).
	ArtifactDir string
	// S3 is the artifact store with TetherOptions.S3. The control plane
	// and the sidecars reach it through s3Front; S3.Admin goes direct.
	S3      *S3
	s3Front *s3Front

	mu       sync.Mutex
	replicas []*Replica
	stopPoll chan struct{}
	pollDone chan struct{}
}

// Replica is one control-plane process.
type Replica struct {
	Index                                             int
	WebhookAddr, BindingAddr, MetricsAddr, HealthAddr string
	proc                                              *Process
	terminating, ready                                bool
	crashes                                           int
	scraper                                           *metricsScraper
}

// Crashes counts the times replica i exited on its own and was started
// again (restartOnExit).
func (t *Tether) Crashes(i int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.replicas[i].crashes
}

// Process is the replica's current process.
func (r *Replica) Process() *Process { return r.proc }

// BlackholeBinding starts (on) or ends a black hole between the sidecars
// and the binding server, until it ends: every connection, open or new,
// delivers nothing in either direction. For the forwarder's clients (the
// tests' own, and the kwok pods' sidecars without the network) it accepts
// and holds every byte; on the cluster network an nftables table in each
// node's namespace and the kwok pods' drops the pods' packets to and from
// the replicas' binding ports.
func (t *Tether) BlackholeBinding(on bool) error {
	t.bindingLB.setBlackhole(on)
	if t.endpoints == nil {
		return nil
	}
	var ports []int32
	for _, r := range t.Replicas() {
		_, p, _ := net.SplitHostPort(r.BindingAddr)
		n, _ := strconv.Atoi(p)
		ports = append(ports, int32(n))
	}
	return t.c.Network.blackhole(ports, on)
}

// PreferBindingReplica sends every new connection to the binding server to
// replica i while it is ready (-1: spread them again), so a test knows
// which replica holds a sidecar's session and uploads: the forwarder's
// choice for host processes, the binding EndpointSlices on the network.
func (t *Tether) PreferBindingReplica(i int) {
	if t.endpoints != nil {
		t.endpoints.setPrefer(i)
		// New connections follow once kube-proxy routes the change.
		if err := t.waitBindingRoutes(context.Background(), 20*time.Second); err != nil {
			t.c.logf("tether endpoints: PreferBindingReplica(%d): %v", i, err)
		}
	}
	if i < 0 {
		t.bindingLB.prefer("")
		return
	}
	t.bindingLB.prefer(t.replicas[i].BindingAddr)
}

// FailS3 makes the artifact store answer every request of the control
// plane and the sidecars 503 SlowDown (on) or serve them again (off).
func (t *Tether) FailS3(on bool) error {
	if t.s3Front == nil {
		return errNoS3
	}
	t.s3Front.setFailing(on)
	return nil
}

// StallS3 makes the artifact store stop reading every PUT body of the
// control plane and the sidecars mid-body (on), holding the connection open
// without an answer, until the stall ends (off): a store that hangs.
func (t *Tether) StallS3(on bool) error {
	if t.s3Front == nil {
		return errNoS3
	}
	t.s3Front.setStalling(on)
	return nil
}

// S3Traffic is what the control plane and the sidecars sent the artifact
// store so far.
func (t *Tether) S3Traffic() (S3Traffic, error) {
	if t.s3Front == nil {
		return S3Traffic{}, errNoS3
	}
	return t.s3Front.snapshot(), nil
}

// BindingURL is the binding server's URL for host processes (the
// forwarder): the tests' own clients, and the kwok pods' sidecars without
// the network.
func (t *Tether) BindingURL() string { return "https://" + t.bindingLB.Addr() }

// ServiceURL is the URL the webhook injects into sidecars: the Service's
// DNS name on the cluster network (ControlPlaneBindingURL), else the
// forwarder's.
func (t *Tether) ServiceURL() string {
	if t.endpoints != nil {
		return ControlPlaneBindingURL
	}
	return t.BindingURL()
}

// BuildBinaries builds ./cmd/tether-control-plane, ./cmd/sidecar and the
// trainer stand-in into dir (the Go build cache makes repeat builds fast).
func BuildBinaries(dir string) error {
	return goBuild(dir, "./cmd/tether-control-plane", "./cmd/sidecar", "./test/framework/localcluster/trainer-standin")
}

// goBuild builds static binaries of the module's packages into dir.
func goBuild(dir string, pkgs ...string) error {
	cmd := exec.Command("go", append([]string{"build", "-trimpath", "-o", dir + string(filepath.Separator)}, pkgs...)...)
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	return nil
}

// StartTether installs manifests/overlays/quick-start with S3, else
// overlays/self-managed (everything but what runs as processes here: the
// CRD, namespace, ServiceAccount, RBAC, the store's Secret and NetworkPolicy,
// and the webhook configuration rewritten to the loopback webhook
// "Service"), then starts the replicas with the ServiceAccount's token, and
// waits until they are ready.
func (c *Cluster) StartTether(ctx context.Context, opts TetherOptions) (*Tether, error) {
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.Replicas > 1 && !opts.S3 {
		return nil, errors.New("more than one replica needs a shared artifact store: set TetherOptions.S3")
	}
	binDir := filepath.Join(c.Dir, "bin")
	if err := BuildBinaries(binDir); err != nil {
		return nil, err
	}
	t := &Tether{c: c, opts: opts, bin: filepath.Join(binDir, "tether-control-plane")}
	var err error
	if c.Network != nil {
		t.endpoints = newServiceEndpoints(c)
	} else if t.webhookLB, err = newBalancer(); err != nil {
		return nil, err
	}
	if t.bindingLB, err = newBalancer(); err != nil {
		return nil, err
	}
	c.onStop(func() error {
		if t.webhookLB != nil {
			t.webhookLB.close()
		}
		t.bindingLB.close()
		return nil
	})
	c.hostBindingURL = t.BindingURL()
	overlay := "overlays/self-managed"
	if opts.S3 {
		overlay = "overlays/quick-start"
	}
	s3cfg, err := t.install(ctx, overlay)
	if err != nil {
		return nil, err
	}
	s3cfg.Impl = opts.S3Impl
	if t.kubeconfig, err = c.serviceAccountKubeconfig(ctx, "tether-system", "tether-control-plane"); err != nil {
		return nil, err
	}
	t.args = []string{
		"--kubeconfig=" + t.kubeconfig,
		"--namespace=tether-system",
		"--leader-elect",
		"--cert-mode=external",
		"--cert-dir=" + c.CertDir,
		"--binding-server-url=" + t.ServiceURL(),
	}
	// Pods on the real nodes run the sidecar image make images built; on
	// kwok nodes PodRunner runs the binary, whatever the image says.
	if nodes := c.RealNodes(); len(nodes) > 0 {
		t.args = append(t.args, "--sidecar-image="+nodes[0].Image("tether-sidecar"))
	} else {
		t.args = append(t.args, "--sidecar-image=ghcr.io/tether-dev/tether-sidecar:e2e")
	}
	if err := t.setUpArtifactStore(ctx, s3cfg); err != nil {
		return nil, err
	}
	t.args = append(t.args, opts.Args...)
	t.stopPoll, t.pollDone = make(chan struct{}), make(chan struct{})
	scraper := &metricsScraper{cs: c.Clientset}
	for i := range opts.Replicas {
		if err := t.addReplica(i, scraper); err != nil {
			return nil, err
		}
	}
	go t.pollReadiness()
	c.onStop(t.stop)
	for _, r := range t.replicas {
		if err := t.waitReady(ctx, r, 60*time.Second); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// setUpArtifactStore gives the replicas their artifact store: with S3, the
// S3 server (behind a fault-injecting front when asked) and the loopback
// front the sidecars reach it through; else a directory.
func (t *Tether) setUpArtifactStore(ctx context.Context, s3cfg S3Config) error {
	c, opts := t.c, t.opts
	if !opts.S3 {
		t.ArtifactDir = filepath.Join(c.Dir, "artifacts")
		if err := os.MkdirAll(t.ArtifactDir, 0o700); err != nil {
			return err
		}
		t.args = append(t.args, "--artifact-backend=fs", "--artifact-dir="+t.ArtifactDir)
		return nil
	}
	var err error
	if t.S3, err = c.StartS3(ctx, s3cfg); err != nil {
		return err
	}
	store := t.S3.Endpoint
	if opts.S3Fault != s3server.FaultNone {
		f, err := s3server.NewFront(store, opts.S3Fault)
		if err != nil {
			return err
		}
		f.Resign(s3cfg.AccessKey, s3cfg.SecretKey)
		c.onStop(f.Close)
		store = f.Endpoint
	}
	// On the network the kwok pods' and the nodes' sidecars upload
	// to the store directly too: the front listens on the host's
	// veth address.
	listen := "127.0.0.1"
	if c.Network != nil {
		listen = c.Network.HostIP.String()
	}
	if t.s3Front, err = newS3Front(listen, store); err != nil {
		return err
	}
	c.onStop(func() error { t.s3Front.close(); return nil })
	t.args = append(t.args, "--artifact-backend=s3", "--s3-endpoint="+t.s3Front.Addr(), "--s3-bucket="+t.S3.Bucket,
		"--s3-insecure", "--s3-region=us-east-1", "--s3-credentials-dir="+t.S3.CredentialsDir)
	return nil
}

// addReplica picks replica i's addresses, adds it to the Service's
// endpoints on the network, and starts it.
func (t *Tether) addReplica(i int, scraper *metricsScraper) error {
	r := &Replica{Index: i, scraper: scraper}
	var err error
	if r.HealthAddr, err = testenv.FreeAddr(); err != nil {
		return err
	}
	// On the network the Service's endpoints are where a pod would
	// listen: the host's veth address.
	for _, a := range []*string{&r.WebhookAddr, &r.BindingAddr, &r.MetricsAddr} {
		if t.endpoints != nil {
			*a, err = freeAddrOn(t.c.Network.HostIP)
		} else {
			*a, err = testenv.FreeAddr()
		}
		if err != nil {
			return err
		}
	}
	if t.endpoints != nil {
		if err := t.endpoints.add(i, r.WebhookAddr, r.MetricsAddr, r.BindingAddr); err != nil {
			return err
		}
	}
	t.replicas = append(t.replicas, r)
	return t.startReplica(r)
}

// install applies the rendered overlay minus what runs as processes here
// (the Deployments, and the in-cluster store's claim and Service), and
// returns the store's bucket and credentials as the overlay ships them.
func (t *Tether) install(ctx context.Context, overlay string) (S3Config, error) {
	s3cfg := DefaultS3Config
	objs, _, err := testenv.Render(t.c.bin("kubectl"), overlay)
	if err != nil {
		return s3cfg, err
	}
	var crds, rest []*unstructured.Unstructured
	for _, o := range objs {
		switch {
		case o.GetKind() == "Deployment" && o.GetName() == "tether-control-plane":
			if b := deploymentArg(o, "--s3-bucket="); b != "" {
				s3cfg.Bucket = b
			}
		case o.GetKind() == "Secret" && o.GetName() == "tether-artifacts-credentials":
			a, _, _ := unstructured.NestedString(o.Object, "data", "access-key")
			k, _, _ := unstructured.NestedString(o.Object, "data", "secret-key")
			if s3cfg.AccessKey, err = decodeSecretValue(a); err != nil {
				return s3cfg, err
			}
			if s3cfg.SecretKey, err = decodeSecretValue(k); err != nil {
				return s3cfg, err
			}
		}
		switch o.GetKind() {
		case "Deployment", "PersistentVolumeClaim":
			// Replaced by processes on this machine.
		case "CustomResourceDefinition":
			crds = append(crds, o)
		case "MutatingWebhookConfiguration":
			if t.endpoints != nil {
				// Called through the Service, as installed.
				if err := webhookCABundle(o, t.c.CA.CertPEM); err != nil {
					return s3cfg, err
				}
			} else if err := webhookURLs(o, o.GetName(), t.webhookLB.Addr(), t.c.CA.CertPEM); err != nil {
				return s3cfg, err
			}
			rest = append(rest, o)
		case "Service":
			// Its endpoints are the harness's while the replicas are
			// host processes: no selector, or the endpointslice
			// controller would manage (empty) slices beside them.
			if o.GetName() == ControlPlaneService && t.endpoints != nil {
				unstructured.RemoveNestedField(o.Object, "spec", "selector")
			}
			rest = append(rest, o)
		default:
			rest = append(rest, o)
		}
	}
	if err := t.c.installCRDs(ctx, crds); err != nil {
		return s3cfg, err
	}
	// Namespace first, then the rest.
	for _, o := range rest {
		if o.GetKind() == "Namespace" {
			if err := apply(ctx, t.c.Client, o); err != nil {
				return s3cfg, err
			}
		}
	}
	for _, o := range rest {
		if o.GetKind() != "Namespace" {
			if err := apply(ctx, t.c.Client, o); err != nil {
				return s3cfg, err
			}
		}
	}
	return s3cfg, nil
}

// deploymentArg is the value of the first container argument of Deployment
// d that starts with prefix, or "".
func deploymentArg(d *unstructured.Unstructured, prefix string) string {
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		args, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "args")
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, prefix); ok {
				return v
			}
		}
	}
	return ""
}

// decodeSecretValue decodes a rendered Secret's data value.
func decodeSecretValue(v string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return "", fmt.Errorf("rendered Secret tether-artifacts-credentials: %w", err)
	}
	return string(b), nil
}

func (t *Tether) startReplica(r *Replica) error {
	webhookHost, _, _ := net.SplitHostPort(r.WebhookAddr)
	args := append([]string{
		"--webhook-host=" + webhookHost,
		"--webhook-port=" + portOf(r.WebhookAddr),
		"--binding-bind-address=" + r.BindingAddr,
		"--metrics-bind-address=" + r.MetricsAddr,
		"--health-probe-bind-address=" + r.HealthAddr,
	}, t.args...)
	p, err := t.c.start(fmt.Sprintf("tether-%d", r.Index), t.bin, args, "POD_NAMESPACE=tether-system", fmt.Sprintf("POD_NAME=tether-control-plane-%d", r.Index))
	if err != nil {
		return err
	}
	t.mu.Lock()
	r.proc, r.terminating = p, false
	t.mu.Unlock()
	go t.restartOnExit(r, p)
	return nil
}

// crashRestartDelay is how long a replica that exited on its own stays
// down before it is started again: the kubelet's first crash back-off.
const crashRestartDelay = 10 * time.Second

// restartOnExit is the Deployment's restartPolicy Always: a replica process
// that exits on its own (not stopped by the harness: a crash, or leader
// election lost while the apiserver was away) is started again after the
// kubelet's back-off, and counted.
func (t *Tether) restartOnExit(r *Replica, p *Process) {
	select {
	case <-p.Done():
	case <-t.stopPoll:
		return
	}
	t.mu.Lock()
	expected := r.terminating || r.proc != p
	t.mu.Unlock()
	if expected {
		return
	}
	_, err := p.Exited()
	t.c.Opts.Log("tether replica %d exited on its own (%v); restarting it in %s, as the kubelet would", r.Index, err, crashRestartDelay)
	t.leaveServices(r)
	select {
	case <-time.After(crashRestartDelay):
	case <-t.stopPoll:
		return
	}
	t.c.untrack(p)
	t.mu.Lock()
	r.crashes++
	t.mu.Unlock()
	if err := t.startReplica(r); err != nil {
		t.c.Opts.Log("restarting tether replica %d: %v", r.Index, err)
	}
}

// Replicas are the control plane's replicas.
func (t *Tether) Replicas() []*Replica {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]*Replica(nil), t.replicas...)
}

// RestartReplica does what a rolling update does to one pod: the replica
// leaves the Services (terminating), gets SIGTERM, and once it has exited a
// new process with the same addresses starts and rejoins when ready.
func (t *Tether) RestartReplica(ctx context.Context, i int) error {
	r := t.replicas[i]
	t.leaveServices(r)
	old := r.proc
	// A replica's shutdown takes 0.4-7 s; one that took 30 s was seen
	// once (e2e scenario 7) with no trace of why: past 20 s its goroutines
	// are dumped to its log.
	dumped, err := old.StopDumping(30*time.Second, 20*time.Second)
	if dumped {
		t.c.Opts.Log("tether replica %d did not exit within 20s of SIGTERM; its goroutines (in %s), by stack:\n%s",
			r.Index, old.LogFile, goroutineDumpSummary(old.LogFile))
	}
	if err != nil {
		return err
	}
	t.c.untrack(old)
	if err := t.startReplica(r); err != nil {
		return err
	}
	return t.waitReady(ctx, r, 60*time.Second)
}

// KillReplica stops replica i at once (SIGKILL), as a crashed pod.
func (t *Tether) KillReplica(i int) error {
	r := t.replicas[i]
	t.leaveServices(r)
	return r.proc.Stop(0)
}

// leaveServices marks the replica terminating and takes it out of both
// Services at once, as the endpoints controller does for a terminating pod
// (pollReadiness keeps it out until a new process is ready).
func (t *Tether) leaveServices(r *Replica) {
	t.mu.Lock()
	r.terminating = true
	t.mu.Unlock()
	t.setReady(r, false)
}

func (t *Tether) stop() error {
	if t.stopPoll != nil {
		close(t.stopPoll)
		<-t.pollDone
	}
	return nil
}

// Metrics scrapes /metrics of every running replica and returns the text
// of all of them (per-job series come from the replica holding the session
// or the leader).
func (t *Tether) Metrics() (string, error) {
	var b strings.Builder
	for _, r := range t.Replicas() {
		text, err := r.Metrics()
		if err != nil {
			continue // a replica that is down has no metrics
		}
		b.WriteString(text)
	}
	return b.String(), nil
}

// Metrics scrapes the replica's /metrics.
func (r *Replica) Metrics() (string, error) {
	if exited, _ := r.proc.Exited(); exited {
		return "", fmt.Errorf("replica %d is not running", r.Index)
	}
	return r.scraper.scrape(r.MetricsAddr)
}

// serviceAccountKubeconfig writes a kubeconfig with a token of ns/name.
func (c *Cluster) serviceAccountKubeconfig(ctx context.Context, ns, name string) (string, error) {
	tr, err := c.Clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for ServiceAccount %s/%s: %w", ns, name, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["default"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name}
	cfg.CurrentContext = "default"
	path := filepath.Join(c.Dir, name+".kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}
