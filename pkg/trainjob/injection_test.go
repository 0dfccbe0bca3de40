package trainjob

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tether-dev/tether/api/names"
)

func injectedPod(jobID, workerID string) *corev1.Pod {
	st := InjectionStatus{Version: InjectionStatusVersion, JobID: jobID, WorkerID: workerID, Sidecar: SidecarContainer}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{names.PodStatusAnnotation: st.String()}, Labels: TrainerPodLabels("tj")},
		Spec: corev1.PodSpec{InitContainers: []corev1.Container{{
			Name: SidecarContainer, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
			Env: []corev1.EnvVar{{Name: names.EnvJobID, Value: jobID}, {Name: names.EnvWorkerID, Value: workerID},
				{Name: names.EnvServerURL, Value: "https://tether.example"}, {Name: names.EnvTokenFile, Value: "/var/run/tether/token/token"}},
			VolumeMounts: []corev1.VolumeMount{{Name: TokenVolume, MountPath: SidecarTokenDir, ReadOnly: true}},
		}}, Volumes: []corev1.Volume{{Name: TokenVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "tj-tether-token"}}}}},
	}
}

func TestCheckInjected(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pod     func(*corev1.Pod)
		job     string
		wantErr string // "" means injected for job
		// isInjected is IsInjected's answer: it compares with no job.
		isInjected bool
	}{
		{name: "injected", pod: func(*corev1.Pod) {}, isInjected: true},
		{name: "injected for this job", pod: func(*corev1.Pod) {}, job: "j1", isInjected: true},
		{name: "other job", pod: func(*corev1.Pod) {}, job: "j2", wantErr: `names job "j1" worker "w1", but this pod belongs to job "j2"`, isInjected: true},
		{name: "no annotation", pod: func(p *corev1.Pod) { p.Annotations = nil }, wantErr: "no tether.dev/status annotation"},
		{name: "garbage", pod: func(p *corev1.Pod) { p.Annotations[names.PodStatusAnnotation] = "yes" }, wantErr: "is not Tether's JSON status"},
		{name: "other version", pod: func(p *corev1.Pod) {
			p.Annotations[names.PodStatusAnnotation] = strings.Replace(p.Annotations[names.PodStatusAnnotation], InjectionStatusVersion, "v0", 1)
		}, wantErr: `has version "v0"`},
		{name: "annotation only", pod: func(p *corev1.Pod) { p.Spec.InitContainers = nil }, wantErr: "has no tether-sidecar init container"},
		{name: "not a native sidecar", pod: func(p *corev1.Pod) { p.Spec.InitContainers[0].RestartPolicy = nil }, wantErr: "not a native sidecar"},
		{name: "sidecar of another job", pod: func(p *corev1.Pod) { p.Spec.InitContainers[0].Env[0].Value = "j9" }, wantErr: `set up for job "j9"`},
		// A runtime's declaration (Kueue mode) under a copied annotation: not
		// Tether's sidecar until the webhook completes it.
		{name: "declaration not completed", pod: func(p *corev1.Pod) {
			p.Spec.InitContainers[0].Env = nil
			p.Spec.InitContainers[0].Image = "registry.k8s.io/pause:3.10.2"
		}, wantErr: "not Tether's completed sidecar (no TETHER_JOB_ID, TETHER_WORKER_ID, TETHER_SERVER_URL, TETHER_TOKEN_FILE)"},
		{name: "completed but no token file", pod: func(p *corev1.Pod) { p.Spec.InitContainers[0].Env = p.Spec.InitContainers[0].Env[:3] },
			wantErr: "(no TETHER_TOKEN_FILE)"},
		// A fake sidecar: what a user can write into a runtime's template.
		{name: "fake with a command", pod: func(p *corev1.Pod) { p.Spec.InitContainers[0].Command = []string{"sleep", "infinity"} },
			wantErr: "sets a command or args (sleep infinity)"},
		{name: "no token volume", pod: func(p *corev1.Pod) { p.Spec.Volumes = nil }, wantErr: "has no volume tether-token"},
		{name: "token volume of another Secret", pod: func(p *corev1.Pod) { p.Spec.Volumes[0].Secret.SecretName = "mine" },
			wantErr: "not the job's token Secret tj-tether-token"},
		{name: "token volume not mounted", pod: func(p *corev1.Pod) { p.Spec.InitContainers[0].VolumeMounts = nil },
			wantErr: "does not mount volume tether-token"},
		{name: "another volume at the token dir", pod: func(p *corev1.Pod) { p.Spec.InitContainers[0].VolumeMounts[0].Name = "mine" },
			wantErr: `mounts "mine" at /var/run/tether/token`},
		{name: "token file elsewhere", pod: func(p *corev1.Pod) { p.Spec.InitContainers[0].Env[3].Value = "/tmp/token" },
			wantErr: "reads its token from /tmp/token"},
		{name: "two sidecars", pod: func(p *corev1.Pod) {
			p.Spec.InitContainers = append(p.Spec.InitContainers, p.Spec.InitContainers[0])
		}, wantErr: "2 init containers named tether-sidecar"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := injectedPod("j1", "w1")
			tc.pod(p)
			err := CheckInjected(p, tc.job, "")
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("CheckInjected: %v, want injected", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("CheckInjected: %v, want an error containing %q", err, tc.wantErr)
			}
			if got := IsInjected(p); got != tc.isInjected {
				t.Errorf("IsInjected = %v, want %v", got, tc.isInjected)
			}
		})
	}
}
