package chart

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pmezard/go-difflib/difflib"
	"sigs.k8s.io/yaml"

	"github.com/tether-dev/tether/test/framework/testenv"
)

// equivalent are the installs both methods support, each as a kustomization
// and the chart values that must render the same objects.
var equivalent = []struct {
	name string
	// kustomization is a kustomization.yaml whose paths are relative to manifests/.
	kustomization string
	set           []string
}{
	{
		name:          "quick-start",
		kustomization: "resources: [overlays/quick-start]\n",
		set:           []string{"createNamespace=true"},
	},
	{
		// A team's mirror: every image through kustomize's images: (the
		// sidecar's too: an env value the base's kustomizeconfig.yaml
		// makes the images transformer rewrite) against Helm's values.
		name: "quick-start from a team's registry",
		kustomization: `resources: [overlays/quick-start]
images:
  - name: ghcr.io/tether-dev/tether-control-plane
    newName: registry.platform.example/mirror/tether-control-plane
    newTag: v9
  - name: ghcr.io/tether-dev/tether-sidecar
    newName: registry.platform.example/mirror/tether-sidecar
    newTag: v9
  - name: ghcr.io/versity/versitygw
    newName: registry.platform.example/mirror/versitygw
`,
		set: []string{"createNamespace=true", "image.repository=registry.platform.example/mirror/tether-control-plane", "image.tag=v9",
			"sidecar.image=registry.platform.example/mirror/tether-sidecar:v9", "artifacts.inCluster.image=registry.platform.example/mirror/versitygw:v1.8.0"},
	},
	{
		name:          "quick-start with the read API",
		kustomization: "resources: [overlays/quick-start]\ncomponents: [overlays/read-api]\n",
		set:           []string{"createNamespace=true", "readAPI.enabled=true"},
	},
	{
		name:          "production",
		kustomization: "resources: [overlays/production]\n",
		set:           []string{"createNamespace=true", "artifacts.mode=s3"},
	},
	{
		name:          "cert-manager, own bucket, replicas, no PDB, Prometheus, the read API",
		kustomization: certManagerKustomization,
		set: []string{"createNamespace=true", "certMode=cert-manager", "artifacts.mode=s3",
			"artifacts.s3.endpoint=minio.storage.svc:9000", "artifacts.s3.bucket=ml-artifacts", "artifacts.s3.region=eu-west-1",
			"artifacts.s3.prefix=", "artifacts.s3.credentialsSecret=ml-s3",
			"replicas=3", "podDisruptionBudget.enabled=false",
			"metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true", "metrics.dashboard.enabled=true", "readAPI.enabled=true"},
	},
}

// certManagerKustomization is what docs/platform.md tells a platform team to
// write for cert-manager, a bucket of its own and Prometheus, with the
// patches a real install sets.
const certManagerKustomization = `resources: [overlays/cert-manager]
components: [overlays/artifacts-s3, overlays/prometheus, overlays/read-api, overlays/read-api-cert-manager]
replicas:
  - name: tether-control-plane
    count: 3
patches:
  - target: {kind: PodDisruptionBudget, name: tether-control-plane}
    patch: |
      $patch: delete
      apiVersion: policy/v1
      kind: PodDisruptionBudget
      metadata: {name: tether-control-plane, namespace: tether-system}
  - target: {kind: Deployment, name: tether-control-plane}
    patch: |
      - op: replace
        path: /spec/template/spec/containers/0/args/12
        value: --s3-endpoint=minio.storage.svc:9000
      - op: replace
        path: /spec/template/spec/containers/0/args/13
        value: --s3-bucket=ml-artifacts
      - op: replace
        path: /spec/template/spec/containers/0/args/14
        value: --s3-region=eu-west-1
      - op: remove
        path: /spec/template/spec/containers/0/args/15
      - op: replace
        path: /spec/template/spec/volumes/2/secret/secretName
        value: ml-s3
`

// TestChartMatchesKustomize renders each install both ways and requires the
// same set of objects with the same content: names, labels, RBAC rules,
// Deployment arguments, webhooks, everything.
func TestChartMatchesKustomize(t *testing.T) {
	for _, tc := range equivalent {
		t.Run(tc.name, func(t *testing.T) {
			// A kustomization beside manifests/ in a temporary copy would
			// miss edits; one inside manifests/ is removed afterwards.
			dir, err := os.MkdirTemp(filepath.Join(testenv.RepoRoot(), "manifests"), ".chart-test-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n" +
				strings.NewReplacer("overlays/", "../overlays/").Replace(tc.kustomization)
			if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
				t.Fatal(err)
			}
			want := parse(t, "kustomize", kustomize(t, dir))
			got := parse(t, "helm", helmTemplate(t, tc.set...))
			// What only Helm reads (the store's claim kept on uninstall).
			for _, u := range got {
				if a := u.GetAnnotations(); a["helm.sh/resource-policy"] != "" {
					delete(a, "helm.sh/resource-policy")
					if len(a) == 0 {
						a = nil
					}
					u.SetAnnotations(a)
				}
			}
			wantKeys, gotKeys := keys(want), keys(got)
			if !slices.Equal(wantKeys, gotKeys) {
				t.Fatalf("objects differ:\nkustomize: %s\nhelm:      %s", strings.Join(wantKeys, "\n           "), strings.Join(gotKeys, "\n           "))
			}
			for _, k := range wantKeys {
				if !reflect.DeepEqual(want[k].Object, got[k].Object) {
					t.Errorf("%s differs (-kustomize +helm):\n%s", k, diff(t, want[k].Object, got[k].Object))
				}
			}
			t.Logf("%d objects equal", len(wantKeys))
		})
	}
}

func keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func diff(t *testing.T, a, b any) string {
	t.Helper()
	ay, err := yaml.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	by, err := yaml.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	d, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: difflib.SplitLines(string(ay)), B: difflib.SplitLines(string(by)), Context: 3})
	if err != nil {
		t.Fatal(err)
	}
	return d
}
