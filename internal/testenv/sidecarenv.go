package testenv

import (
	corev1 "k8s.io/api/core/v1"
)

// SidecarEnv resolves the injected sidecar's environment as the kubelet
// would: literal values as they are, downward-API fields from the pod.
// No kubelet runs in these environments, so tests and the demo run the
// sidecar themselves with exactly this environment.
func SidecarEnv(pod *corev1.Pod) map[string]string {
	env := map[string]string{}
	if len(pod.Spec.InitContainers) == 0 {
		return env
	}
	for _, e := range pod.Spec.InitContainers[len(pod.Spec.InitContainers)-1].Env {
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
