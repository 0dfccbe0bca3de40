package trainjob

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
)

// What the pod webhook leaves on an injected pod. They live here, not in
// pkg/mutate, because the controller must recognise an injected pod too and
// may not import the webhooks.
const (
	// SidecarContainer is the name of the injected native sidecar.
	SidecarContainer = "tether-sidecar"
	// TokenVolume is the pod volume of the job's token Secret, which the
	// sidecar mounts read-only at SidecarTokenDir.
	TokenVolume     = "tether-token"
	SidecarTokenDir = "/var/run/tether/token"
	// PodTokenVolume is the projected ServiceAccount token of the pod
	// (audience names.PodTokenAudience), which only the sidecar mounts,
	// read-only at SidecarPodTokenDir: it proves the pod to the binding
	// server. PodTokenExpirationSeconds is its lifetime (the kubelet
	// rotates it at 80%).
	PodTokenVolume            = "tether-pod-token"
	SidecarPodTokenDir        = "/var/run/tether/pod-token"
	PodTokenKey               = "token"
	PodTokenExpirationSeconds = 600
	// InjectionStatusVersion changes when what the webhook injects changes shape.
	InjectionStatusVersion = "v1alpha1"
)

// InjectionStatus is the value of the pod's tether.dev/status annotation.
type InjectionStatus struct {
	Version  string `json:"version"`
	JobID    string `json:"jobID"`
	WorkerID string `json:"workerID"`
	Sidecar  string `json:"sidecar"`
	// ArtifactVolume is the volume shared with the trainer; Reused says it was
	// the trainer's own rather than one Tether added.
	ArtifactVolume string `json:"artifactVolume"`
	Reused         bool   `json:"reused"`
	// Declared says the sidecar completes the runtime's declaration of it
	// (Kueue mode): its resources are the declaration's.
	Declared bool `json:"declared,omitempty"`
}

func (s InjectionStatus) String() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// ParseInjectionStatus decodes a tether.dev/status value.
func ParseInjectionStatus(v string) (InjectionStatus, error) {
	var s InjectionStatus
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return s, fmt.Errorf("%s is not Tether's JSON status: %w", names.PodStatusAnnotation, err)
	}
	if s.Version != InjectionStatusVersion {
		return s, fmt.Errorf("%s has version %q, this Tether writes %q", names.PodStatusAnnotation, s.Version, InjectionStatusVersion)
	}
	return s, nil
}

// ErrNoInjectionStatus is CheckInjected's answer for a pod without the annotation.
var ErrNoInjectionStatus = errors.New("no " + names.PodStatusAnnotation + " annotation")

// CheckInjected tells whether pod carries Tether's sidecar as Tether leaves
// it, and if not why: the status annotation parses; the pod has exactly one
// init container named like the sidecar, a native sidecar (restartPolicy
// Always) completed by the webhook (job and worker ids, server URL, token
// file) that runs its image's own entrypoint (Tether never sets a command);
// its ids are the annotation's; and it mounts the job's token Secret
// (volume TokenVolume of Secret binding.TokenSecretName, read-only at
// SidecarTokenDir), the one thing a sidecar cannot work without. jobID and
// workerID, when not empty, must also be the annotation's.
//
// It is what can be told without the control plane's settings (the image,
// the server URL): the pod webhook proves an injection against its own
// rendering of the sidecar (pkg/mutate, sidecar_proof.go) and refuses a pod
// that fails it, so a pod that passes this check and not that one exists only
// where the webhook never saw it.
func CheckInjected(pod *corev1.Pod, jobID, workerID string) error {
	raw, ok := pod.Annotations[names.PodStatusAnnotation]
	if !ok || raw == "" {
		return ErrNoInjectionStatus
	}
	s, err := ParseInjectionStatus(raw)
	if err != nil {
		return err
	}
	if (jobID != "" && s.JobID != jobID) || (workerID != "" && s.WorkerID != workerID) {
		return fmt.Errorf("%s names job %q worker %q, but this pod belongs to job %q worker %q",
			names.PodStatusAnnotation, s.JobID, s.WorkerID, jobID, workerID)
	}
	if s.Sidecar != SidecarContainer {
		return fmt.Errorf("%s names sidecar container %q, not %q", names.PodStatusAnnotation, s.Sidecar, SidecarContainer)
	}
	var sidecar *corev1.Container
	n := 0
	for k := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[k].Name == SidecarContainer {
			sidecar = &pod.Spec.InitContainers[k]
			n++
		}
	}
	switch {
	case sidecar == nil:
		return fmt.Errorf("%s is set but the pod has no %s init container", names.PodStatusAnnotation, SidecarContainer)
	case n > 1:
		return fmt.Errorf("the pod has %d init containers named %s", n, SidecarContainer)
	case sidecar.RestartPolicy == nil || *sidecar.RestartPolicy != corev1.ContainerRestartPolicyAlways:
		return fmt.Errorf("init container %s is not a native sidecar (restartPolicy Always)", SidecarContainer)
	}
	env := map[string]string{}
	for _, e := range sidecar.Env {
		env[e.Name] = e.Value
	}
	// Tether's own, complete: a runtime's declaration of the sidecar (Kueue
	// mode) has none of this until the webhook completes it.
	var missing []string
	for _, name := range []string{names.EnvJobID, names.EnvWorkerID, names.EnvServerURL, names.EnvTokenFile} {
		if env[name] == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("init container %s is not Tether's completed sidecar (no %s): a declaration the pod webhook did not complete, or a copy",
			SidecarContainer, strings.Join(missing, ", "))
	}
	if env[names.EnvJobID] != s.JobID || env[names.EnvWorkerID] != s.WorkerID {
		return fmt.Errorf("container %s is set up for job %q worker %q, but %s names job %q worker %q",
			SidecarContainer, env[names.EnvJobID], env[names.EnvWorkerID], names.PodStatusAnnotation, s.JobID, s.WorkerID)
	}
	if len(sidecar.Command) > 0 || len(sidecar.Args) > 0 {
		return fmt.Errorf("init container %s sets a command or args (%s), which Tether's sidecar never has: it is not Tether's",
			SidecarContainer, strings.Join(append(slices.Clone(sidecar.Command), sidecar.Args...), " "))
	}
	return checkTokenMount(pod, sidecar, env[names.EnvTokenFile])
}

// checkTokenMount: the sidecar reads the token of the pod's own TrainJob,
// from the Secret the controller writes.
func checkTokenMount(pod *corev1.Pod, sidecar *corev1.Container, tokenFile string) error {
	name, _ := IsTrainerPod(pod)
	want := binding.TokenSecretName(name)
	var vol *corev1.Volume
	for k := range pod.Spec.Volumes {
		if pod.Spec.Volumes[k].Name == TokenVolume {
			vol = &pod.Spec.Volumes[k]
		}
	}
	switch {
	case vol == nil:
		return fmt.Errorf("the pod has no volume %s (the job's token Secret %s): its %s cannot authenticate", TokenVolume, want, SidecarContainer)
	case vol.Secret == nil || vol.Secret.SecretName != want:
		return fmt.Errorf("volume %s is not the job's token Secret %s", TokenVolume, want)
	case tokenFile != SidecarTokenDir+"/"+names.TokenKey:
		return fmt.Errorf("container %s reads its token from %s, not %s/%s", SidecarContainer, tokenFile, SidecarTokenDir, names.TokenKey)
	}
	for _, m := range sidecar.VolumeMounts {
		if m.MountPath == SidecarTokenDir {
			if m.Name != TokenVolume || m.SubPath != "" || m.SubPathExpr != "" {
				return fmt.Errorf("container %s mounts %q at %s, not volume %s", SidecarContainer, m.Name, SidecarTokenDir, TokenVolume)
			}
			return nil
		}
	}
	return fmt.Errorf("container %s does not mount volume %s at %s", SidecarContainer, TokenVolume, SidecarTokenDir)
}

// IsInjected reports whether pod carries Tether's sidecar, consistent with
// its status annotation (CheckInjected without a job to compare with). The
// controller's PodsInjected condition uses it.
func IsInjected(pod *corev1.Pod) bool {
	return CheckInjected(pod, "", "") == nil
}
