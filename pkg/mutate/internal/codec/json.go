package codec

import (
	"encoding/json"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// appendResourcesJSON appends json.Marshal(r): the requests and limits, by
// resource name, of quantities in their canonical form; anything else
// (claims) through json.Marshal. encoding/json's sorting of map keys by
// reflection and re-scan of each Quantity's MarshalJSON are most of the
// sidecar's encoding otherwise.
func appendResourcesJSON(dst []byte, r *corev1.ResourceRequirements) ([]byte, error) {
	if len(r.Claims) > 0 {
		return appendMarshal(dst, *r) // a copy: r, in a caller's Container, stays where it is
	}
	dst = append(dst, '{')
	var err error
	if len(r.Limits) > 0 {
		dst = append(dst, `"limits":`...)
		if dst, err = appendResourceList(dst, r.Limits); err != nil {
			return dst, err
		}
	}
	if len(r.Requests) > 0 {
		if len(r.Limits) > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `"requests":`...)
		if dst, err = appendResourceList(dst, r.Requests); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

func appendResourceList(dst []byte, l corev1.ResourceList) ([]byte, error) {
	names := make([]string, 0, len(l))
	for name := range l {
		names = append(names, string(name))
	}
	slices.Sort(names)
	dst = append(dst, '{')
	for k, name := range names {
		if k > 0 {
			dst = append(dst, ',')
		}
		dst = append(appendJSONString(dst, name), ':')
		q, err := l[corev1.ResourceName(name)].MarshalJSON() // a quoted canonical quantity: digits, '.', '-', 'e' and a suffix
		if err != nil {
			return dst, err
		}
		dst = append(dst, q...)
	}
	return append(dst, '}'), nil
}

// appendMarshal appends json.Marshal(v).
func appendMarshal(dst []byte, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	return append(dst, b...), err
}

// appendJSONString appends s as json.Marshal writes it: as is between
// quotes when it is printable ASCII that needs no escape (with encoding/json's
// HTML escaping of <, > and &), else through json.Marshal.
func appendJSONString(dst []byte, s string) []byte {
	for k := 0; k < len(s); k++ {
		if c := s[k]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always encodes
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
