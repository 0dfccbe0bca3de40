package testobj

import (
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// PodWrapper builds a pod as JobSet and the Job controller create it for a TrainJob.
type PodWrapper struct{ corev1.Pod }

// MakeTrainerPod starts node 0 of trainJob's trainer replicated job, with a
// trainer container named "node", as Trainer v2 runtimes name it.
func MakeTrainerPod(trainJob, namespace string) *PodWrapper {
	return &PodWrapper{corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: trainJob + "-node-0-0-",
			Namespace:    namespace,
			Labels: map[string]string{
				trainjob.JobSetNameLabel:        trainJob,
				trainjob.ReplicatedJobNameLabel: trainjob.TrainerReplicatedJob,
				trainjob.JobIndexLabel:          "0",
				trainjob.CompletionIndexLabel:   "0",
				"batch.kubernetes.io/job-name":  trainJob + "-node-0",
			},
			Annotations: map[string]string{trainjob.CompletionIndexLabel: "0"},
		},
		Spec: corev1.PodSpec{
			// What the ServiceAccount admission plugin sets before the
			// webhooks run; envtest runs without it, and the pod webhook
			// refuses a pod without one (it could hold no pod token).
			ServiceAccountName: "default",
			RestartPolicy:      corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name:    "node",
				Image:   "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
				Command: []string{"torchrun", "train.py"},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					RunAsNonRoot:             ptr.To(true),
					RunAsUser:                ptr.To[int64](1000),
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
			}},
		},
	}}
}

// Obj returns the built object.
func (w *PodWrapper) Obj() *corev1.Pod { return &w.Pod }

// Name sets a fixed name instead of generateName.
func (w *PodWrapper) Name(name string) *PodWrapper {
	w.ObjectMeta.Name, w.GenerateName = name, ""
	return w
}

// Routed adds the label a bound job's trainer pods inherit from their JobSet's
// pod template (put there by Tether's JobSet webhook): only routed pods reach
// the pod webhook.
func (w *PodWrapper) Routed() *PodWrapper {
	w.Labels["tether.dev/bind"] = "true"
	return w
}

// ReplicatedJob sets the JobSet replicated job (e.g. dataset-initializer).
func (w *PodWrapper) ReplicatedJob(name string) *PodWrapper {
	w.Labels[trainjob.ReplicatedJobNameLabel] = name
	if w.GenerateName != "" {
		w.GenerateName = w.Labels[trainjob.JobSetNameLabel] + "-" + name + "-0-0-"
	}
	return w
}

// CompletionIndex sets the indexed Job's completion index (the node rank).
func (w *PodWrapper) CompletionIndex(i string) *PodWrapper {
	w.Labels[trainjob.CompletionIndexLabel] = i
	w.Annotations[trainjob.CompletionIndexLabel] = i
	return w
}

// Annotation sets an annotation.
func (w *PodWrapper) Annotation(k, v string) *PodWrapper {
	w.Annotations[k] = v
	return w
}

// Volume adds a pod volume.
func (w *PodWrapper) Volume(v corev1.Volume) *PodWrapper {
	w.Spec.Volumes = append(w.Spec.Volumes, v)
	return w
}

// EmptyDir adds an emptyDir volume.
func (w *PodWrapper) EmptyDir(name string) *PodWrapper {
	return w.Volume(corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
}

// Mount mounts a volume into the named container.
func (w *PodWrapper) Mount(container string, m corev1.VolumeMount) *PodWrapper {
	for i := range w.Spec.Containers {
		if w.Spec.Containers[i].Name == container {
			w.Spec.Containers[i].VolumeMounts = append(w.Spec.Containers[i].VolumeMounts, m)
		}
	}
	return w
}

// InitContainer appends an init container (a native sidecar when restartPolicy is Always).
func (w *PodWrapper) InitContainer(c corev1.Container) *PodWrapper {
	w.Spec.InitContainers = append(w.Spec.InitContainers, c)
	return w
}

// HostNetwork runs the pod in the node's network namespace.
func (w *PodWrapper) HostNetwork(dns corev1.DNSPolicy) *PodWrapper {
	w.Spec.HostNetwork = true
	w.Spec.DNSPolicy = dns
	return w
}

// RestrictedPodSecurity sets a pod securityContext that passes Pod Security "restricted".
func (w *PodWrapper) RestrictedPodSecurity() *PodWrapper {
	w.Spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	return w
}

// UID sets the pod's UID (and its name, if none is set yet, to the UID).
func (w *PodWrapper) UID(uid string) *PodWrapper {
	w.ObjectMeta.UID = types.UID(uid)
	if w.ObjectMeta.Name == "" {
		w.ObjectMeta.Name, w.GenerateName = uid, ""
	}
	return w
}

// NodeName places the pod on node (spec.nodeName, as the scheduler does).
func (w *PodWrapper) NodeName(node string) *PodWrapper {
	w.Spec.NodeName = node
	return w
}

// Created sets the pod's creation time.
func (w *PodWrapper) Created(t time.Time) *PodWrapper {
	w.CreationTimestamp = metav1.NewTime(t)
	return w
}

// RestartAttempt sets the JobSet restart attempt that created the pod.
func (w *PodWrapper) RestartAttempt(n int) *PodWrapper {
	w.Labels[trainjob.RestartAttemptLabel] = strconv.Itoa(n)
	return w
}

// Injected makes the pod look as Tether's pod webhook leaves it, as far as
// trainjob.CheckInjected looks: the status annotation, the completed native
// sidecar with the same ids and the token volume it mounts (golden tests
// cover the rest of an injection).
func (w *PodWrapper) Injected() *PodWrapper {
	const job, worker = "job", "worker"
	w.Annotation(names.PodStatusAnnotation, trainjob.InjectionStatus{Version: trainjob.InjectionStatusVersion, JobID: job, WorkerID: worker,
		Sidecar: trainjob.SidecarContainer}.String())
	name, _ := trainjob.IsTrainerPod(&w.Pod)
	w.Volume(corev1.Volume{Name: trainjob.TokenVolume, VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: binding.TokenSecretName(name)}}})
	return w.InitContainer(corev1.Container{Name: trainjob.SidecarContainer, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Env: []corev1.EnvVar{{Name: names.EnvJobID, Value: job}, {Name: names.EnvWorkerID, Value: worker},
			{Name: names.EnvServerURL, Value: "https://tether.example"}, {Name: names.EnvTokenFile, Value: trainjob.SidecarTokenDir + "/" + names.TokenKey}},
		VolumeMounts: []corev1.VolumeMount{{Name: trainjob.TokenVolume, MountPath: trainjob.SidecarTokenDir, ReadOnly: true}}})
}

// Running sets the pod Running with its "node" container running, restarted
// restarts times in place.
func (w *PodWrapper) Running(restarts int32) *PodWrapper {
	w.Status.Phase = corev1.PodRunning
	w.trainer().State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	w.trainer().RestartCount = restarts
	return w
}

// LastExit records the "node" container's termination before its last
// restart (lastState.terminated).
func (w *PodWrapper) LastExit(code int32, at time.Time) *PodWrapper {
	w.trainer().LastTerminationState = corev1.ContainerState{Terminated: exit(code, at)}
	return w
}

// Exited sets the "node" container terminated with code at at; the pod's
// phase follows (Succeeded for 0 with restartPolicy Never or exit 0,
// Failed for a non-zero code with restartPolicy Never, else Running: the
// kubelet restarts it).
func (w *PodWrapper) Exited(code int32, at time.Time) *PodWrapper {
	cs := w.trainer()
	cs.State = corev1.ContainerState{Terminated: exit(code, at)}
	switch {
	case code == 0:
		w.Status.Phase = corev1.PodSucceeded
	case w.Spec.RestartPolicy == corev1.RestartPolicyNever:
		w.Status.Phase = corev1.PodFailed
	default:
		w.Status.Phase = corev1.PodRunning
	}
	return w
}

// RestartPolicy sets the pod's restartPolicy (JobSet defaults it to OnFailure).
func (w *PodWrapper) RestartPolicy(p corev1.RestartPolicy) *PodWrapper {
	w.Spec.RestartPolicy = p
	return w
}

// TrainerRestartPolicy sets the trainer container's own restartPolicy (over the pod's).
func (w *PodWrapper) TrainerRestartPolicy(p corev1.ContainerRestartPolicy) *PodWrapper {
	for i := range w.Spec.Containers {
		if w.Spec.Containers[i].Name == "node" {
			w.Spec.Containers[i].RestartPolicy = &p
		}
	}
	return w
}

// Phase sets the pod's phase.
func (w *PodWrapper) Phase(p corev1.PodPhase) *PodWrapper {
	w.Status.Phase = p
	return w
}

// Deleting marks the pod as being deleted (preemption, eviction).
func (w *PodWrapper) Deleting(at time.Time) *PodWrapper {
	t := metav1.NewTime(at)
	w.DeletionTimestamp = &t
	return w
}

func (w *PodWrapper) trainer() *corev1.ContainerStatus {
	for i := range w.Status.ContainerStatuses {
		if w.Status.ContainerStatuses[i].Name == "node" {
			return &w.Status.ContainerStatuses[i]
		}
	}
	w.Status.ContainerStatuses = append(w.Status.ContainerStatuses, corev1.ContainerStatus{Name: "node"})
	return &w.Status.ContainerStatuses[len(w.Status.ContainerStatuses)-1]
}

func exit(code int32, at time.Time) *corev1.ContainerStateTerminated {
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	return &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, FinishedAt: metav1.NewTime(at)}
}
