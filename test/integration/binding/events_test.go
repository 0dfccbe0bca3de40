package binding

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestEachEventIsSentOnce checks that the control plane sends each Event
// once: a bound job's Events (Bound, Injected) each cost one create, none
// answered 409 AlreadyExists. Every Event after the leader election once
// went out twice, through two sinks on one broadcaster (controller-runtime's
// manager and its cluster each start recording on a broadcaster passed in
// Options.EventBroadcaster, kubernetes-sigs/controller-runtime#1576), and
// the second create of each was refused: an API call wasted per Event, 0.2
// per binding in a burst (test/performance/controller). Bound, sent with the
// binding's first status, is one Event.
func TestEachEventIsSentOnce(t *testing.T) {
	refusedBefore := eventCreates(t, "409")
	j := newJob(t, nil)
	waitForEvent(t, j, "Bound")
	waitForEvent(t, j, "Injected")
	// The second sink's create follows the first at once; a second is
	// plenty for it to be counted.
	time.Sleep(time.Second)
	if refused := eventCreates(t, "409") - refusedBefore; refused != 0 {
		t.Fatalf("kube-apiserver refused %v Event creates as AlreadyExists while one job was bound: the control plane sent Events more than once", refused)
	}
	// Bound is announced with the first status, and only then: one Event,
	// counted once (a second would be aggregated into it).
	var list eventsv1.EventList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(j.ns)); err != nil {
		t.Fatal(err)
	}
	var bound []string
	for _, e := range list.Items {
		if e.Regarding.Name == j.name && e.Reason == "Bound" {
			bound = append(bound, fmt.Sprintf("%s (count %d, series %v)", e.Note, e.DeprecatedCount, e.Series))
			if e.DeprecatedCount > 1 || e.Series != nil {
				t.Errorf("Bound Event %s was recorded more than once", e.Name)
			}
		}
	}
	if len(bound) != 1 {
		t.Fatalf("TrainJob %s has %d Bound Events, want 1: %v", j.name, len(bound), bound)
	}
}

// eventCreates is kube-apiserver's count of Event creates (POST events,
// core/v1) answered with code, from its /metrics.
func eventCreates(t *testing.T, code string) float64 {
	t.Helper()
	raw, err := clientset(t).CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal("reading kube-apiserver's /metrics:", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		t.Fatal("parsing kube-apiserver's /metrics:", err)
	}
	var n float64
	for _, m := range families["apiserver_request_total"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		if l["verb"] == "POST" && l["resource"] == "events" && l["group"] == "" && l["code"] == code {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}
