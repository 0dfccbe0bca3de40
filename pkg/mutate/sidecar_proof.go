package mutate

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// An injection is proven from what Tether itself renders, never from names
// and annotations a user can write (a runtime template can copy both from
// an injected pod, or make them up): a pod that carries the status
// annotation counts as injected only when its sidecar, token volume and
// annotation are what the webhook would make of it now for this job.
// A pod Tether injected passes (a reinvocation is then a no-op); one that
// merely looks injected does not, and is re-injected (a declaration under a
// copied annotation) or refused, the Event naming what differs. Something
// that passes is Tether's sidecar whoever wrote it: it runs Tether's image
// with Tether's settings and the job's token.

// apiDefaultTerminationMessagePath is what the API server defaults an unset
// terminationMessagePath to (SetDefaults_Container): a reinvoked webhook
// sees its own sidecar defaulted.
const apiDefaultTerminationMessagePath = "/dev/termination-log"

// proveInjected returns nil when pod, which passed trainjob.CheckInjected
// for this job, carries exactly the injection PodInjector makes for it as
// the pod of TrainJob name, else what differs. Besides what Tether renders,
// the sidecar may carry env vars, volume mounts and resources others added
// (a runtime's declaration in Kueue mode, a later webhook, API defaults),
// as long as none is one of Tether's: no TETHER_ variable, no mount at or
// around Tether's paths, no other value for a resource Tether sets.
func (i PodInjector) proveInjected(pod *corev1.Pod, trainer *corev1.Container, settings jobconfig.Settings, name, jobID, workerID, rank string) error {
	status, err := trainjob.ParseInjectionStatus(pod.Annotations[names.PodStatusAnnotation])
	if err != nil {
		return err
	}
	k := declaredSidecar(pod)
	if k < 0 {
		return fmt.Errorf("the pod has no %s init container", SidecarName)
	}
	c := &pod.Spec.InitContainers[k]
	plan, d, ok := planArtifacts(pod, trainer, settings.ArtifactPath)
	if !ok {
		return errors.New(d.Message)
	}
	var problems []string
	switch {
	case status.ArtifactVolume != plan.mount.Name:
		problems = append(problems, fmt.Sprintf("%s names artifact volume %q, but the trainer's artifact path %s is on volume %q",
			names.PodStatusAnnotation, status.ArtifactVolume, settings.ArtifactPath, plan.mount.Name))
	case !status.Reused && (plan.mount.Name != ArtifactVolumeName || plan.mount.SubPath != ""):
		problems = append(problems, fmt.Sprintf("%s says Tether added the artifact volume, but the trainer's artifact path is on %q", names.PodStatusAnnotation, plan.mount.Name))
	case !status.Reused && !isPlainEmptyDir(findVolume(pod.Spec.Volumes, ArtifactVolumeName)):
		problems = append(problems, fmt.Sprintf("volume %s is not the emptyDir Tether adds", ArtifactVolumeName))
	}
	resources := c.Resources // a declaration's (Kueue mode): what Kueue counted
	if !status.Declared {
		if resources, err = MergeResources(i.Sidecar.Resources, settings.SidecarRequests, settings.SidecarLimits); err != nil {
			return err
		}
	}
	image := i.Sidecar.Image
	if settings.SidecarImage != "" {
		image = settings.SidecarImage
	}
	want := renderSidecar(sidecarInput{
		image: image, serverURL: i.Sidecar.ServerURL, trainJob: name, jobID: jobID, workerID: workerID, nodeRank: rank,
		heartbeat: settings.HeartbeatInterval.String(), flushBudget: flushBudget(pod).String(),
		include: strings.Join(settings.Include, ","), exclude: strings.Join(settings.Exclude, ","),
		artifactMount: plan.mount, nestedMounts: plan.nested, resources: resources,
	})
	problems = append(problems, sidecarDiff(want, *c)...)
	if v := findVolume(pod.Spec.Volumes, TokenVolumeName); v == nil || !equality.Semantic.DeepEqual(*v, tokenVolume(name)) {
		problems = append(problems, fmt.Sprintf("volume %s is not the job's token Secret %s as Tether mounts it", TokenVolumeName, tokenVolume(name).Secret.SecretName))
	}
	if v := findVolume(pod.Spec.Volumes, PodTokenVolumeName); v == nil || !equality.Semantic.DeepEqual(*v, podTokenVolume()) {
		problems = append(problems, fmt.Sprintf("volume %s is not the pod's ServiceAccount token of audience %s as Tether mounts it", PodTokenVolumeName, names.PodTokenAudience))
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("it is not the sidecar Tether injects for this pod: %s", strings.Join(problems, "; "))
}

func isPlainEmptyDir(v *corev1.Volume) bool {
	return v != nil && equality.Semantic.DeepEqual(v.VolumeSource, corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}})
}

// sidecarDiff names the ways got differs from want, Tether's rendering,
// beyond what others may add (proveInjected).
func sidecarDiff(want, got corev1.Container) []string {
	var problems []string
	own := func(e corev1.EnvVar) bool {
		return strings.HasPrefix(e.Name, "TETHER_") || slices.ContainsFunc(want.Env, func(w corev1.EnvVar) bool { return w.Name == e.Name })
	}
	var gotEnv []corev1.EnvVar
	for _, e := range got.Env {
		if own(e) {
			gotEnv = append(gotEnv, e)
		}
	}
	var gotMounts []corev1.VolumeMount
	for _, m := range got.VolumeMounts {
		switch {
		case slices.ContainsFunc(want.VolumeMounts, func(w corev1.VolumeMount) bool { return w.MountPath == m.MountPath }):
			gotMounts = append(gotMounts, m)
		case slices.ContainsFunc(want.VolumeMounts, func(w corev1.VolumeMount) bool { return pathsOverlap(w.MountPath, m.MountPath) }):
			problems = append(problems, fmt.Sprintf("it mounts volume %q at %s, inside or around the sidecar's own mounts", m.Name, m.MountPath))
		}
	}
	got.Env, got.VolumeMounts = gotEnv, gotMounts
	want.Resources = defaultedResources(want.Resources)
	got.Resources = onlyNamed(defaultedResources(got.Resources), want.Resources)
	for _, c := range []*corev1.Container{&want, &got} {
		if c.TerminationMessagePath == "" {
			c.TerminationMessagePath = apiDefaultTerminationMessagePath
		}
	}
	var fields []string
	wv, gv := reflect.ValueOf(want), reflect.ValueOf(got)
	for k := range wv.NumField() {
		if !equality.Semantic.DeepEqual(wv.Field(k).Interface(), gv.Field(k).Interface()) {
			fields = append(fields, strings.Split(wv.Type().Field(k).Tag.Get("json"), ",")[0])
		}
	}
	if len(fields) > 0 {
		problems = append(problems, fmt.Sprintf("init container %s differs from Tether's in %s", SidecarName, strings.Join(fields, ", ")))
	}
	return problems
}

// defaultedResources is r as the API server stores it: a limit without a
// request requests the limit.
func defaultedResources(r corev1.ResourceRequirements) corev1.ResourceRequirements {
	out := *r.DeepCopy()
	if len(out.Limits) > 0 {
		out.Requests = effectiveRequests(out)
	}
	return out
}

// onlyNamed keeps of r the requests and limits of the resources want names.
func onlyNamed(r, want corev1.ResourceRequirements) corev1.ResourceRequirements {
	keep := func(l, names corev1.ResourceList) corev1.ResourceList {
		var out corev1.ResourceList
		for n, q := range l {
			if _, ok := names[n]; ok {
				if out == nil {
					out = corev1.ResourceList{}
				}
				out[n] = q
			}
		}
		return out
	}
	return corev1.ResourceRequirements{Requests: keep(r.Requests, want.Requests), Limits: keep(r.Limits, want.Limits)}
}
