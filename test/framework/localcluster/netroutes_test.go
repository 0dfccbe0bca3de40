package localcluster

import (
	"slices"
	"testing"
)

// TestServiceEndpointParse: the two forms kube-proxy's nftables proxier
// writes a service chain in (one endpoint; a numgen map of several).
func TestServiceEndpointParse(t *testing.T) {
	for line, want := range map[string][]string{
		"meta l4proto tcp dnat to 198.18.0.1:17307": {"198.18.0.1", "17307"},
		"meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 198.18.0.1 . 17307 , 1 : 198.18.0.1 . 28481 }": {
			"198.18.0.1", "17307", "198.18.0.1", "28481"},
	} {
		var got []string
		for _, m := range serviceEndpoint.FindAllStringSubmatch(line, -1) {
			got = append(got, m[1], m[2])
		}
		if !slices.Equal(got, want) {
			t.Errorf("%q: %v, want %v", line, got, want)
		}
	}
}
