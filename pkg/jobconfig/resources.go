package jobconfig

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// SidecarResourceNames are what the sidecar's requests and limits may name:
// it runs no accelerator, so a GPU or hugepages request would only hold one.
var SidecarResourceNames = []string{"cpu", "memory", "ephemeral-storage"}

// quantity is a positive Kubernetes quantity (resource.ParseQuantity's
// grammar without a sign). Matched here, not parsed: the sidecar imports
// this package and must not pull in Kubernetes' API machinery
// (internal/archtest); pkg/mutate parses the validated values.
var quantity = regexp.MustCompile(`^(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$`)

// ParseResourceList reads a list such as "cpu=100m,memory=128Mi" (the
// sidecar-requests and sidecar-limits annotations, and the control plane's
// --sidecar-requests and --sidecar-limits flags) into resource name →
// quantity. Each resource is cpu, memory or ephemeral-storage, at most once,
// with a positive quantity.
func ParseResourceList(v string) (map[string]string, error) {
	list := map[string]string{}
	for _, item := range strings.Split(v, ",") {
		name, qty, ok := strings.Cut(strings.TrimSpace(item), "=")
		name, qty = strings.TrimSpace(name), strings.TrimSpace(qty)
		if !ok || name == "" || qty == "" {
			return nil, fmt.Errorf("%q is not name=quantity", item)
		}
		if !slices.Contains(SidecarResourceNames, name) {
			return nil, fmt.Errorf("resource %q: must be cpu, memory or ephemeral-storage", name)
		}
		if _, dup := list[name]; dup {
			return nil, fmt.Errorf("resource %s given twice", name)
		}
		if !quantity.MatchString(qty) {
			return nil, fmt.Errorf("%s=%s: not a quantity (e.g. 100m, 0.5, 128Mi, 1G)", name, qty)
		}
		if mantissa := strings.TrimLeft(qty, "0."); mantissa == "" || !strings.ContainsAny(mantissa[:1], "123456789") {
			return nil, fmt.Errorf("%s=%s: must be positive", name, qty)
		}
		list[name] = qty
	}
	return list, nil
}
