package mutate

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
)

// TestInjectionReporterAnnouncesOnlyInjectedPodsOnce: an Event and a count
// per pod that exists with the sidecar; none for a pod with only a status
// annotation, none twice for the same pod.
func TestInjectionReporterAnnouncesOnlyInjectedPodsOnce(t *testing.T) {
	decode := func(path string) *corev1.Pod {
		var p corev1.Pod
		if err := json.Unmarshal(readJSON(t, path), &p); err != nil {
			t.Fatal(err)
		}
		return &p
	}
	injected := decode("testdata/pod/injected-default.golden.yaml")
	injected.Name, injected.UID = "llama-finetune-node-0-0-abcde", "uid-1"
	annotationOnly := decode("testdata/pod/status-annotation-without-sidecar.in.yaml")
	annotationOnly.Name, annotationOnly.UID = "llama-finetune-node-0-0-fghij", "uid-2"

	rec := events.NewFakeRecorder(10)
	r := &InjectionReporter{TrainJobs: readTrainJob(t, "testdata/pod/injected-default.trainjob.yaml"), Recorder: rec, seen: map[types.UID]bool{}}
	before := injectedCount(t)
	for _, p := range []*corev1.Pod{injected, annotationOnly, injected} {
		r.observe(context.Background(), p)
	}
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	if len(got) != 1 || !strings.Contains(got[0], "Normal Injected") || !strings.Contains(got[0], injected.Name) {
		t.Errorf("Events %q, want one Normal Injected naming %s", got, injected.Name)
	}
	if n := injectedCount(t) - before; n != 1 {
		t.Errorf("tether_pods_injected_total grew by %v, want 1", n)
	}
}

func injectedCount(t *testing.T) float64 {
	t.Helper()
	var d dto.Metric
	if err := podsInjected.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}
