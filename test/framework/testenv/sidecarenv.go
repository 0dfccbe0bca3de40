package testenv

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/tether-dev/tether/pkg/trainjob"
)

// SidecarEnv resolves the injected sidecar's environment as the kubelet
// would: literal values as they are, downward-API fields from the pod.
// No kubelet runs in these environments, so tests and the demo run the
// sidecar themselves with exactly this environment.
func SidecarEnv(pod *corev1.Pod) map[string]string {
	env := map[string]string{}
	// By name: appended last, or completed where the runtime declared it.
	k := slices.IndexFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == trainjob.SidecarContainer })
	if k < 0 {
		return env
	}
	for _, e := range pod.Spec.InitContainers[k].Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef == nil:
		case e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = pod.Name
		case e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env[e.Name] = pod.Namespace
		case e.ValueFrom.FieldRef.FieldPath == "metadata.uid":
			env[e.Name] = string(pod.UID)
		case e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			env[e.Name] = pod.Spec.NodeName
		}
	}
	return env
}
