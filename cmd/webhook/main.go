// Command webhook is Tether's control plane: the TrainJob and Pod admission
// webhooks, the binding controller, certificate management and metrics, in
// one binary (see pkg/controlplane).
package main

import (
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/tether-dev/tether/pkg/controlplane"
)

func main() {
	opts := controlplane.DefaultOptions()
	opts.BindFlags(flag.CommandLine)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tether: no Kubernetes config:", err)
		os.Exit(1)
	}
	if err := controlplane.Run(ctrl.SetupSignalHandler(), cfg, opts); err != nil {
		fmt.Fprintln(os.Stderr, "tether:", err)
		os.Exit(1)
	}
}
