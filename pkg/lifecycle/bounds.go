package lifecycle

import (
	"slices"
	"unicode/utf8"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// A binding's status is one etcd value, and etcd refuses a request over
// 1.5 MiB (--max-request-bytes): with 256 nodes each naming ten missing
// keys of up to 1008 bytes and an unbounded error, one status write could
// reach several MB and be refused, losing the verdict it carried. These are
// the bounds the CRD states (maxLength on the fields, api/v1alpha1); what the
// server writes is cut to them here, where it is recorded.
const (
	// MaxMissingPathBytes bounds each entry of Missing (a key relative to
	// the job's prefix; MissingCount still counts it).
	MaxMissingPathBytes = 256
	// MaxNodeErrorBytes bounds NodeArtifacts.LastError.
	MaxNodeErrorBytes = 512
	// MaxErrorBytes bounds ArtifactsStatus.LastError.
	MaxErrorBytes = 1024
)

// truncatedMark ends a cut string, so a reader knows it is not whole.
const truncatedMark = "…"

// Truncate returns s cut to at most limit bytes at a UTF-8 boundary, ending in
// "…" when cut. Bytes bound characters too, so the CRD's maxLength (in
// characters) holds.
func Truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	n := limit - len(truncatedMark)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + truncatedMark
}

// BoundNodeArtifacts cuts a node's verdict to the CRD's bounds.
func BoundNodeArtifacts(a *tetherv1.NodeArtifacts) {
	cloned := false
	for i, p := range a.Missing {
		if len(p) <= MaxMissingPathBytes {
			continue
		}
		if !cloned {
			a.Missing, cloned = slices.Clone(a.Missing), true // not the caller's slice
		}
		a.Missing[i] = Truncate(p, MaxMissingPathBytes)
	}
	a.LastError = Truncate(a.LastError, MaxNodeErrorBytes)
}
