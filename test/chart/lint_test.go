package chart

import (
	"os/exec"
	"strings"
	"testing"
)

// TestHelmLint runs `helm lint --strict` (warnings fail too) on the defaults
// and on each equivalent install's values.
func TestHelmLint(t *testing.T) {
	sets := [][]string{nil}
	for _, tc := range equivalent {
		sets = append(sets, tc.set)
	}
	for _, set := range sets {
		args := []string{"lint", "--strict", chartDir(), "--namespace", "tether-system", "--kube-version", kubeVersion}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out := run(t, tool(t, "helm"), args...)
		if !strings.Contains(string(out), "0 chart(s) failed") {
			t.Errorf("helm lint %v:\n%s", set, out)
		}
	}
}

// TestChartRefusesBadValues: a bad value fails the render with a message
// naming the value and what it may be.
func TestChartRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "certMode=vault"}, `certMode "vault": must be self-managed or cert-manager`},
		{[]string{"--set", "artifacts.mode=gcs"}, `artifacts.mode "gcs": must be in-cluster`},
		{[]string{"--set", "artifacts.mode=s3", "--set", "artifacts.s3.bucket="}, "artifacts.mode s3 needs artifacts.s3.endpoint, artifacts.s3.bucket"},
		{[]string{"--set", "replicas=0"}, "replicas 0: must be at least 1"},
		{[]string{"--namespace", "tether"}, `release namespace "tether": Tether's names are fixed`},
	} {
		args := append([]string{"template", "tether", chartDir(), "--kube-version", kubeVersion}, tc.args...)
		if !strings.Contains(strings.Join(tc.args, " "), "--namespace") {
			args = append(args, "--namespace", "tether-system")
		}
		out, err := exec.Command(tool(t, "helm"), args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("helm template %v: err %v, want an error containing %q; got:\n%s", tc.args, err, tc.want, out)
		}
	}
}

// TestChartOnlyValues covers what kustomize has no overlay for: the sidecar's
// default resources and the log level become control-plane flags; and
// sidecar.image the env kustomize's images: rewrites (TETHER_SIDECAR_IMAGE).
func TestChartOnlyValues(t *testing.T) {
	objs := parse(t, "helm", helmTemplate(t, "sidecar.requests.cpu=100m", "sidecar.requests.memory=96Mi",
		"sidecar.limits.memory=256Mi", "logLevel=debug", "sidecar.image=registry.example/tether-sidecar:v9"))
	d := objs["apps/v1/Deployment tether-system/tether-control-plane"]
	if d == nil {
		t.Fatal("no control-plane Deployment")
	}
	args := strings.Join(containerArgs(t, d.Object), " ")
	for _, want := range []string{"--sidecar-requests=cpu=100m,memory=96Mi", "--sidecar-limits=memory=256Mi",
		"--zap-log-level=debug"} {
		if !strings.Contains(args, want) {
			t.Errorf("args lack %s: %s", want, args)
		}
	}
	if got := containerEnv(t, d.Object)["TETHER_SIDECAR_IMAGE"]; got != "registry.example/tether-sidecar:v9" {
		t.Errorf("env TETHER_SIDECAR_IMAGE = %q, want sidecar.image's registry.example/tether-sidecar:v9", got)
	}
	if _, ok := objs["v1/Namespace /tether-system"]; ok {
		t.Error("createNamespace defaults to false, but the Namespace is rendered")
	}
}

func containerEnv(t *testing.T, d map[string]any) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range firstContainer(d)["env"].([]any) {
		m := e.(map[string]any)
		if v, ok := m["value"].(string); ok {
			out[m["name"].(string)] = v
		}
	}
	return out
}

func containerArgs(t *testing.T, d map[string]any) []string {
	t.Helper()
	var out []string
	for _, a := range firstContainer(d)["args"].([]any) {
		out = append(out, a.(string))
	}
	return out
}

// firstContainer is a rendered Deployment's first container.
func firstContainer(d map[string]any) map[string]any {
	spec := d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	return spec["containers"].([]any)[0].(map[string]any)
}
