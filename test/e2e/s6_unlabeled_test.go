package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/pkg/binding"
)

// Scenario 6: an unlabeled TrainJob in the same cluster runs untouched: its
// TrainJob never reaches Tether's webhook (object selector), gets no Secret,
// no binding, no annotations, no Events from Tether; neither its JobSet nor
// its pod reaches Tether's JobSet and pod webhooks (they select on
// tether.dev/bind, which only bound jobs' JobSets and pod templates carry).
func TestScenario6UnlabeledUntouched(t *testing.T) {
	timed(t)
	ns := suite.newNamespace(t, "plain")
	const name = "not-bound"
	tjBefore, _ := suite.metricValue(t, "tether_trainjob_admissions_total")
	podsBefore, _ := suite.metricValue(t, "tether_pod_admissions_total")
	jobSetsBefore, _ := suite.metricValue(t, "tether_jobset_admissions_total")
	tj := trainJob(name, ns).Queue("user-queue").Obj()
	suite.create(t, tj)

	var pod corev1.Pod
	eventually(t, 60*time.Second, "the unlabeled TrainJob's pod", func() error {
		pods := suite.trainerPods(t, ns, name)
		if len(pods) == 0 {
			return fmt.Errorf("no pod yet")
		}
		pod = pods[0]
		return nil
	})
	if _, ok := pod.Labels["tether.dev/bind"]; ok {
		t.Errorf("the unlabeled job's pod carries tether.dev/bind: %v", pod.Labels)
	}
	if vols := volumesBesideServiceAccount(pod); len(pod.Spec.InitContainers) != 0 || pod.Annotations["tether.dev/status"] != "" || len(vols) != 0 {
		t.Fatalf("the unlabeled job's pod was modified: init %v, annotations %v, volumes %v", pod.Spec.InitContainers, pod.Annotations, vols)
	}
	got := suite.getTrainJob(t, ns, name)
	for k := range got.Annotations {
		if strings.HasPrefix(k, "tether.dev/") {
			t.Errorf("unlabeled TrainJob got annotation %s", k)
		}
	}
	ctx := context.Background()
	err := suite.c.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: binding.TokenSecretName(name)}, &corev1.Secret{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("token Secret of the unlabeled TrainJob: %v, want NotFound", err)
	}
	if _, err := suite.getBinding(ns, name); !apierrors.IsNotFound(err) {
		t.Errorf("WorkerBinding of the unlabeled TrainJob: %v, want NotFound", err)
	}
	if reasons := suite.eventReasons(t, ns, name); len(reasons) > 0 {
		for _, r := range reasons {
			if r == "Injected" || r == "NotBound" || r == "TokenIssued" {
				t.Errorf("Tether recorded Event %s on the unlabeled TrainJob", r)
			}
		}
	}
	eventually(t, 10*time.Second, "admission counters", func() error {
		tjAfter, _ := suite.metricValue(t, "tether_trainjob_admissions_total")
		if tjAfter != tjBefore {
			return fmt.Errorf("tether_trainjob_admissions_total went %v -> %v: the unlabeled TrainJob reached the webhook", tjBefore, tjAfter)
		}
		if n, _ := suite.metricValue(t, "tether_pod_admissions_total"); n != podsBefore {
			return fmt.Errorf("tether_pod_admissions_total went %v -> %v: the unlabeled job's pod reached the pod webhook", podsBefore, n)
		}
		if n, _ := suite.metricValue(t, "tether_jobset_admissions_total"); n != jobSetsBefore {
			return fmt.Errorf("tether_jobset_admissions_total went %v -> %v: the unlabeled job's JobSet reached the JobSet webhook", jobSetsBefore, n)
		}
		return nil
	})
	// Delete it so its quota frees for the scenarios after this one.
	if err := suite.c.Client.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
}

// volumesBesideServiceAccount is the pod's volumes less the one the API
// server's ServiceAccount admission plugin adds to every pod of a cluster
// that issues tokens (kube-api-access-<suffix>, a projected token, CA and
// namespace): what is left was put there by someone else.
func volumesBesideServiceAccount(pod corev1.Pod) []corev1.Volume {
	var rest []corev1.Volume
	for _, v := range pod.Spec.Volumes {
		if p := v.Projected; strings.HasPrefix(v.Name, "kube-api-access-") && p != nil && len(p.Sources) > 0 && p.Sources[0].ServiceAccountToken != nil {
			continue
		}
		rest = append(rest, v)
	}
	return rest
}
