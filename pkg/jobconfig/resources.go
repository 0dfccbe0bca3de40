package jobconfig

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// sidecarResourceNames are what the sidecar's requests and limits may name:
// it runs no accelerator, so a GPU or hugepages request would only hold one.
var sidecarResourceNames = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage}

// ParseResourceList reads a list such as "cpu=100m,memory=128Mi" (the
// sidecar-requests and sidecar-limits annotations, and the control plane's
// --sidecar-requests and --sidecar-limits flags). Each resource is cpu,
// memory or ephemeral-storage, at most once, with a positive quantity.
func ParseResourceList(v string) (corev1.ResourceList, error) {
	list := corev1.ResourceList{}
	for _, item := range strings.Split(v, ",") {
		name, qty, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" || qty == "" {
			return nil, fmt.Errorf("%q is not name=quantity", item)
		}
		rn := corev1.ResourceName(strings.TrimSpace(name))
		if !slices.Contains(sidecarResourceNames, rn) {
			return nil, fmt.Errorf("resource %q: must be cpu, memory or ephemeral-storage", rn)
		}
		if _, dup := list[rn]; dup {
			return nil, fmt.Errorf("resource %s given twice", rn)
		}
		q, err := resource.ParseQuantity(strings.TrimSpace(qty))
		if err != nil {
			return nil, fmt.Errorf("%s=%s: not a quantity", rn, qty)
		}
		if q.Sign() <= 0 {
			return nil, fmt.Errorf("%s=%s: must be positive", rn, qty)
		}
		list[rn] = q
	}
	return list, nil
}

// MergeResources is base with the requests and limits of override laid over
// it, resource by resource, and an error naming every resource whose request
// then exceeds its limit (the API server would refuse the pod).
func MergeResources(base corev1.ResourceRequirements, requests, limits corev1.ResourceList) (corev1.ResourceRequirements, error) {
	out := corev1.ResourceRequirements{Requests: base.Requests.DeepCopy(), Limits: base.Limits.DeepCopy()}
	if out.Requests == nil {
		out.Requests = corev1.ResourceList{}
	}
	if out.Limits == nil {
		out.Limits = corev1.ResourceList{}
	}
	for k, v := range requests {
		out.Requests[k] = v
	}
	for k, v := range limits {
		out.Limits[k] = v
	}
	var bad []string
	for _, k := range sidecarResourceNames {
		r, hasR := out.Requests[k]
		l, hasL := out.Limits[k]
		if hasR && hasL && r.Cmp(l) > 0 {
			bad = append(bad, fmt.Sprintf("%s request %s exceeds its limit %s", k, r.String(), l.String()))
		}
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("%s", strings.Join(bad, "; "))
	}
	return out, nil
}
