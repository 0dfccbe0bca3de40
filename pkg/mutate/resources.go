package mutate

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tether-dev/tether/pkg/jobconfig"
)

// MergeResources is base with requests and limits (validated by
// jobconfig.ParseResourceList) laid over it, resource by resource, and an
// error naming every resource whose request then exceeds its limit (the API
// server would refuse the pod).
func MergeResources(base corev1.ResourceRequirements, requests, limits map[string]string) (corev1.ResourceRequirements, error) {
	out := corev1.ResourceRequirements{Requests: base.Requests.DeepCopy(), Limits: base.Limits.DeepCopy()}
	if out.Requests == nil {
		out.Requests = corev1.ResourceList{}
	}
	if out.Limits == nil {
		out.Limits = corev1.ResourceList{}
	}
	for _, over := range []struct {
		from map[string]string
		into corev1.ResourceList
	}{{requests, out.Requests}, {limits, out.Limits}} {
		for k, v := range over.from {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return out, fmt.Errorf("%s=%s: %w", k, v, err)
			}
			over.into[corev1.ResourceName(k)] = q
		}
	}
	var bad []string
	for _, k := range jobconfig.SidecarResourceNames {
		r, hasR := out.Requests[corev1.ResourceName(k)]
		l, hasL := out.Limits[corev1.ResourceName(k)]
		if hasR && hasL && r.Cmp(l) > 0 {
			bad = append(bad, fmt.Sprintf("%s request %s exceeds its limit %s", k, r.String(), l.String()))
		}
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("%s", strings.Join(bad, "; "))
	}
	return out, nil
}
