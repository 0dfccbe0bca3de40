package python

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/test/framework/pythonenv"
	"github.com/tether-dev/tether/test/framework/testenv"
)

// TestPythonClient runs clients/python/tests/integration, with the package
// installed into a venv of Debian's Python, against a real API server and
// control plane: a tenant's kubeconfig (its namespace's Role only, plus the
// shipped tether-artifact-reader) resumes a watch, survives an expired
// one (the API server's 410, answered by re-listing), waits with a callback,
// cancels a running job (refused first for a caller that may not stop it,
// nothing sent), downloads a finished job's verified files through the
// read API and is refused a file overwritten in the store.
func TestPythonClient(t *testing.T) {
	root := testenv.RepoRoot()
	pythonPath, err := pythonenv.Packages(root)
	if err != nil {
		t.Skipf("the Debian Python packages (python3-kubernetes, python3-pytest) could not be obtained: %v", err)
	}
	venv, err := pythonenv.Install(root, t.TempDir(), pythonPath)
	if err != nil {
		t.Fatal(err)
	}
	env := startWithReadAPI(t)
	ctx := context.Background()
	const ns = "team-py"
	for _, o := range []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	done := newRunningJob(t, env, ns, "done")
	files := map[string][]byte{
		"model.bin":      bytes.Repeat([]byte("the verified model "), 50_000),
		"ckpt/step-1.pt": []byte("checkpoint one"),
		"tampered.bin":   bytes.Repeat([]byte("bytes the trainer wrote "), 1_000),
	}
	done.upload(t, files)
	done.succeed(t)
	// Overwritten in the store after the verdict, same size: only its MD5 tells.
	forged := bytes.Repeat([]byte("bytes someone else wrote"), 1_000)
	if err := os.WriteFile(filepath.Join(env.ArtifactDir, done.jobID, "tampered.bin"), forged, 0o600); err != nil {
		t.Fatal(err)
	}
	md5s := map[string]string{}
	for p, b := range files {
		sum := md5.Sum(b)
		md5s[p] = hex.EncodeToString(sum[:])
	}
	forgedSum := md5.Sum(forged)

	run := newRunningJob(t, env, ns, "run")
	run.removePodOnceSuspended(t)

	tenantRules := append(append(append([]rbacv1.PolicyRule{}, testenv.OrchestratorRules...), testenv.TenantRules...),
		rbacv1.PolicyRule{APIGroups: []string{"kueue.x-k8s.io"}, Resources: []string{"workloads"}, Verbs: []string{"list", "patch"}})
	filesJSON, _ := json.Marshal(md5s)
	pyEnv := map[string]string{
		"TETHER_IT_KUBECONFIG":         kubeconfigFor(t, env, ns, "orchestrator", tenantRules, "tether-artifact-reader"),
		"TETHER_IT_LIMITED_KUBECONFIG": kubeconfigFor(t, env, ns, "watcher", testenv.OrchestratorRules, ""),
		"TETHER_IT_NAMESPACE":          ns,
		"TETHER_IT_DONE":               done.name,
		"TETHER_IT_RUNNING":            run.name,
		"TETHER_IT_FILES":              string(filesJSON),
		"TETHER_IT_TAMPERED":           "tampered.bin",
		"TETHER_IT_TAMPERED_MD5":       hex.EncodeToString(forgedSum[:]),
		"TETHER_IT_VENV":               venv,
		// In-cluster reads: the binding Service and the control plane's CA
		// (as a job's token Secret carries it).
		"TETHER_IT_READ_URL": env.BindingURL,
		"TETHER_IT_READ_CA":  done.caFile,
	}
	runPytest(t, venv, pythonPath, pyEnv)
}

// runPytest runs the integration tests of the installed package and fails
// unless every one of them ran and passed.
func runPytest(t *testing.T, venv, pythonPath string, vars map[string]string) {
	t.Helper()
	tests := filepath.Join(testenv.RepoRoot(), "clients", "python", "tests", "integration")
	cmd := exec.Command(filepath.Join(venv, "bin", "python"), "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider", tests)
	cmd.Dir = venv
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pythonPath, "TETHER_PYTHON_INSTALLED=1", "PYTHONDONTWRITEBYTECODE=1")
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	t.Logf("pytest:\n%s", out)
	if err != nil {
		t.Fatalf("pytest of clients/python/tests/integration: %v", err)
	}
	summary := regexp.MustCompile(`=+ (.*) in [0-9.]+s`).FindSubmatch(out)
	if summary == nil || !regexp.MustCompile(`^\d+ passed$`).Match(summary[1]) {
		t.Fatalf("pytest's summary %q: want every test passed, none skipped", summary)
	}
}
