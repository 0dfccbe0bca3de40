// Command tether-control-plane is Tether's whole control plane: the TrainJob,
// JobSet and Pod admission webhooks, the binding controller, the binding
// server with its artifact endpoint, certificate management and metrics, in
// one binary (see pkg/controlplane).
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/klog/v2"
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
	logger := controlplane.LazyValues(zap.New(zap.UseFlagOptions(&zapOpts)))
	ctrl.SetLogger(logger)
	// client-go logs through klog (leader election, for one): into the same
	// structured log, not as text lines between its JSON ones.
	klog.SetLogger(logger)

	ctx := ctrl.SetupSignalHandler()
	// The container's memory limit, known to the Go runtime (and followed).
	controlplane.GoMemoryLimit(ctx, logger)

	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tether: no Kubernetes config:", err)
		os.Exit(1)
	}
	if err := controlplane.Run(ctx, controlplane.ClientSettings(cfg), opts); err != nil {
		fmt.Fprintln(os.Stderr, "tether:", err)
		os.Exit(1)
	}
}
