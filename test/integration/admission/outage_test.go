package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/test/framework/testenv"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// otherFinalizer is a finalizer of some other controller (a queue, a
// backup operator): it removes it with an UPDATE whenever it is done.
const otherFinalizer = "cleanup.example.com/hold"

var jobSetGVK = schema.GroupVersionKind{Group: "jobset.x-k8s.io", Version: "v1alpha2", Kind: "JobSet"}

// installJobSetCRD installs JobSet's own CRD, from the module go.mod requires.
func installJobSetCRD(t *testing.T) {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/jobset")
	cmd.Dir = testenv.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("locating the JobSet module: %v", err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), "config", "components", "crd", "bases", "jobset.x-k8s.io_jobsets.yaml")
	if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{Paths: []string{path}, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
}

// boundJobSet is the JobSet the Trainer creates for a bound TrainJob: the
// bind label on the JobSet, one replicated job "node".
func boundJobSet(ns, name string) *unstructured.Unstructured {
	js := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{names.BindLabel: names.BindValue}},
		"spec": map[string]any{"replicatedJobs": []any{map[string]any{
			"name": "node", "replicas": int64(1),
			"template": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
				"restartPolicy": "Never",
				"containers":    []any{map[string]any{"name": "node", "image": "busybox"}},
			}}}},
		}}},
	}}
	js.SetGroupVersionKind(jobSetGVK)
	return js
}

// TestNamespaceOfBoundJobIsDeletedDuringOutage deletes a namespace holding a
// bound TrainJob and its JobSet, each held by another controller's
// finalizer, while every replica of the control plane is down (its webhooks
// refuse connections, and both match UPDATE with failurePolicy Fail). The
// other controller removes its finalizers with UPDATEs, and the namespace
// goes away. This API server runs no namespace controller: the test deletes
// the namespace's contents and finalizes it as that controller would.
func TestNamespaceOfBoundJobIsDeletedDuringOutage(t *testing.T) {
	ctx := context.Background()
	installJobSetCRD(t)
	ns := newNamespace(t, nil)

	tj := testobj.MakeTrainJob("llama", ns).Bound().Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		_, err := get(t, &tetherv1.WorkerBinding{}, ns, "llama")
		return err
	})
	js := boundJobSet(ns, "llama")
	if err := env.Client.Create(ctx, js); err != nil {
		t.Fatal(err)
	}
	if !jobSetRouted(js) {
		t.Fatalf("the JobSet webhook did not label the trainer pod template %s=true", mutate.RouteLabel)
	}
	// The other controller's finalizers, put on while Tether is up.
	for _, o := range []client.Object{tj, js} {
		o.SetFinalizers(append(o.GetFinalizers(), otherFinalizer))
		if err := env.Client.Update(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	if err := env.StopControlPlane(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.RestartControlPlane(context.Background()); err != nil {
			t.Errorf("restarting the control plane: %v", err)
		}
	})

	if err := env.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	deleteNamespaceContents(t, ns)
	// The other controller sees both objects deleting and lets them go.
	for kind, o := range map[string]client.Object{"TrainJob": tj, "JobSet": js} {
		eventually(t, func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
				return client.IgnoreNotFound(err)
			}
			if o.GetDeletionTimestamp() == nil {
				return fmt.Errorf("%s is not being deleted", o.GetName())
			}
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
				"finalizers":      slices.DeleteFunc(o.GetFinalizers(), func(f string) bool { return f == otherFinalizer }),
				"resourceVersion": o.GetResourceVersion(),
			}})
			if err := env.Client.Patch(ctx, o, client.RawPatch(types.MergePatchType, patch)); err != nil {
				return fmt.Errorf("removing finalizer %s from %s %s: %w", otherFinalizer, kind, o.GetName(), err)
			}
			return nil
		})
	}
	finalizeNamespace(t, ns)
	eventually(t, func() error {
		err := env.Client.Get(ctx, types.NamespacedName{Name: ns}, &corev1.Namespace{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("namespace %s still there (%v)", ns, err)
	})
}

func jobSetRouted(js *unstructured.Unstructured) bool {
	jobs, _, _ := unstructured.NestedSlice(js.Object, "spec", "replicatedJobs")
	for _, j := range jobs {
		labels, _, _ := unstructured.NestedStringMap(j.(map[string]any), "template", "spec", "template", "metadata", "labels")
		if labels[mutate.RouteLabel] == "true" {
			return true
		}
	}
	return false
}

// namespacedResources lists every namespaced resource the namespace
// controller empties: those it can list and delete by collection.
func namespacedResources(t *testing.T) []schema.GroupVersionResource {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	lists, err := cs.Discovery().ServerPreferredNamespacedResources()
	if err != nil {
		t.Fatal(err)
	}
	var out []schema.GroupVersionResource
	for _, l := range lists {
		gv, _ := schema.ParseGroupVersion(l.GroupVersion)
		for _, r := range l.APIResources {
			if slices.Contains(r.Verbs, "deletecollection") && slices.Contains(r.Verbs, "list") {
				out = append(out, gv.WithResource(r.Name))
			}
		}
	}
	return out
}

// deleteNamespaceContents deletes every object in ns, as the namespace
// controller does (DELETE requests: no Tether webhook matches them).
func deleteNamespaceContents(t *testing.T, ns string) {
	t.Helper()
	dc, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range namespacedResources(t) {
		if err := dc.Resource(r).Namespace(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("deleting %s in %s: %v", r, ns, err)
		}
	}
}

// finalizeNamespace waits until ns is empty, then removes the namespace
// controller's finalizer, as that controller does.
func finalizeNamespace(t *testing.T, ns string) {
	t.Helper()
	dc, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	resources := namespacedResources(t)
	eventually(t, func() error {
		for _, r := range resources {
			l, err := dc.Resource(r).Namespace(ns).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				return err
			}
			if len(l.Items) > 0 {
				return fmt.Errorf("%d %s left in %s (first %s, finalizers %v)", len(l.Items), r.Resource, ns, l.Items[0].GetName(), l.Items[0].GetFinalizers())
			}
		}
		return nil
	})
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	n, err := cs.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Finalizers = nil
	if _, err := cs.CoreV1().Namespaces().Finalize(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
