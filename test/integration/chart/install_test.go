package chart

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tether-dev/tether/test/framework/testenv"
)

const sa = "system:serviceaccount:tether-system:tether-control-plane"

// cluster starts a kube-apiserver of its own and returns an admin
// kubeconfig: each method installs on a fresh one (envtest has no namespace
// controller, so an uninstalled tether-system would never go away).
func cluster(t *testing.T) (assets, kubeconfig string) {
	t.Helper()
	assets, err := testenv.Assets()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	if _, err := env.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	user, err := env.AddUser(envtest.User{Name: "tether-chart-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := writeFile(kubeconfig, kc); err != nil {
		t.Fatal(err)
	}
	return assets, kubeconfig
}

func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(bin), strings.Join(args, " "), err, stderr.Bytes(), out)
	}
	return string(out)
}

// installed is what the API server holds after an install: every object
// Tether ships, as the server returns it, less what the server itself sets.
type installed struct {
	kinds   map[string][]string // kind -> sorted names
	rbac    map[string]any      // ClusterRole and Role rules
	canI    map[string]string   // `kubectl auth can-i` answers for the ServiceAccount
	elapsed time.Duration
}

func inspect(t *testing.T, kubectl, kubeconfig string) installed {
	t.Helper()
	in := installed{kinds: map[string][]string{}, rbac: map[string]any{}, canI: map[string]string{}}
	for _, kind := range []string{"namespaces", "customresourcedefinitions", "serviceaccounts", "clusterroles", "roles",
		"clusterrolebindings", "rolebindings", "deployments", "services", "secrets", "persistentvolumeclaims",
		"networkpolicies", "poddisruptionbudgets", "mutatingwebhookconfigurations",
		"validatingadmissionpolicies", "validatingadmissionpolicybindings"} {
		out := run(t, kubectl, "--kubeconfig", kubeconfig, "get", kind, "-A", "-l", "app.kubernetes.io/part-of=tether",
			"-o", "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}{\"\\n\"}{end}")
		in.kinds[kind] = strings.Fields(out)
	}
	for _, r := range []string{"clusterrole/tether-control-plane", "role/tether-control-plane"} {
		var obj map[string]any
		if err := json.Unmarshal([]byte(run(t, kubectl, "--kubeconfig", kubeconfig, "-n", "tether-system", "get", r, "-o", "json")), &obj); err != nil {
			t.Fatal(err)
		}
		in.rbac[r] = obj["rules"]
	}
	for _, q := range []string{"get trainjobs.trainer.kubeflow.org -A", "update trainjobs.trainer.kubeflow.org -A", "create secrets -A",
		"list secrets -A", "list secrets -n tether-system", "update mutatingwebhookconfigurations/tether-webhook",
		"update mutatingwebhookconfigurations/other", "delete pods -A", "update leases -n tether-system", "update leases -n default"} {
		// can-i exits 1 for "no"; its stdout is the answer either way.
		out, _ := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig, "auth", "can-i", "--as", sa}, strings.Fields(q)...)...).Output()
		in.canI[q] = strings.TrimSpace(string(out))
	}
	return in
}

// TestInstallBothWays installs the quick start with each method on a real
// kube-apiserver and requires the same objects, the same RBAC rules and the
// same authorization answers for the control plane's ServiceAccount.
func TestInstallBothWays(t *testing.T) {
	var helmInstall, kustomizeInstall installed
	t.Run("helm", func(t *testing.T) {
		assets, kc := cluster(t)
		kubectl, helm := filepath.Join(assets, "kubectl"), filepath.Join(assets, "helm")
		start := time.Now()
		// Helm stores the release in tether-system, so it exists first (charts/tether/README.md).
		run(t, kubectl, "--kubeconfig", kc, "create", "namespace", "tether-system")
		run(t, kubectl, "--kubeconfig", kc, "label", "namespace", "tether-system", "app.kubernetes.io/part-of=tether",
			"pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/warn=restricted", "pod-security.kubernetes.io/audit=restricted")
		out := run(t, helm, "--kubeconfig", kc, "install", "tether", filepath.Join(testenv.RepoRoot(), "charts", "tether"), "--namespace", "tether-system")
		elapsed := time.Since(start)
		helmInstall = inspect(t, kubectl, kc)
		helmInstall.elapsed = elapsed
		t.Logf("helm install: %s\n%s", helmInstall.elapsed.Round(time.Millisecond), out)
		run(t, helm, "--kubeconfig", kc, "uninstall", "tether", "--namespace", "tether-system")
		if left := run(t, kubectl, "--kubeconfig", kc, "get", "deployments,clusterroles,mutatingwebhookconfigurations", "-A",
			"-l", "app.kubernetes.io/part-of=tether", "-o", "name"); left != "" {
			t.Errorf("helm uninstall left:\n%s", left)
		}
	})
	t.Run("kustomize", func(t *testing.T) {
		assets, kc := cluster(t)
		kubectl := filepath.Join(assets, "kubectl")
		start := time.Now()
		out := run(t, kubectl, "--kubeconfig", kc, "apply", "-k", filepath.Join(testenv.RepoRoot(), "manifests", "overlays", "quick-start"))
		elapsed := time.Since(start)
		kustomizeInstall = inspect(t, kubectl, kc)
		kustomizeInstall.elapsed = elapsed
		t.Logf("kubectl apply -k: %s\n%s", kustomizeInstall.elapsed.Round(time.Millisecond), out)
	})
	if t.Failed() {
		return
	}
	if !reflect.DeepEqual(helmInstall.kinds, kustomizeInstall.kinds) {
		t.Errorf("objects differ:\nhelm:      %v\nkustomize: %v", helmInstall.kinds, kustomizeInstall.kinds)
	}
	if !reflect.DeepEqual(helmInstall.rbac, kustomizeInstall.rbac) {
		t.Errorf("RBAC rules differ:\nhelm:      %v\nkustomize: %v", helmInstall.rbac, kustomizeInstall.rbac)
	}
	if !reflect.DeepEqual(helmInstall.canI, kustomizeInstall.canI) {
		t.Errorf("authorization differs:\nhelm:      %v\nkustomize: %v", helmInstall.canI, kustomizeInstall.canI)
	}
	// Least privilege, as the API server decides it.
	for q, want := range map[string]string{"update trainjobs.trainer.kubeflow.org -A": "no", "list secrets -A": "no",
		"list secrets -n tether-system": "yes", "update mutatingwebhookconfigurations/tether-webhook": "yes",
		"update mutatingwebhookconfigurations/other": "no", "delete pods -A": "no", "update leases -n default": "no"} {
		if got := helmInstall.canI[q]; got != want {
			t.Errorf("can-i %s: %q, want %q", q, got, want)
		}
	}
	if n := len(helmInstall.kinds["deployments"]); n != 2 {
		t.Errorf("deployments: %v, want the control plane and the store", helmInstall.kinds["deployments"])
	}
}
