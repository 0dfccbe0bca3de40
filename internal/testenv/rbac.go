package testenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"

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
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
