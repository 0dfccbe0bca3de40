package images

// NetworkSpecs are the images of the local cluster's network
// (test/framework/localcluster/network.go), built by the harness when it
// starts the network rather than by `make images`: CoreDNS, whose binary
// hack/testbin.sh builds from the Go module proxy (a main with only the
// plugins the cluster uses), and netprobe, the test image that checks the
// network from inside pods.
func NetworkSpecs(registry string) []Spec {
	return []Spec{
		{Repository: registry + "/tether-coredns", Package: "github.com/coredns/coredns (hack/testbin.sh coredns)", Binary: "coredns", Entrypoint: "/coredns",
			Description: "Tether test image: CoreDNS with the kubernetes, errors, health, ready and cache plugins, the local cluster's DNS", Test: true},
		{Repository: registry + "/tether-netprobe", Package: "./test/framework/localcluster/netprobe", Entrypoint: "/netprobe",
			Description: "Tether test image: checks the local cluster's network from inside pods", Test: true},
	}
}
