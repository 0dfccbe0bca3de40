package mutate

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// PodInjector decides whether and how a trainer pod gets the sidecar.
type PodInjector struct {
	Sidecar SidecarConfig
}

// Inject decides about pod, whose TrainJob is trainJob (nil when none exists),
// and on OutcomePatched has changed pod in place, only ever by appending (to
// its init containers, volumes, the trainer's volume mounts and annotations)
// and by completing the sidecar the runtime declares (Kueue mode), keeping
// its resources: the handler's JSON patch does exactly these. On any other
// outcome pod is untouched.
func (i PodInjector) Inject(pod *corev1.Pod, trainJob *metav1.ObjectMeta) Decision {
	d, _ := i.inject(pod, trainJob)
	return d
}

// inject is Inject, and, when it appended the sidecar (not for a declared
// one), what the sidecar was rendered from: the pod's last init container is
// renderSidecar(*appended), which the codec encodes from a template
// (sidecarInput.container).
func (i PodInjector) inject(pod *corev1.Pod, trainJob *metav1.ObjectMeta) (d Decision, appended *sidecarInput) {
	job, d, ok := boundJob(pod, trainJob)
	if !ok {
		return d, nil
	}
	// Already injected means proven (sidecar_proof.go), not announced: an
	// annotation copied from a dumped pod or set in a runtime template, over
	// a sidecar Tether did not render, is replaced by a real injection, or
	// the pod is denied.
	var stale error
	_, hasStatus := pod.Annotations[names.PodStatusAnnotation]
	if hasStatus {
		stale = trainjob.CheckInjected(pod, job.jobID, job.workerID)
	}
	if d, ok := checkPod(pod, trainJob, &job); !ok {
		return d, nil
	}
	if hasStatus && stale == nil {
		if stale = i.proveInjected(pod, job.trainer, job.settings, job.name, job.jobID, job.workerID, strconv.Itoa(job.rank)); stale == nil {
			return skipped(SkipAlreadyInjected, "pod already carries the sidecar Tether injects for this job"), nil
		}
	}
	declared, d, ok := declaration(pod, job.name, stale)
	if !ok {
		return d, nil
	}
	resources, d, ok := i.sidecarResources(pod, declared, &job)
	if !ok {
		return d, nil
	}
	artifacts, d, ok := planArtifacts(pod, job.trainer, job.settings.ArtifactPath)
	if !ok {
		return d, nil
	}

	in := i.sidecarInput(pod, &job, artifacts, resources)
	sidecar := renderSidecar(*in)
	if declared < 0 {
		appended = in
	} else {
		var err error
		if sidecar, err = completeDeclared(pod.Spec.InitContainers[declared], sidecar); err != nil {
			return denied(DenySidecarDeclaration, fmt.Sprintf("TrainJob %s's runtime: %v", job.name, err)), nil
		}
	}
	applyInjection(pod, &job, artifacts, declared, sidecar)
	return injected(injectionWarnings(pod, stale)), appended
}

// podJob is what inject knows of the pod's bound job and of the pod.
type podJob struct {
	name, jobID, workerID string
	settings              jobconfig.Settings
	rank                  int
	trainer               *corev1.Container
}

// boundJob returns the pod's job (name and identity) when the pod is a
// trainer pod of a bound TrainJob that carries the identity Tether stamps;
// else the decision.
func boundJob(pod *corev1.Pod, trainJob *metav1.ObjectMeta) (podJob, Decision, bool) {
	name, ok := trainjob.IsTrainerPod(pod)
	switch {
	case !ok:
		return podJob{}, skipped(SkipNotTrainerPod, "not a pod of a JobSet's trainer replicated job"), false
	case trainJob == nil || trainJob.Name != name:
		return podJob{}, skipped(SkipNoTrainJob, fmt.Sprintf("no TrainJob named %q", name)), false
	case !jobconfig.IsBound(trainJob.Labels):
		return podJob{}, skipped(SkipNotBound, "TrainJob is not labeled "+names.BindLabel+"="+names.BindValue), false
	}
	jobID, workerID := trainJob.Annotations[names.JobIDAnnotation], trainJob.Annotations[names.WorkerIDAnnotation]
	if jobID == "" || workerID == "" {
		return podJob{}, denied(DenyMissingIdentity, fmt.Sprintf("TrainJob %s is labeled %s=%s but has no %s or %s annotation: "+
			"it was bound while Tether's TrainJob webhook was not called; remove and re-add the label to stamp it, then recreate the pods",
			name, names.BindLabel, names.BindValue, names.JobIDAnnotation, names.WorkerIDAnnotation)), false
	}
	return podJob{name: name, jobID: jobID, workerID: workerID}, Decision{}, true
}

// checkPod reads the job's settings and the pod's node rank and trainer
// container into job, and returns the decision when the pod is not one
// the sidecar can be injected into: a node the job does not bind, or a pod
// without the trainer container or a ServiceAccount.
func checkPod(pod *corev1.Pod, trainJob *metav1.ObjectMeta, job *podJob) (Decision, bool) {
	name := job.name
	settings, err := jobSettings(trainJob)
	if err != nil {
		return denied(DenyInvalidSettings, fmt.Sprintf("TrainJob %s: %v", name, err)), false
	}
	rank, err := trainjob.Rank(pod)
	switch {
	case err == nil && rank > 0 && settings.Nodes == jobconfig.NodesPrimary:
		return skipped(SkipNotPrimaryNode, fmt.Sprintf("node %d: TrainJob %s binds node 0 only (%s=%s)", rank, name, names.NodesAnnotation, jobconfig.NodesPrimary)), false
	case err != nil:
		return denied(DenyNodeRank, fmt.Sprintf("%v; set annotation %s=%s on TrainJob %s to bind node 0 only", err, names.NodesAnnotation, jobconfig.NodesPrimary, name)), false
	case rank >= binding.MaxBoundNodes:
		return denied(DenyNodeRank, fmt.Sprintf("pod is node %d; Tether binds at most %d nodes of a job: set annotation %s=%s on TrainJob %s to bind node 0 only",
			rank, binding.MaxBoundNodes, names.NodesAnnotation, jobconfig.NodesPrimary, name)), false
	}
	trainer := findContainer(pod.Spec.Containers, settings.TrainerContainer)
	if trainer == nil {
		return denied(DenyNoTrainerContainer, fmt.Sprintf("pod has no container %q to bind (containers: %s); "+
			"set annotation %s on TrainJob %s to the trainer's container name",
			settings.TrainerContainer, containerNames(pod.Spec.Containers), names.TrainerContainerAnnotation, name)), false
	}
	if pod.Spec.ServiceAccountName == "" {
		return denied(DenyNoServiceAccount, serviceAccountRefusal), false
	}
	job.settings, job.rank, job.trainer = settings, rank, trainer
	return Decision{}, true
}

// declaration returns the index of the init container that declares the
// sidecar (Kueue mode; -1: none), which inject completes in place, or the
// decision when the declaration is malformed or the pod already uses a
// name the webhook adds. A malformed declaration under a stale status
// annotation is most likely a template copied from an injected pod:
// nameConflicts says so.
func declaration(pod *corev1.Pod, name string, stale error) (int, Decision, bool) {
	declared := declaredSidecar(pod)
	if declared >= 0 {
		if err := checkDeclaration(&pod.Spec.InitContainers[declared]); err != nil {
			if stale == nil {
				return -1, denied(DenySidecarDeclaration, fmt.Sprintf("TrainJob %s's runtime: %v", name, err)), false
			}
			declared = -1
		}
	}
	if d, conflict := nameConflicts(pod, declared, stale); conflict {
		return -1, d, false
	}
	return declared, Decision{}, true
}

// sidecarResources returns the sidecar's requests and limits: those of its
// declaration (declared >= 0) or the control plane's with the job's laid
// over them; else the decision.
func (i PodInjector) sidecarResources(pod *corev1.Pod, declared int, job *podJob) (corev1.ResourceRequirements, Decision, bool) {
	name, settings := job.name, job.settings
	if declared >= 0 {
		// The declaration's resources are what Kueue counted: kept exactly,
		// whatever the control plane's defaults; the job's annotations may
		// only repeat them.
		resources := *pod.Spec.InitContainers[declared].Resources.DeepCopy()
		if err := reconcileResources(resources, settings.SidecarRequests, settings.SidecarLimits); err != nil {
			return corev1.ResourceRequirements{}, denied(DenySidecarResources, fmt.Sprintf("TrainJob %s: its runtime declares the sidecar's resources (Kueue mode), which are what Kueue counted "+
				"and what the sidecar gets, and its annotations contradict them: %v; remove %s/%s from the TrainJob, or change the declaration in the runtime",
				name, err, names.SidecarRequestsAnnotation, names.SidecarLimitsAnnotation)), false
		}
		return resources, Decision{}, true
	}
	// Per-job requests and limits lay over the control plane's, resource
	// by resource; a namespace ResourceQuota sees them, Kueue does not
	// (docs/platform.md#kueue).
	resources, err := MergeResources(i.Sidecar.Resources, settings.SidecarRequests, settings.SidecarLimits)
	if err != nil {
		return corev1.ResourceRequirements{}, denied(DenyInvalidSettings, fmt.Sprintf("TrainJob %s: sidecar resources from %s/%s over the control plane's defaults: %v; "+
			"set both annotations so that each request is at most its limit", name, names.SidecarRequestsAnnotation, names.SidecarLimitsAnnotation, err)), false
	}
	return resources, Decision{}, true
}

// sidecarInput is what the pod's sidecar is rendered from.
func (i PodInjector) sidecarInput(pod *corev1.Pod, job *podJob, artifacts artifactPlan, resources corev1.ResourceRequirements) *sidecarInput {
	image := i.Sidecar.Image
	if job.settings.SidecarImage != "" {
		image = job.settings.SidecarImage
	}
	return &sidecarInput{
		image: image, serverURL: i.Sidecar.ServerURL, trainJob: job.name, jobID: job.jobID, workerID: job.workerID, nodeRank: strconv.Itoa(job.rank),
		heartbeat:     job.settings.HeartbeatInterval.String(),
		flushBudget:   flushBudget(pod).String(),
		include:       strings.Join(job.settings.Include, ","),
		exclude:       strings.Join(job.settings.Exclude, ","),
		artifactMount: artifacts.mount,
		nestedMounts:  artifacts.nested,
		resources:     resources,
	}
}

// applyInjection changes pod as the injection does. From here on pod only
// grows, but for a declared sidecar (declared >= 0), which is completed in
// place: the handler's JSON patch (injectionPatch) adds exactly what is
// appended here, and turns the declaration into the completed sidecar with
// the same resources.
func applyInjection(pod *corev1.Pod, job *podJob, artifacts artifactPlan, declared int, sidecar corev1.Container) {
	if !artifacts.reused {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: ArtifactVolumeName,
			VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		job.trainer.VolumeMounts = append(job.trainer.VolumeMounts, corev1.VolumeMount{Name: ArtifactVolumeName, MountPath: job.settings.ArtifactPath})
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, tokenVolume(job.name), podTokenVolume())
	if declared >= 0 {
		pod.Spec.InitContainers[declared] = sidecar
	} else {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, sidecar)
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[names.PodStatusAnnotation] = trainjob.InjectionStatus{
		Version: trainjob.InjectionStatusVersion, JobID: job.jobID, WorkerID: job.workerID, Sidecar: SidecarName,
		ArtifactVolume: artifacts.mount.Name, Reused: artifacts.reused, Declared: declared >= 0,
	}.String()
}

// injectionWarnings are the injected pod's warnings for the API client: a
// status annotation that was replaced (stale is why), and a host-network
// pod whose sidecar cannot resolve cluster Service names.
func injectionWarnings(pod *corev1.Pod, stale error) []string {
	var warnings []string
	if stale != nil {
		warnings = append(warnings, fmt.Sprintf("replaced annotation %s, which was not this job's injection (%v): "+
			"remove it from the pod template", names.PodStatusAnnotation, stale))
	}
	if pod.Spec.HostNetwork && pod.Spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		warnings = append(warnings, fmt.Sprintf("pod uses hostNetwork with dnsPolicy %q: the sidecar cannot resolve "+
			"cluster Service names unless dnsPolicy is ClusterFirstWithHostNet", dnsPolicyOrDefault(pod.Spec.DNSPolicy)))
	}
	return warnings
}

// artifactPlan is how the sidecar sees the trainer's artifact directory.
type artifactPlan struct {
	// mount is the volume behind the artifact path (name and subPath), which the
	// sidecar mounts at SidecarArtifactDir.
	mount corev1.VolumeMount
	// reused says the volume is the trainer's own; false: Tether adds an
	// emptyDir (ArtifactVolumeName) and mounts it at the artifact path.
	reused bool
	// nested are the sidecar's mounts, below SidecarArtifactDir, of the
	// trainer's mounts strictly below the artifact path, sorted by path.
	nested []corev1.VolumeMount
}

// planArtifacts decides, without changing pod, how the sidecar mounts what
// the trainer sees under artifactPath: the volume mounted at artifactPath or
// at its nearest parent directory (or, when there is none, an emptyDir to
// add), and every volume the trainer mounts below artifactPath, which would
// otherwise hide files from the sidecar.
func planArtifacts(pod *corev1.Pod, trainer *corev1.Container, artifactPath string) (artifactPlan, Decision, bool) {
	var parent *corev1.VolumeMount
	var nested []corev1.VolumeMount
	for k := range trainer.VolumeMounts {
		m := &trainer.VolumeMounts[k]
		mp := path.Clean(m.MountPath)
		if rel, below := strings.CutPrefix(mp, artifactPath+"/"); below {
			if m.SubPathExpr != "" {
				// The expression expands with the trainer's environment, which
				// the sidecar does not share.
				return artifactPlan{}, denied(DenyArtifactMount, fmt.Sprintf("the trainer's mount of volume %q at %s is inside artifact path %s and uses subPathExpr, "+
					"which the sidecar cannot expand, so it could not read the files written there; "+
					"use subPath instead, mount the volume outside %s, or point annotation %s elsewhere",
					m.Name, m.MountPath, artifactPath, artifactPath, names.ArtifactPathAnnotation)), false
			}
			nested = append(nested, corev1.VolumeMount{Name: m.Name, SubPath: m.SubPath,
				MountPath: path.Join(SidecarArtifactDir, rel), ReadOnly: true})
			continue
		}
		if mp == artifactPath || strings.HasPrefix(artifactPath, strings.TrimSuffix(mp, "/")+"/") {
			if parent == nil || len(mp) > len(path.Clean(parent.MountPath)) {
				parent = m
			}
		}
	}
	// A parent directory's mount before its children's, whatever the trainer's order.
	sort.SliceStable(nested, func(a, b int) bool { return nested[a].MountPath < nested[b].MountPath })

	if parent == nil {
		return artifactPlan{mount: corev1.VolumeMount{Name: ArtifactVolumeName}, nested: nested}, Decision{}, true
	}
	vol := findVolume(pod.Spec.Volumes, parent.Name)
	fail := func(problem string) (artifactPlan, Decision, bool) {
		return artifactPlan{}, denied(DenyArtifactMount, fmt.Sprintf("artifact path %s is inside the trainer's mount of volume %q at %s, which %s; "+
			"mount a writable volume (emptyDir or PersistentVolumeClaim) at %s, or point annotation %s elsewhere",
			artifactPath, parent.Name, parent.MountPath, problem, artifactPath, names.ArtifactPathAnnotation)), false
	}
	switch {
	case vol == nil:
		return fail("is not a volume of the pod")
	case vol.ConfigMap != nil || vol.Secret != nil || vol.DownwardAPI != nil || vol.Projected != nil || vol.Image != nil:
		return fail("is a read-only volume type")
	case parent.SubPathExpr != "":
		// The expression expands with the trainer's environment, which the
		// sidecar does not share.
		return fail("uses subPathExpr")
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(artifactPath, path.Clean(parent.MountPath)), "/")
	sub := parent.SubPath
	if rel != "" {
		sub = path.Join(sub, rel)
	}
	return artifactPlan{mount: corev1.VolumeMount{Name: parent.Name, SubPath: sub}, reused: true, nested: nested}, Decision{}, true
}

// nameConflicts denies a pod that already uses one of the names the webhook
// adds without being this job's injection (stale is why, when the pod carries
// a status annotation that is not): injecting would clash. The init container
// at index declared (-1: none) is the runtime's declaration of the sidecar,
// which the webhook completes, not a clash.
func nameConflicts(pod *corev1.Pod, declared int, stale error) (Decision, bool) {
	conflict := ""
	for k, c := range pod.Spec.InitContainers {
		if c.Name == SidecarName && k != declared {
			conflict = fmt.Sprintf("a container named %q", SidecarName)
		}
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == SidecarName {
			conflict = fmt.Sprintf("a container named %q", SidecarName)
		}
	}
	for _, v := range pod.Spec.Volumes {
		if conflict == "" && (v.Name == TokenVolumeName || v.Name == PodTokenVolumeName || v.Name == ArtifactVolumeName) {
			conflict = fmt.Sprintf("a volume named %q", v.Name)
		}
	}
	switch {
	case conflict == "":
		return Decision{}, false
	case stale != nil:
		// Typically a runtime template copied from an injected pod of another job.
		return denied(DenyStaleInjection, fmt.Sprintf("pod already has %s and a %s annotation, but is not this job's injection: %v; "+
			"remove Tether's init container, volumes and annotation from the pod template", conflict, names.PodStatusAnnotation, stale)), true
	case strings.HasPrefix(conflict, "a container"):
		return denied(DenyNameConflict, fmt.Sprintf("pod already has %s but no %s annotation; rename that container", conflict, names.PodStatusAnnotation)), true
	default:
		return denied(DenyNameConflict, fmt.Sprintf("pod already has %s, which Tether reserves; rename that volume", conflict)), true
	}
}

func findContainer(cs []corev1.Container, name string) *corev1.Container {
	for k := range cs {
		if cs[k].Name == name {
			return &cs[k]
		}
	}
	return nil
}

func findVolume(vs []corev1.Volume, name string) *corev1.Volume {
	for k := range vs {
		if vs[k].Name == name {
			return &vs[k]
		}
	}
	return nil
}

func containerNames(cs []corev1.Container) string {
	names := make([]string, 0, len(cs))
	for _, c := range cs {
		names = append(names, c.Name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func dnsPolicyOrDefault(p corev1.DNSPolicy) corev1.DNSPolicy {
	if p == "" {
		return corev1.DNSClusterFirst
	}
	return p
}
