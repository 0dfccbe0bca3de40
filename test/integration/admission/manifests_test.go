package admission

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestManifestsApplyServerSideDryRun checks that what manifests/ renders is
// accepted by a real API server (schemas, RBAC rules, webhook configuration,
// the quick start's store: Deployment, PersistentVolumeClaim, Service,
// NetworkPolicy), and that no pod template would violate Pod Security
// "restricted", which tether-system enforces (the API server warns about
// workload templates). Overlays with third-party kinds (cert-manager,
// Prometheus Operator) are rendered only: their CRDs are not installed here.
// The images (ours and versitygw's) are not pulled: nothing runs them here.
func TestManifestsApplyServerSideDryRun(t *testing.T) {
	kubeconfig, err := env.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"overlays/self-managed", "overlays/quick-start", "overlays/production"} {
		objs, _, err := env.Render(dir)
		if err != nil {
			t.Fatal(err)
		}
		// This API server already holds the webhook configuration with local
		// URLs (the suite's control plane uses it); validate the shipped one
		// under another name, so the dry run is a create, not a merge.
		var stream bytes.Buffer
		for _, o := range objs {
			if o.GetKind() == "MutatingWebhookConfiguration" {
				o.SetName(o.GetName() + "-dry-run")
			}
			b, err := yaml.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			stream.WriteString("---\n")
			stream.Write(b)
		}
		cmd := exec.Command(env.Kubectl(), "--kubeconfig", kubeconfig, "apply", "--dry-run=server", "-f", "-")
		cmd.Stdin = &stream
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl apply --dry-run=server of manifests/%s: %v\n%s", dir, err, out)
		}
		if strings.Contains(string(out), "PodSecurity") {
			t.Errorf("manifests/%s: a pod template violates Pod Security:\n%s", dir, out)
		}
		t.Logf("manifests/%s:\n%s", dir, out)
	}
	for _, dir := range []string{"overlays/cert-manager", "base"} {
		if _, _, err := env.Render(dir); err != nil {
			t.Error(err)
		}
	}
}
