package mutate

import (
	"fmt"
	"path"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/jobconfig"
)

// Kueue mode (docs/platform.md#kueue-mode): the platform team declares the
// sidecar in the (Cluster)TrainingRuntime's trainer pod template, so that
// Kueue, which computes a workload's quota from templates before any pod
// exists, counts it. The pod webhook completes that declaration in place
// instead of appending a second sidecar, and keeps its resources: they are
// what Kueue counted.

// PlaceholderImage is the image the docs give a declaration. The webhook
// replaces whatever image a declaration names; the placeholder only runs
// where Tether does not complete it (an unbound job's pods never reach the
// webhook), so it must stay up until SIGTERM doing nothing: a native sidecar
// that exits is restarted with backoff and, until the kubelet has seen it
// running, holds back the containers after it (kubelet
// computeInitContainerActions, v1.37). pause does exactly that (exit 0 on
// SIGTERM/SIGINT, non-root uid 65535) and is usually on every node already as
// the sandbox image.
const PlaceholderImage = "registry.k8s.io/pause:3.10.2"

// declarationKeeps are the fields of a declaration that the completed sidecar
// keeps (env and volume mounts ahead of Tether's own: the Job controller adds
// JOB_COMPLETION_INDEX to every container of an Indexed Job's pods, seen in
// e2e scenario 17, and other webhooks may add theirs before Tether's runs);
// declarationPlaceholder are the placeholder's own, replaced by Tether's. Any
// other field is one Tether sets itself (or has no use for), and a
// declaration naming it is refused rather than silently overwritten.
var (
	declarationKeeps       = []string{"Name", "RestartPolicy", "Resources", "Env", "VolumeMounts"}
	declarationPlaceholder = []string{"Image", "Command", "Args", "ImagePullPolicy", "SecurityContext",
		"TerminationMessagePath", "TerminationMessagePolicy"}
)

// declaredResourceNames are the resources a declaration must request and limit:
// what Kueue and a namespace ResourceQuota need to count the sidecar.
var declaredResourceNames = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory}

// declaredSidecar is the index of the init container that declares the
// sidecar (named SidecarName), or -1.
func declaredSidecar(pod *corev1.Pod) int {
	return slices.IndexFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == SidecarName })
}

// checkDeclaration names everything that keeps c from being a declaration the
// webhook can complete, or returns nil.
func checkDeclaration(c *corev1.Container) error {
	var problems []string
	if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		problems = append(problems, "it is not a native sidecar (set restartPolicy: Always)")
	}
	if extra := setFieldsExcept(c, append(slices.Clone(declarationKeeps), declarationPlaceholder...)); len(extra) > 0 {
		problems = append(problems, fmt.Sprintf("it sets %s, which Tether sets itself when it completes the sidecar (remove them)", strings.Join(extra, ", ")))
	}
	problems = append(problems, resourceProblems(c.Resources)...)
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("init container %q declares Tether's sidecar (Kueue mode), but %s; declare it as "+
		"{name: %s, image: %s, restartPolicy: Always, resources: {requests: {cpu, memory}, limits: {cpu, memory}}} "+
		"(docs/platform.md#kueue-mode), or rename it if it is not meant as Tether's sidecar",
		SidecarName, strings.Join(problems, "; "), SidecarName, PlaceholderImage)
}

// setFieldsExcept lists, by their JSON names, the fields of c that are set
// and not in allowed. A field added to corev1.Container later is refused
// until it is listed.
func setFieldsExcept(c *corev1.Container, allowed []string) []string {
	var set []string
	v := reflect.ValueOf(c).Elem()
	for k := range v.NumField() {
		f := v.Type().Field(k)
		if slices.Contains(allowed, f.Name) || v.Field(k).IsZero() {
			continue
		}
		set = append(set, strings.Split(f.Tag.Get("json"), ",")[0])
	}
	return set
}

// resourceProblems checks a declaration's resources: only what the sidecar
// may hold, a request and a limit for cpu and memory, no request over its limit.
func resourceProblems(r corev1.ResourceRequirements) []string {
	var problems []string
	for _, list := range []corev1.ResourceList{r.Requests, r.Limits} {
		for name := range list {
			if !slices.Contains(jobconfig.SidecarResourceNames, string(name)) {
				problems = append(problems, fmt.Sprintf("its resources name %s (the sidecar may hold only %s)", name, strings.Join(jobconfig.SidecarResourceNames, ", ")))
			}
		}
	}
	requests := effectiveRequests(r)
	var missing []string
	for _, name := range declaredResourceNames {
		if _, ok := requests[name]; !ok {
			missing = append(missing, "requests."+string(name))
		}
		if _, ok := r.Limits[name]; !ok {
			missing = append(missing, "limits."+string(name))
		}
	}
	if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("its resources lack %s (Kueue and a namespace ResourceQuota count what the declaration says)", strings.Join(missing, ", ")))
	}
	for _, name := range sortedResourceNames(requests) {
		if q, l := requests[name], r.Limits[name]; !l.IsZero() && q.Cmp(l) > 0 {
			problems = append(problems, fmt.Sprintf("its %s request %s exceeds its limit %s", name, q.String(), l.String()))
		}
	}
	slices.Sort(problems)
	return slices.Compact(problems)
}

// completeDeclared is the sidecar that completes declared: rendered, with the
// declaration's resources (rendered has them already) and, ahead of Tether's
// own, the env vars and volume mounts the declaration carries. One that
// collides with Tether's (same env name; same or nested mount path) is an
// error naming it.
func completeDeclared(declared, rendered corev1.Container) (corev1.Container, error) {
	var clash []string
	for _, e := range declared.Env {
		if slices.ContainsFunc(rendered.Env, func(r corev1.EnvVar) bool { return r.Name == e.Name }) {
			clash = append(clash, "env "+e.Name)
		}
	}
	for _, m := range declared.VolumeMounts {
		if slices.ContainsFunc(rendered.VolumeMounts, func(r corev1.VolumeMount) bool { return pathsOverlap(r.MountPath, m.MountPath) }) {
			clash = append(clash, fmt.Sprintf("a mount of volume %q at %s", m.Name, m.MountPath))
		}
	}
	if len(clash) > 0 {
		return rendered, fmt.Errorf("init container %q declares Tether's sidecar (Kueue mode) with %s, which Tether sets itself (the sidecar's mounts are under %s): "+
			"remove them from the declaration", SidecarName, strings.Join(clash, ", "), path.Dir(SidecarTokenDir))
	}
	rendered.Env = append(slices.Clone(declared.Env), rendered.Env...)
	rendered.VolumeMounts = append(slices.Clone(declared.VolumeMounts), rendered.VolumeMounts...)
	return rendered, nil
}

// pathsOverlap: a and b are the same directory or one contains the other.
func pathsOverlap(a, b string) bool {
	a, b = path.Clean(a), path.Clean(b)
	return a == b || strings.HasPrefix(a, strings.TrimSuffix(b, "/")+"/") || strings.HasPrefix(b, strings.TrimSuffix(a, "/")+"/")
}

// effectiveRequests are the requests the API server gives the container: a
// resource with a limit and no request requests its limit (pod defaulting,
// which Kueue applies to templates too).
func effectiveRequests(r corev1.ResourceRequirements) corev1.ResourceList {
	out := r.Requests.DeepCopy()
	if out == nil {
		out = corev1.ResourceList{}
	}
	for name, l := range r.Limits {
		if _, ok := out[name]; !ok {
			out[name] = l.DeepCopy()
		}
	}
	return out
}

// reconcileResources checks the job's sidecar-requests and sidecar-limits
// annotations against a declaration's resources: the declaration wins (it is
// what Kueue counted), so an annotation may only repeat it. A value that
// differs, or names a resource the declaration does not set, is a
// contradiction, returned as one error naming each.
func reconcileResources(declared corev1.ResourceRequirements, requests, limits map[string]string) error {
	var bad []string
	for _, a := range []struct {
		annotation, kind string
		values           map[string]string
		declared         corev1.ResourceList
	}{
		{names.SidecarRequestsAnnotation, "request", requests, effectiveRequests(declared)},
		{names.SidecarLimitsAnnotation, "limit", limits, declared.Limits},
	} {
		for _, name := range sortedKeys(a.values) {
			q, err := resource.ParseQuantity(a.values[name])
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s %s=%s: %v", a.annotation, name, a.values[name], err))
				continue
			}
			switch d, ok := a.declared[corev1.ResourceName(name)]; {
			case !ok:
				bad = append(bad, fmt.Sprintf("%s says %s=%s, but the declaration sets no %s %s", a.annotation, name, a.values[name], name, a.kind))
			case q.Cmp(d) != 0:
				bad = append(bad, fmt.Sprintf("%s says %s=%s, but the declaration's %s %s is %s", a.annotation, name, a.values[name], name, a.kind, d.String()))
			}
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(bad, "; "))
}

func sortedResourceNames(l corev1.ResourceList) []corev1.ResourceName {
	names := make([]corev1.ResourceName, 0, len(l))
	for name := range l {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
