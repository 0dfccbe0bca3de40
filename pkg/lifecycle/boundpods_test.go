package lifecycle

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// A rank's newest pod is the replacement even when both were created within
// one second (creation timestamps' resolution): before, the name decided,
// and a successor whose random suffix sorted first lost to the pod it
// replaced (the binding then recorded the replaced pod as the rank's, and
// the artifact endpoint refused the successor's writes).
func TestBoundPodsNewestWithinOneSecond(t *testing.T) {
	at := time.Date(2026, 12, 6, 3, 40, 0, 0, time.UTC)
	pod := func(name string) *testobj.PodWrapper {
		return testobj.MakeTrainerPod("tj", "ns").Name(name).Injected().Created(at)
	}
	for _, tc := range []struct {
		name     string
		old, new *corev1.Pod
	}{
		{"the replaced pod is being deleted", pod("tj-node-0-0-zzzzz").Deleting(at).Obj(), pod("tj-node-0-0-aaaaa").Obj()},
		{"the replaced pod failed", pod("tj-node-0-0-zzzzz").Phase(corev1.PodFailed).Obj(), pod("tj-node-0-0-aaaaa").Obj()},
		{"a later JobSet restart attempt", pod("tj-node-0-0-zzzzz").RestartAttempt(0).Obj(), pod("tj-node-0-0-aaaaa").RestartAttempt(1).Obj()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, order := range [][]corev1.Pod{{*tc.old, *tc.new}, {*tc.new, *tc.old}} {
				var newest []string
				for _, b := range boundPods(order, tetherv1.WorkerBindingSettings{}) {
					if b.newest {
						newest = append(newest, b.pod.Name)
					}
				}
				if len(newest) != 1 || newest[0] != tc.new.Name {
					t.Errorf("newest of rank 0: %v, want [%s]", newest, tc.new.Name)
				}
			}
		})
	}
}
