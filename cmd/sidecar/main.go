// Command sidecar is the agent the pod webhook injects next to a bound
// TrainJob's trainer.
//
// This version checks the configuration the webhook injects (environment,
// token and CA files) and waits for termination; registration, heartbeats and
// artifact sync arrive with the binding and artifact work (issues 3 and 4).
// It never logs the token.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// required are the variables the pod webhook always sets.
var required = []string{
	"TETHER_JOB_ID", "TETHER_WORKER_ID", "TETHER_TRAINJOB", "TETHER_SERVER_URL",
	"TETHER_TOKEN_FILE", "TETHER_CA_FILE", "TETHER_ARTIFACT_DIR", "TETHER_HEARTBEAT_INTERVAL",
}

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := checkConfig(); err != nil {
		log.Error("invalid sidecar configuration", "error", err)
		os.Exit(2)
	}
	log.Info("tether sidecar started", "job", os.Getenv("TETHER_JOB_ID"), "worker", os.Getenv("TETHER_WORKER_ID"),
		"server", os.Getenv("TETHER_SERVER_URL"), "artifacts", os.Getenv("TETHER_ARTIFACT_DIR"))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
	log.Info("tether sidecar stopping")
}

func checkConfig() error {
	for _, k := range required {
		if os.Getenv(k) == "" {
			return fmt.Errorf("environment variable %s is not set; the sidecar expects the environment Tether's pod webhook injects", k)
		}
	}
	for _, k := range []string{"TETHER_TOKEN_FILE", "TETHER_CA_FILE"} {
		if _, err := os.Stat(os.Getenv(k)); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	return nil
}
