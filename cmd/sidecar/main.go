// Command sidecar is the agent the pod webhook injects next to a bound
// TrainJob's trainer.
//
// It reads its configuration from the environment the webhook injects (see
// pkg/binding/sidecarenv.go), registers with the binding server, heartbeats
// with the trainer's progress (the optional progress file in the artifact
// directory) and answers the server's commands, reconnecting with backoff
// whenever the connection is lost. On SIGTERM or SIGINT it tells the server
// the pod is finishing and exits 0. When the binding ends (finished, revoked,
// or its session taken over) it idles until SIGTERM: a native sidecar is
// restarted whenever it exits. It exits 1 when its token or identity is
// refused (a restart re-reads the token) and 2 on a bad configuration; the last log line says why, and the kubelet shows it as the
// termination message. It never logs the token.
//
// Artifact upload is not implemented yet (issue 4): commands that need it are
// refused (CommandAck OK false) rather than acknowledged falsely.
package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/tether-dev/tether/pkg/binding"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise the module version, if any, is used.
var version string

// Shutdown budget: a native sidecar gets SIGTERM after the trainer has
// stopped, within the pod's grace period (30s by default).
const (
	finishTimeout = 5 * time.Second
	stopTimeout   = 3 * time.Second
)

// errArtifactSyncNotImplemented answers flush, drain and cancel until the
// artifact work lands: acknowledging them as done would be a lie.
var errArtifactSyncNotImplemented = errors.New("artifact sync not implemented")

func main() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	os.Exit(run(os.Getenv, os.Stderr, sigs, func() { signal.Stop(sigs) }))
}

// run is the sidecar; it returns the exit code. stopSignals is called after
// the first signal so that a second one terminates the process at once.
func run(getenv func(string) string, stderr io.Writer, sigs <-chan os.Signal, stopSignals func()) int {
	cfg, cfgErr := loadConfig(getenv)
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	if cfgErr != nil {
		log.Error("invalid sidecar configuration", "error", cfgErr)
		return 2
	}
	cc := cfg.client
	cc.SidecarVersion = sidecarVersion()
	cc.Logger = log
	cc.Progress = progressFunc(binding.NewProgressReader(cfg.artifactDir), log)
	cc.OnCommand = func(ctx context.Context, cmd binding.Command) error {
		log.Info("command refused: artifact sync not implemented", "id", cmd.ID, "command", cmd.Name, "reason", cmd.Reason)
		return errArtifactSyncNotImplemented
	}
	client, err := binding.NewClient(cc)
	if err != nil {
		log.Error("invalid sidecar configuration", "error", err)
		return 2
	}
	log.Info("tether sidecar starting", "version", cc.SidecarVersion, "job", cc.JobID, "worker", cc.WorkerID,
		"trainJob", cfg.trainJob, "pod", cc.Pod.Namespace+"/"+cc.Pod.Name, "server", cc.ServerURL,
		"artifacts", cfg.artifactDir, "include", cfg.include, "exclude", cfg.exclude,
		"heartbeatInterval", cc.HeartbeatInterval)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- client.Run(ctx) }()

	select {
	case err := <-runErr:
		if err == nil {
			return 0
		}
		if !bindingEnded(err) {
			log.Error("tether sidecar stopping: the binding server refused it", "error", err, "permanent", binding.IsPermanent(err))
			return 1
		}
		// The binding finished, was revoked or taken over. A native sidecar
		// is restarted whenever it exits, even with 0, so it waits for the
		// pod's termination instead of crash-looping against a 410.
		log.Info("the binding ended; idle until the pod terminates", "reason", err)
		sig := <-sigs
		log.Info("tether sidecar stopped", "signal", signalName(sig))
		return 0
	case sig := <-sigs:
		stopSignals()
		name := signalName(sig)
		log.Info("tether sidecar stopping", "signal", name)
		fctx, fcancel := context.WithTimeout(context.Background(), finishTimeout)
		if err := client.Finish(fctx, name); err != nil {
			log.Warn("could not tell the server the pod is finishing", "error", err)
		}
		fcancel()
		cancel()
		select {
		case err := <-runErr:
			if err != nil {
				// E.g. the server closed the session in answer to
				// Finishing: expected while shutting down.
				log.Info("binding session ended during shutdown", "error", err)
			}
		case <-time.After(stopTimeout):
			log.Warn("heartbeats did not stop in time; exiting anyway")
		}
		log.Info("tether sidecar stopped")
		return 0
	}
}

// bindingEnded reports whether err says the binding is over (finished,
// revoked, or the worker's session taken over), as opposed to a refusal that
// a restart might fix (a token not yet valid, a server misconfiguration).
func bindingEnded(err error) bool {
	var pe *binding.PermanentError
	if !errors.As(err, &pe) {
		return false
	}
	switch {
	case pe.CloseCode == binding.CloseFinished, pe.CloseCode == binding.CloseRevoked, pe.CloseCode == binding.CloseReplaced:
		return true
	case pe.StatusCode == http.StatusGone:
		return true
	}
	return false
}

func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	}
	return sig.String()
}

// progressFunc reads progress for heartbeats and logs a read error once per
// distinct error, not on every heartbeat.
func progressFunc(r *binding.ProgressReader, log *slog.Logger) func() *binding.Progress {
	var mu sync.Mutex
	var lastErr string
	return func() *binding.Progress {
		p, err := r.Read()
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		mu.Lock()
		if msg != lastErr {
			if msg != "" {
				log.Warn("cannot read the progress file", "error", msg)
			} else if lastErr != "" {
				log.Info("progress file readable again")
			}
			lastErr = msg
		}
		mu.Unlock()
		return p
	}
}

func sidecarVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "dev"
}
