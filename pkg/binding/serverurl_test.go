package binding

import (
	"strings"
	"testing"
)

func TestParseServerURL(t *testing.T) {
	for _, ok := range []string{"https://tether-control-plane.tether-system.svc:8443", "https://127.0.0.1:8443/base/"} {
		u, err := ParseServerURL(ok)
		if err != nil || u.String() != ok {
			t.Errorf("ParseServerURL(%q) = %v, %v", ok, u, err)
		}
	}
	// Each refusal says what is wrong with the URL.
	for raw, want := range map[string]string{
		"":                            "ServerURL is required",
		"https://%zz":                 "ServerURL: parse",
		"http://tether.example:8443":  "scheme must be https",
		"ws://tether.example:8443":    "scheme must be https",
		"https:///x":                  "has no host",
		"https://u:p@tether.example":  "must not carry user info",
		"https://tether.example/?t=x": "must not carry user info, a query",
		"https://tether.example/#f":   "or a fragment",
	} {
		u, err := ParseServerURL(raw)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseServerURL(%q) = %v, %v; want an error containing %q", raw, u, err, want)
		}
	}
}
