package client

import (
	"errors"
	"strings"
	"testing"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// TestCancelFlushErrorNamesTheUnverifiedFiles: a flush that failed names
// the files the binding does not list as verified, and the node whose
// manifest is not verified, after what was stopped.
func TestCancelFlushErrorNamesTheUnverifiedFiles(t *testing.T) {
	st := &tetherv1.WorkerBindingStatus{NodeCount: 2, Nodes: []tetherv1.NodeStatus{
		{Rank: 0, PodUID: "a", Artifacts: &tetherv1.NodeArtifacts{Verified: true}},
		{Rank: 1, PodUID: "b", Artifacts: &tetherv1.NodeArtifacts{Missing: []string{"ckpt/step-8.pt"}, MissingCount: 3, LastError: "store unavailable"}},
	}}
	res := &CancelResult{CommandID: "c1", FlushError: errors.New("cancel c1 on ns/tj failed: node 1: store unavailable"),
		Stop: Stop{Action: StopSuspendTrainJob, Namespace: "ns", Name: "tj"}}
	res.Unverified, res.UnverifiedCount, res.UnverifiedSummary = unverifiedFiles(st)
	msg := (&CancelFlushError{Binding: "ns/tj", Result: res}).Error()
	for _, want := range []string{"TrainJob ns/tj suspended", "store unavailable", "3 file(s) not verified: ckpt/step-8.pt and 2 more", "node 1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not say %q", msg, want)
		}
	}
	if strings.Contains(res.UnverifiedSummary, "node 0") {
		t.Errorf("summary %q names node 0, whose manifest is verified", res.UnverifiedSummary)
	}

	// The worker's own list, when it reported one, is the one named.
	st.Artifacts = &tetherv1.ArtifactsStatus{Missing: []string{"model.pt"}, MissingCount: 1}
	if files, n, _ := unverifiedFiles(st); n != 1 || len(files) != 1 || files[0] != "model.pt" {
		t.Errorf("unverified %v (%d), want the worker's [model.pt]", files, n)
	}
}

// TestPermissionErrorSaysWhatToGrant: the verb, resource and namespace, that
// nothing was sent, and the Role rule that fixes it.
func TestPermissionErrorSaysWhatToGrant(t *testing.T) {
	msg := (&PermissionError{Verb: "patch", Resource: "workloads.kueue.x-k8s.io", Namespace: "team-a", Name: "trainjob-x-1a2b3",
		Err: errors.New("forbidden")}).Error()
	for _, want := range []string{"patch on workloads.kueue.x-k8s.io in namespace team-a", "nothing was sent",
		`apiGroups: ["kueue.x-k8s.io"], resources: ["workloads"], verbs: ["patch"]`} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not say %q", msg, want)
		}
	}
}
