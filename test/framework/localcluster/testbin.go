package localcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tether-dev/tether/test/framework/testenv"
)

// Components lists the hack/testbin.sh components a cluster started with
// o execs, by testbin's names: Start's processes, the kubectl StartTether
// renders the manifests with, and the real node's binaries with RealNode.
// It is what `make demo` builds (testbin's "demo" group is checked against
// it by cmd/tether-demo's test), so a component Start begins to exec must
// be added here. Not included: the S3 server, versitygw or seaweedfs
// (StartS3, TetherOptions.S3), and the cluster network's (ClusterNetwork
// checks its own).
func (o Options) Components() []string {
	cs := []string{"kube-apiserver", "etcd", "kubectl", "kube-controller-manager", "kube-scheduler", "kwok", "jobset"}
	if o.TrainerVersion == TrainerV20 {
		cs = append(cs, "trainer-controller-manager-"+TrainerV20)
	} else {
		cs = append(cs, "trainer-controller-manager")
	}
	if o.Kueue {
		cs = append(cs, "kueue")
	}
	if o.RealNode {
		cs = append(cs, "kubelet", "containerd", "runc", "cni-plugins")
	}
	if o.Install != "" {
		cs = append(cs, "helm", "versitygw")
	}
	return cs
}

// componentFiles are the files a component puts in the assets directory
// when they are not just its name.
var componentFiles = map[string][]string{
	"containerd":  {"containerd", "containerd-shim-runc-v2", "ctr"},
	"cni-plugins": {"cni"},
}

// assets is the directory testenv.Assets resolves, checked to hold every
// binary a cluster started with opts runs.
func assets(opts Options) (string, error) {
	want := opts.Components()
	hint := fmt.Sprintf("`hack/testbin.sh %s`", strings.Join(want, " "))
	dir, err := testenv.Assets()
	if err != nil {
		return "", fmt.Errorf("%w; the local cluster needs %s (`make demo` and `make e2e` run it)", err, hint)
	}
	var missing []string
	for _, comp := range want {
		files, ok := componentFiles[comp]
		if !ok {
			files = []string{comp}
		}
		for _, f := range files {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				missing = append(missing, f)
			}
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("%s not built in %s: run %s (or `make demo`, `make e2e`) to build them from the Go module proxy", strings.Join(missing, ", "), dir, hint)
	}
	return dir, nil
}
