package images

// VersitygwVersion is the versitygw release the in-cluster store's image
// carries: the one hack/testbin.sh builds (VERSITYGW_VERSION) and the chart
// and the quick-start overlay name (ghcr.io/versity/versitygw:v1.8.0).
const VersitygwVersion = "v1.8.0"

// StoreSpec is the image of the in-cluster artifact store (the chart's
// artifacts.inCluster.image, the quick start's store.yaml) built from the
// versitygw binary hack/testbin.sh builds from the Go module proxy, rather
// than pulled: versitygw alone (no shell, no coreutils), at the path of
// upstream's image (/usr/local/bin/versitygw, its ENTRYPOINT runs it with the
// container's arguments), non-root (User; the manifests run it as 1000).
// Its Ref takes VersitygwVersion as the tag: it is versitygw's release, not
// Tether's. The local cluster's installed mode (test/framework/localcluster,
// install.go) builds it; `make images` does not.
func StoreSpec(registry string) Spec {
	return Spec{Repository: registry + "/versitygw", Binary: "versitygw", Package: "github.com/versity/versitygw/cmd/versitygw@" + VersitygwVersion + " (hack/testbin.sh versitygw)",
		Entrypoint:  "/usr/local/bin/versitygw",
		Description: "versitygw " + VersitygwVersion + " (S3 gateway, posix backend), Tether's in-cluster artifact store for the quick start", Test: true}
}

// ControlPlane is the spec of the control plane's image (the first of
// Specs), Sidecar the injected sidecar's (the second): what an install
// names through its values (image.repository, sidecar.image), looked up
// here rather than by title or package, which may change.
func ControlPlane(registry string) Spec { return Specs(registry)[0] }

// Sidecar is the spec of the injected sidecar's image; see ControlPlane.
func Sidecar(registry string) Spec { return Specs(registry)[1] }
