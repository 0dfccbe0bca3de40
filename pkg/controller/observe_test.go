package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/jobconfig"
)

func TestTrainerExitIgnoresDisruptedPods(t *testing.T) {
	ended := func(code int32) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{UID: "p1", Annotations: map[string]string{jobconfig.PodStatusAnnotation: "{}"}},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "node",
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}}},
		}
	}
	deleting := ended(143)
	deleting.DeletionTimestamp = &metav1.Time{}
	evicted := ended(137)
	evicted.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}
	cases := []struct {
		name   string
		pod    corev1.Pod
		code   int32
		counts bool
	}{
		{"own exit 1", ended(1), 1, true},
		{"own exit 0", ended(0), 0, true},
		{"SIGTERM from deletion (preemption)", deleting, 0, false},
		{"eviction", evicted, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, ok := trainerExit([]corev1.Pod{tc.pod}, &tetherv1.WorkerBindingStatus{}, "node")
			if ok != tc.counts || code != tc.code {
				t.Fatalf("trainerExit = %d, %v; want %d, %v", code, ok, tc.code, tc.counts)
			}
		})
	}
}
