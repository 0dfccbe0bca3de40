package images

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/tether-dev/tether/internal/version"
)

// The shipped manifests name the images `make images` builds, at its default
// tag (internal/version.Version, which the Makefile's VERSION reads from
// version.go's own line).
func TestManifestsNameTheBuiltImages(t *testing.T) {
	src, err := os.ReadFile("../version/version.go")
	if err != nil {
		t.Fatal(err)
	}
	// The Makefile: sed -n 's/^var Version = "\(.*\)"$/\1/p' internal/version/version.go
	m := regexp.MustCompile(`(?m)^var Version = "(.*)"$`).FindAllSubmatch(src, -1)
	if len(m) != 1 || string(m[0][1]) != version.Version {
		t.Fatalf("the Makefile reads VERSION from version.go's line `var Version = \"...\"`: found %q, version.Version is %q", m, version.Version)
	}
	meta := Meta{Version: version.Version}
	refs := map[string]string{}
	for _, s := range Specs(version.Registry) {
		refs[s.Title()] = s.Ref(meta)
	}
	if got := version.Image("tether-sidecar"); got != refs["tether-sidecar"] {
		t.Errorf("control plane's default --sidecar-image %s, make images builds %s", got, refs["tether-sidecar"])
	}

	dep, err := os.ReadFile("../../manifests/base/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var image, sidecar string
	lines := strings.Split(string(dep), "\n")
	for i, line := range lines {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "image: "); ok {
			image = v
		}
		// - name: TETHER_SIDECAR_IMAGE, then value: <image>
		if line == "- name: TETHER_SIDECAR_IMAGE" && i+1 < len(lines) {
			sidecar, _ = strings.CutPrefix(strings.TrimSpace(lines[i+1]), "value: ")
		}
	}
	if image != refs["tether-control-plane"] {
		t.Errorf("manifests/base/deployment.yaml: image %q, make images builds %s", image, refs["tether-control-plane"])
	}
	if sidecar != refs["tether-sidecar"] {
		t.Errorf("manifests/base/deployment.yaml: TETHER_SIDECAR_IMAGE=%q, make images builds %s", sidecar, refs["tether-sidecar"])
	}
}
