package controlplane

import (
	"flag"
	"io"
	"strings"
	"testing"
)

func TestSidecarResourceFlags(t *testing.T) {
	parse := func(args ...string) (*Options, error) {
		do := DefaultOptions()
		o := &do
		o.Namespace = "tether-system"
		o.ServerURL = "https://tether-control-plane.tether-system.svc:8443"
		o.ArtifactDir = "/tmp/a"
		fs := flag.NewFlagSet("tether-control-plane", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.BindFlags(fs)
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		return o, o.Validate()
	}
	o, err := parse("--sidecar-requests=memory=96Mi", "--sidecar-limits=cpu=2")
	if err != nil {
		t.Fatal(err)
	}
	r := o.sidecarConfig().Resources
	if r.Requests.Memory().String() != "96Mi" || r.Requests.Cpu().String() != "50m" || r.Limits.Cpu().String() != "2" || r.Limits.Memory().String() != "128Mi" {
		t.Errorf("resources %v: want the flags over the built-in defaults", r)
	}
	if _, err := parse("--sidecar-requests=gpu=1"); err == nil || !strings.Contains(err.Error(), `--sidecar-requests=gpu=1: resource "gpu": must be cpu, memory or ephemeral-storage`) {
		t.Errorf("bad resource name: %v", err)
	}
	if _, err := parse("--sidecar-requests=memory=1Gi"); err == nil || !strings.Contains(err.Error(), "memory request 1Gi exceeds its limit 128Mi") {
		t.Errorf("request over the built-in limit: %v", err)
	}
}

// The binding server URL is what every sidecar dials with its token: a URL
// the sidecar would refuse is refused when the control plane starts.
func TestBindingServerURLIsOneTheSidecarAccepts(t *testing.T) {
	for raw, want := range map[string]string{
		"http://tether-control-plane.tether-system.svc:8443":       `--binding-server-url: ServerURL "http://tether-control-plane.tether-system.svc:8443": scheme must be https`,
		"https://u:p@tether-control-plane.tether-system.svc:8443":  "must not carry user info",
		"https://tether-control-plane.tether-system.svc:8443/?t=x": "must not carry user info, a query",
		"tether-control-plane.tether-system.svc:8443":              "--binding-server-url: ServerURL",
	} {
		o := DefaultOptions()
		o.Namespace, o.ArtifactDir, o.ServerURL = "tether-system", "/tmp/a", raw
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--binding-server-url=%s: Validate() = %v, want an error containing %q", raw, err, want)
		}
	}
	o := DefaultOptions()
	o.Namespace, o.ArtifactDir = "tether-system", "/tmp/a"
	if err := o.Validate(); err != nil {
		t.Errorf("the default --binding-server-url %s: %v", o.ServerURL, err)
	}
}
