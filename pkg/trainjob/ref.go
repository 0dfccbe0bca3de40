package trainjob

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Ref is the reference Events about a TrainJob point at. It is built from
// names alone: Tether never decodes a TrainJob's spec. uid may be empty when
// only the name is known (the binding server knows the TrainJob by its
// WorkerBinding).
func Ref(namespace, name string, uid types.UID) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: GVK.GroupVersion().String(), Kind: GVK.Kind,
		Namespace: namespace, Name: name, UID: uid}
}
