package mutate

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/mutate/internal/codec"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// Names of what the pod webhook adds. They are fixed so that a second
// injection can recognise the first.
const (
	SidecarName        = trainjob.SidecarContainer
	TokenVolumeName    = trainjob.TokenVolume
	PodTokenVolumeName = trainjob.PodTokenVolume
	ArtifactVolumeName = "tether-artifacts"

	// Paths inside the sidecar. The artifact directory is mounted read-only:
	// the sidecar must never change what the trainer wrote.
	SidecarTokenDir    = trainjob.SidecarTokenDir
	SidecarPodTokenDir = trainjob.SidecarPodTokenDir
	SidecarArtifactDir = "/var/run/tether/artifacts"

	// SidecarUID is distroless' nonroot user.
	SidecarUID = 65532
)

// SidecarConfig is what the control plane decides about every sidecar.
type SidecarConfig struct {
	Image     string
	ServerURL string
	Resources corev1.ResourceRequirements
}

// DefaultSidecarResources are small: the sidecar heartbeats and streams files;
// it holds no file in memory. The CPU limit leaves room for MD5 at disk speed.
func DefaultSidecarResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("50m"),
			corev1.ResourceMemory: resource.MustParse("64Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("1"),
			corev1.ResourceMemory: resource.MustParse("128Mi"),
		},
	}
}

// restrictedSecurityContext passes Pod Security "restricted" on its own, whatever
// the pod's securityContext says.
func restrictedSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		Privileged:               ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		RunAsUser:                ptr.To[int64](SidecarUID),
		RunAsGroup:               ptr.To[int64](SidecarUID),
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// sidecarInput is everything one injection needs to render the sidecar.
type sidecarInput struct {
	image, serverURL, trainJob, jobID, workerID string
	// nodeRank is the pod's node rank (TETHER_NODE_RANK), in decimal.
	nodeRank               string
	heartbeat, flushBudget string
	include, exclude       string
	artifactMount          corev1.VolumeMount
	// nestedMounts are mounted after artifactMount, below SidecarArtifactDir.
	nestedMounts []corev1.VolumeMount
	resources    corev1.ResourceRequirements
}

// stringFields appends to dst a pointer to every string of in that
// renderSidecar writes into the container as it is; the order is the
// codec's Container.Fields.
func (in *sidecarInput) stringFields(dst []*string) []*string {
	dst = append(dst, &in.image, &in.serverURL, &in.trainJob, &in.jobID, &in.workerID, &in.nodeRank, &in.heartbeat, &in.flushBudget,
		&in.include, &in.exclude, &in.artifactMount.Name, &in.artifactMount.SubPath)
	for k := range in.nestedMounts {
		m := &in.nestedMounts[k]
		dst = append(dst, &m.Name, &m.SubPath, &m.MountPath)
	}
	return dst
}

// templated says whether in is of the form planArtifacts and Inject give
// (mounts with no subPathExpr, propagation or recursive read-only setting;
// nested mounts read-only): then renderSidecar(*in) is a function of its
// strings and resources alone, which the codec encodes from a template.
func (in *sidecarInput) templated() bool {
	a := in.artifactMount
	if a.SubPathExpr != "" || a.RecursiveReadOnly != nil {
		return false
	}
	for _, m := range in.nestedMounts {
		if m.SubPathExpr != "" || m.MountPropagation != nil || m.RecursiveReadOnly != nil || !m.ReadOnly {
			return false
		}
	}
	return true
}

// container is the sidecar rendered from in as the codec encodes it from a
// template; false (json.Marshal) when in is nil or not templated.
func (in *sidecarInput) container() (codec.Container, bool) {
	if in == nil || !in.templated() {
		return codec.Container{}, false
	}
	var buf [24]*string // room for 4 nested mounts
	ptrs := in.stringFields(buf[:0])
	fields := make([]string, len(ptrs))
	for k, p := range ptrs {
		fields[k] = *p
	}
	return codec.Container{Name: SidecarName, Fields: fields, Resources: in.resources, Renderer: in}, true
}

// Render is renderSidecar of in with fields for its strings and resources
// for its resources: the codec's Renderer.
func (in *sidecarInput) Render(fields []string, resources corev1.ResourceRequirements) corev1.Container {
	probe := *in
	probe.nestedMounts = slices.Clone(in.nestedMounts)
	for k, f := range probe.stringFields(nil) {
		*f = fields[k]
	}
	probe.resources = resources
	return renderSidecar(probe)
}

func renderSidecar(in sidecarInput) corev1.Container {
	// Room for every variable below: the slice is never grown.
	env := make([]corev1.EnvVar, 0, 16)
	env = append(env, []corev1.EnvVar{
		{Name: names.EnvJobID, Value: in.jobID},
		{Name: names.EnvWorkerID, Value: in.workerID},
		{Name: names.EnvTrainJob, Value: in.trainJob},
		{Name: names.EnvServerURL, Value: in.serverURL},
		{Name: names.EnvTokenFile, Value: SidecarTokenDir + "/" + names.TokenKey},
		{Name: names.EnvPodTokenFile, Value: SidecarPodTokenDir + "/" + trainjob.PodTokenKey},
		{Name: names.EnvCAFile, Value: SidecarTokenDir + "/" + names.CABundleKey},
		{Name: names.EnvArtifactDir, Value: SidecarArtifactDir},
		{Name: names.EnvNodeRank, Value: in.nodeRank},
		{Name: names.EnvHeartbeatInterval, Value: in.heartbeat},
		{Name: names.EnvFlushBudget, Value: in.flushBudget},
	}...)
	if in.include != "" {
		env = append(env, corev1.EnvVar{Name: names.EnvInclude, Value: in.include})
	}
	if in.exclude != "" {
		env = append(env, corev1.EnvVar{Name: names.EnvExclude, Value: in.exclude})
	}
	env = append(env,
		fieldEnv(names.EnvPodName, "metadata.name"),
		fieldEnv(names.EnvPodNamespace, "metadata.namespace"),
		fieldEnv(names.EnvPodUID, "metadata.uid"),
		fieldEnv(names.EnvNodeName, "spec.nodeName"),
	)
	artifacts := in.artifactMount
	artifacts.MountPath = SidecarArtifactDir
	artifacts.ReadOnly = true
	artifacts.MountPropagation = nil
	return corev1.Container{
		Name:            SidecarName,
		Image:           in.image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		// A native sidecar: started before the trainer, stopped after it, and
		// never holding the Job open.
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Env:           env,
		Resources:     in.resources,
		VolumeMounts: append(append(make([]corev1.VolumeMount, 0, 3+len(in.nestedMounts)),
			corev1.VolumeMount{Name: TokenVolumeName, MountPath: SidecarTokenDir, ReadOnly: true},
			corev1.VolumeMount{Name: PodTokenVolumeName, MountPath: SidecarPodTokenDir, ReadOnly: true},
			artifacts), in.nestedMounts...),
		SecurityContext:          restrictedSecurityContext(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path},
	}}
}

func tokenVolume(trainJob string) corev1.Volume {
	return corev1.Volume{Name: TokenVolumeName, VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: binding.TokenSecretName(trainJob), DefaultMode: ptr.To[int32](0o444)},
	}}
}

// podTokenVolume is the pod's projected ServiceAccount token for the binding
// server (audience names.PodTokenAudience), which only the sidecar mounts:
// the job's token is every rank's, this one proves which pod is asking
// (docs/security.md, "The pod token"). Every field the API server would
// default is set, so a reinvocation's proof compares it as rendered.
func podTokenVolume() corev1.Volume {
	return corev1.Volume{Name: PodTokenVolumeName, VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{
			DefaultMode: ptr.To[int32](0o444),
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience: names.PodTokenAudience, ExpirationSeconds: ptr.To[int64](trainjob.PodTokenExpirationSeconds), Path: trainjob.PodTokenKey,
			}}},
		},
	}}
}

// serviceAccountRefusal is the denial of a pod without a ServiceAccount. In
// a cluster the ServiceAccount admission plugin, a mutating plugin that runs
// before the webhooks, sets spec.serviceAccountName ("default" when the pod
// names none), so a pod without one reaches the webhook only where that
// plugin is disabled. The webhook does not choose an identity for the pod
// (it would be a ServiceAccount the pod's author never named, which may not
// exist): without one the API server refuses the pod token volume, and the
// sidecar could not prove its pod.
const serviceAccountRefusal = "pod has no spec.serviceAccountName: Tether's sidecar proves its pod with the pod's projected ServiceAccount token " +
	"(volume " + PodTokenVolumeName + "), which needs one; set serviceAccountName in the runtime's pod template, " +
	"or enable the API server's ServiceAccount admission plugin, which sets it to \"default\""

// InjectionStatus is the value of the pod's tether.dev/status annotation
// (defined in pkg/trainjob, which the controller shares).
type InjectionStatus = trainjob.InjectionStatus

// StatusVersion changes when what the webhook injects changes shape.
const StatusVersion = trainjob.InjectionStatusVersion

// flushBudget is the sidecar's time for its final artifact flush: the pod's
// termination grace period (the kubelet's SIGKILL deadline, which the
// trainer's own shutdown already started to use) less a margin for the
// sidecar to report and exit, never under 5s.
func flushBudget(pod *corev1.Pod) time.Duration {
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	return max(time.Duration(grace)*time.Second-5*time.Second, 5*time.Second)
}
