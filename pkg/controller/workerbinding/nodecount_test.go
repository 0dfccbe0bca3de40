package workerbinding

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/lifecycle"
)

// failingJobSetReader answers every read with err (the API server away).
type failingJobSetReader struct {
	jobSetReader
	err error
}

func (r failingJobSetReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return r.err
}

// A JobSet read that fails is retried soon: until the count is recorded the
// artifact endpoint holds back keys under nodes/<r>/ from any pod but node
// r's, and a quiet job may bring no other reconcile for minutes. Before, the
// failed read returned no requeue (the soak's 4-node binding stayed without
// a node count through its run).
func TestNodeCountReadRetried(t *testing.T) {
	wb := &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns"}}
	wb.Spec.Settings = lifecycle.RecordSettings(jobconfig.Settings{HeartbeatInterval: 10 * time.Second, TrainerContainer: "node", Nodes: jobconfig.NodesAll})
	lifecycle.Initial(&wb.Status)
	r := &Reconciler{StatusInterval: 10 * time.Second, MissedHeartbeats: 3, ArtifactGrace: 30 * time.Second,
		Live: failingJobSetReader{err: errors.New("connection refused")}}
	pods := []corev1.Pod{*pod(0, "p0").Obj(), *pod(1, "p1").Obj()}
	requeue := r.decideRequeue(context.Background(), trainJob(nil), wb, pods, at(2))
	if wb.Status.NodeCount != 0 {
		t.Fatalf("node count %d recorded from a failed read", wb.Status.NodeCount)
	}
	if requeue <= 0 || requeue > nodeCountRetry {
		t.Fatalf("requeue after %v, want within %v (the read is retried)", requeue, nodeCountRetry)
	}
	r.Live = jobSetReader{nodes: 4}
	requeue = r.decideRequeue(context.Background(), trainJob(nil), wb, pods, at(3))
	if wb.Status.NodeCount != 4 {
		t.Fatalf("node count %d after the retry, want 4", wb.Status.NodeCount)
	}
	if requeue == nodeCountRetry {
		t.Fatalf("still retrying the read once the count is recorded (requeue %v)", requeue)
	}
}
