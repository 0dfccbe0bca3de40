// Package version is the one owner of Tether's version: the release tag of
// its images, the default sidecar image of the control plane, and what the
// binaries report. `make images` (and any release build) sets both variables
// with -ldflags "-X github.com/tether-dev/tether/internal/version.Version=...
// -X github.com/tether-dev/tether/internal/version.Revision=...".
package version

// Version is the release version, also the tag of every image. The
// Makefile's VERSION defaults to this value (it reads this line).
var Version = "v0.1.0"

// Revision is the git commit the binary was built from ("" when not set by
// the build).
var Revision = ""

// Registry is where Tether's images are published; a platform team copies
// them to its own registry and points the manifests there.
const Registry = "ghcr.io/tether-dev"

// Image is the reference of one of Tether's images at this version, e.g.
// Image("tether-sidecar") = "ghcr.io/tether-dev/tether-sidecar:v0.1.0".
func Image(name string) string {
	return Registry + "/" + name + ":" + Version
}
