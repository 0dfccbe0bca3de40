// Command training-service is an example orchestrator on Tether's Go
// client (service package): it submits two bound TrainJobs to a Kueue
// queue, collects the first one's verified artifacts and cancels the
// second after a flush.
//
//	go run ./examples/training-service --namespace team-a --queue user-queue \
//	    --runtime torch-distributed --tether-url https://tether-control-plane.tether-system.svc:9443 --tether-ca ca.crt
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/tether-dev/tether/examples/training-service/service"
	"github.com/tether-dev/tether/pkg/client"
)

func main() {
	var cfg service.Config
	var kubeconfig, url, caFile string
	flag.StringVar(&kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig (its user needs a bearer token for artifact reads)")
	flag.StringVar(&url, "tether-url", os.Getenv("TETHER_URL"), "base URL of Tether's binding Service")
	flag.StringVar(&caFile, "tether-ca", os.Getenv("TETHER_CA"), "PEM CA of the binding Service's certificate")
	flag.StringVar(&cfg.Namespace, "namespace", "default", "namespace of the TrainJobs")
	flag.StringVar(&cfg.Queue, "queue", "user-queue", "Kueue LocalQueue")
	flag.StringVar(&cfg.Runtime, "runtime", "torch-distributed", "ClusterTrainingRuntime")
	flag.StringVar(&cfg.Job, "job", "example-train", "the job that runs to completion")
	flag.StringVar(&cfg.CancelJob, "cancel-job", "example-cancel", "the job that is cancelled")
	flag.StringVar(&cfg.OutDir, "out", "artifacts", "where the artifacts go")
	flag.DurationVar(&cfg.Timeout, "timeout", 30*time.Minute, "bound of each wait")
	flag.Parse()
	if err := run(kubeconfig, url, caFile, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "training-service:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, url, caFile string, cfg service.Config) error {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	opts := client.Options{ReadURL: url}
	if caFile != "" {
		if opts.ReadCA, err = os.ReadFile(caFile); err != nil {
			return err
		}
	}
	c, err := client.New(rc, opts)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	_, err = service.Run(ctx, c, cfg, os.Stdout)
	return err
}
