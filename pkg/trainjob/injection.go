package trainjob

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/jobconfig"
)

// What the pod webhook leaves on an injected pod. They live here, not in
// pkg/mutate, because the controller must recognise an injected pod too and
// may not import the webhooks.
const (
	// SidecarContainer is the name of the injected native sidecar.
	SidecarContainer = "tether-sidecar"
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
		return s, fmt.Errorf("%s is not Tether's JSON status: %w", jobconfig.PodStatusAnnotation, err)
	}
	if s.Version != InjectionStatusVersion {
		return s, fmt.Errorf("%s has version %q, this Tether writes %q", jobconfig.PodStatusAnnotation, s.Version, InjectionStatusVersion)
	}
	return s, nil
}

// ErrNoInjectionStatus is CheckInjected's answer for a pod without the annotation.
var ErrNoInjectionStatus = errors.New("no " + jobconfig.PodStatusAnnotation + " annotation")

// CheckInjected tells whether pod really carries Tether's sidecar, and if not
// why: the status annotation parses, the sidecar container it names is a
// native sidecar (init container with restartPolicy Always) completed by the
// webhook (it has the job and worker ids, the server URL and the token file)
// and that container's job and worker ids are the annotation's. A status annotation
// alone (copied from a dumped pod, or set in a runtime template) is not an
// injection. jobID and workerID, when not empty, must also be the
// annotation's: the pod is injected for that job.
func CheckInjected(pod *corev1.Pod, jobID, workerID string) error {
	raw, ok := pod.Annotations[jobconfig.PodStatusAnnotation]
	if !ok || raw == "" {
		return ErrNoInjectionStatus
	}
	s, err := ParseInjectionStatus(raw)
	if err != nil {
		return err
	}
	if (jobID != "" && s.JobID != jobID) || (workerID != "" && s.WorkerID != workerID) {
		return fmt.Errorf("%s names job %q worker %q, but this pod belongs to job %q worker %q",
			jobconfig.PodStatusAnnotation, s.JobID, s.WorkerID, jobID, workerID)
	}
	if s.Sidecar != SidecarContainer {
		return fmt.Errorf("%s names sidecar container %q, not %q", jobconfig.PodStatusAnnotation, s.Sidecar, SidecarContainer)
	}
	var sidecar *corev1.Container
	for k := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[k].Name == SidecarContainer {
			sidecar = &pod.Spec.InitContainers[k]
		}
	}
	switch {
	case sidecar == nil:
		return fmt.Errorf("%s is set but the pod has no %s init container", jobconfig.PodStatusAnnotation, SidecarContainer)
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
	for _, name := range []string{binding.EnvJobID, binding.EnvWorkerID, binding.EnvServerURL, binding.EnvTokenFile} {
		if env[name] == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("init container %s is not Tether's completed sidecar (no %s): a declaration the pod webhook did not complete, or a copy",
			SidecarContainer, strings.Join(missing, ", "))
	}
	if env[binding.EnvJobID] != s.JobID || env[binding.EnvWorkerID] != s.WorkerID {
		return fmt.Errorf("container %s is set up for job %q worker %q, but %s names job %q worker %q",
			SidecarContainer, env[binding.EnvJobID], env[binding.EnvWorkerID], jobconfig.PodStatusAnnotation, s.JobID, s.WorkerID)
	}
	return nil
}

// IsInjected reports whether pod carries Tether's sidecar, consistent with
// its status annotation (CheckInjected without a job to compare with). The
// controller's PodsInjected condition uses it.
func IsInjected(pod *corev1.Pod) bool {
	return CheckInjected(pod, "", "") == nil
}
