package testenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ServiceAccount is the identity the control plane runs as in a cluster.
const ServiceAccount = "system:serviceaccount:tether-system:tether-control-plane"

// Render returns the objects `kubectl kustomize <dir>` renders, dir relative
// to manifests/.
func (e *Env) Render(dir string) ([]*unstructured.Unstructured, []byte, error) {
	return Render(e.Kubectl(), dir)
}

// Render runs `<kubectl> kustomize manifests/<dir>` and returns the objects
// and the YAML.
func Render(kubectl, dir string) ([]*unstructured.Unstructured, []byte, error) {
	out, err := exec.Command(kubectl, "kustomize", filepath.Join(RepoRoot(), "manifests", dir)).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, nil, fmt.Errorf("kubectl kustomize manifests/%s: %w: %s", dir, err, ee.Stderr)
		}
		return nil, nil, fmt.Errorf("kubectl kustomize manifests/%s: %w", dir, err)
	}
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		u := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, nil, err
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs, out, nil
}

// ServiceAccountConfig installs what manifests/overlays/self-managed ships
// (namespace, ServiceAccount, RBAC, the rest) except the CRD and webhook
// configuration, which the test environment installed with local addresses,
// and returns credentials for the control plane's ServiceAccount, so the
// control plane runs with exactly the permissions it ships with.
func (e *Env) ServiceAccountConfig(ctx context.Context) (*rest.Config, error) {
	objs, _, err := e.Render("overlays/self-managed")
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "CustomResourceDefinition", "MutatingWebhookConfiguration":
			continue
		}
		if err := e.Client.Create(ctx, o); err != nil {
			return nil, fmt.Errorf("creating %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	user, err := e.env.AddUser(envtest.User{Name: ServiceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:tether-system"}}, nil)
	if err != nil {
		return nil, err
	}
	return user.Config(), nil
}

// Kubeconfig writes an admin kubeconfig for kubectl and returns its path.
func (e *Env) Kubeconfig(dir string) (string, error) {
	user, err := e.env.AddUser(envtest.User{Name: "tether-test-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, writeFile(path, kc)
}

// FreeAddr is a 127.0.0.1 address whose port was free when asked.
func FreeAddr() (string, error) { return FreeAddrOn(net.IPv4(127, 0, 0, 1)) }

// FreeAddrOn is an address on ip whose port was free when asked, from below
// the kernel's ephemeral range (net.ipv4.ip_local_port_range): a listener
// the harness stops and starts again on the same port (a replica's
// restart) would otherwise find it taken by some connection's source port
// in between (seen in the soak: "bind: address already in use").
func FreeAddrOn(ip net.IP) (string, error) {
	low := ephemeralLow()
	const first = 10000
	for range 200 {
		port := first + rand.IntN(low-first)
		if !handOut(port) {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(ip.String(), strconv.Itoa(port)))
		if err != nil {
			continue
		}
		addr := l.Addr().String()
		_ = l.Close()
		return addr, nil
	}
	return "", fmt.Errorf("no free port on %s in %d-%d", ip, first, low-1)
}

// handedOut are the ports FreeAddrOn returned: none twice per process,
// since a port is free only until its caller listens on it.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

func handOut(port int) bool {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	if handedOut.ports[port] {
		return false
	}
	handedOut.ports[port] = true
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it cannot be read, Linux's default).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 11000 {
		return 32768
	}
	return n
}
