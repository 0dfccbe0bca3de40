// Command sidecar is the agent the pod webhook injects next to a bound
// TrainJob's trainer.
//
// It reads its configuration from the environment the webhook injects (see
// pkg/binding/sidecarenv.go), registers with the binding server, heartbeats
// with the trainer's progress (the optional progress file in the artifact
// directory) and the bytes of artifacts verified so far, and answers the
// server's commands, reconnecting with backoff whenever the connection is
// lost.
//
// Alongside, it syncs the artifact directory to the binding server's
// artifact endpoint (docs/artifacts.md, pkg/sidecar/artifacts): it uploads
// each file selected by TETHER_INCLUDE and TETHER_EXCLUDE as soon as the
// trainer closes it after writing or renames it into place (inotify;
// TETHER_FILE_EVENTS=off disables it), and every 10s (TETHER_SYNC_INTERVAL)
// the files whose size and mtime have been unchanged for 10s
// (TETHER_SETTLE_TIME): files never closed, or every file when file events
// are unavailable (the per-uid inotify limits used up: the log says so).
// Each file is one PUT verified by its ETag, TETHER_UPLOAD_WORKERS (8) at
// once. Heartbeats also carry the newest checkpoint whose every file is
// verified (pkg/checkpoint: checkpoint* and step* directories, and the
// layout TETHER_CHECKPOINT_PATTERN names). Commands:
// flush uploads the finished files now; drain and cancel upload every file
// and then the manifest. The command is acknowledged OK only when every file
// it covered was verified.
//
// On SIGTERM or SIGINT it tells the server the pod is finishing, uploads
// every remaining file and then the manifest within the flush budget
// (TETHER_FLUSH_BUDGET, default 25s, counted from the signal), logs what was
// verified and what is missing, and exits 0. The manifest is uploaded only
// when every artifact was verified; otherwise the controller sees no
// verified manifest and the logs name the missing files. When the binding
// ends (finished, revoked, or its session taken over) it stops syncing and
// idles until SIGTERM: a native sidecar is restarted whenever it exits. It
// exits 1 when its token or identity is refused (a restart re-reads the
// token) and 2 on a bad configuration; the last log line says why, and the
// kubelet shows it as the termination message. It never logs the token.
package main

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/tether-dev/tether/pkg/sidecar/artifacts"
	"github.com/tether-dev/tether/pkg/sidecar/progress"
	"github.com/tether-dev/tether/pkg/sidecar/session"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise the module version, if any, is used.
var version string

// Shutdown budget: a native sidecar gets SIGTERM after the trainer has
// stopped, within the pod's grace period (30s by default). Finishing and the
// final flush share the flush budget (TETHER_FLUSH_BUDGET); stopping the
// session takes at most stopTimeout more.
const (
	finishTimeout = 5 * time.Second
	stopTimeout   = 3 * time.Second
)

func main() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	os.Exit(run(os.Getenv, os.Stderr, sigs, func() { signal.Stop(sigs) }))
}

// run is the sidecar; it returns the exit code. stopSignals is called after
// the first signal so that a second one terminates the process at once.
func run(getenv func(string) string, stderr io.Writer, sigs <-chan os.Signal, stopSignals func()) int {
	cfg, cfgErr := loadConfig(getenv)
	log := newLogger(stderr, cfg.logLevel)
	if cfgErr != nil {
		log.Error("invalid sidecar configuration", "error", cfgErr)
		return 2
	}
	cc := cfg.client
	cc.SidecarVersion = sidecarVersion()
	cc.Logger = log
	cc.Progress = progressFunc(progress.NewReader(cfg.artifactDir), log)
	syncer, scanner, err := newSyncer(cfg, log)
	if err != nil {
		log.Error("invalid sidecar configuration", "error", err)
		return 2
	}
	defer scanner.Close()
	cc.UploadedBytes = syncer.UploadedBytes
	cc.ArtifactError = syncer.LastError
	cc.Skipped = syncer.Skipped
	cc.Checkpoint = syncer.Checkpoint
	cc.OnCommand = func(ctx context.Context, cmd binding.Command) error {
		return execute(ctx, syncer, cmd)
	}
	client, err := session.NewClient(cc)
	if err != nil {
		log.Error("invalid sidecar configuration", "error", err)
		return 2
	}
	log.Info("tether sidecar starting", "version", cc.SidecarVersion, "job", cc.JobID, "worker", cc.WorkerID,
		"trainJob", cfg.trainJob, "node", cfg.nodeRank, "pod", cc.Pod.Namespace+"/"+cc.Pod.Name, "server", cc.ServerURL,
		"artifacts", cfg.artifactDir, "include", cfg.include, "exclude", cfg.exclude,
		"heartbeatInterval", cc.HeartbeatInterval, "syncInterval", cfg.syncInterval, "settleTime", cfg.settleTime,
		"fileEvents", cfg.fileEvents, "uploadWorkers", cfg.uploadWorkers, "flushBudget", cfg.flushBudget)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- client.Run(ctx) }()
	syncCtx, stopSync := context.WithCancel(ctx)
	syncDone := make(chan struct{})
	go func() {
		defer close(syncDone)
		_ = syncer.Run(syncCtx)
	}()
	stopSyncing := func() {
		stopSync()
		<-syncDone
	}

	select {
	case err := <-runErr:
		// Uploads would be refused from now on (or the process exits).
		stopSyncing()
		if err == nil {
			return 0
		}
		if !bindingEnded(err) {
			log.Error("tether sidecar stopping: the binding server refused it", "error", err, "permanent", session.IsPermanent(err))
			return 1
		}
		// The binding finished, was revoked, or went on with another pod. A native sidecar
		// is restarted whenever it exits, even with 0, so it waits for the
		// pod's termination instead of crash-looping against a 410.
		log.Info("the binding ended; idle until the pod terminates", "reason", err)
		sig := <-sigs
		log.Info("tether sidecar stopped", "signal", signalName(sig))
		return 0
	case sig := <-sigs:
		stopSignals()
		name := signalName(sig)
		log.Info("tether sidecar stopping", "signal", name, "flushBudget", cfg.flushBudget)
		// The budget counts from the signal: finishing, then the final
		// flush. Heartbeats go on meanwhile, with the bytes verified.
		bctx, bcancel := context.WithTimeout(context.Background(), cfg.flushBudget)
		defer bcancel()
		fctx, fcancel := context.WithTimeout(bctx, finishTimeout)
		if err := client.Finish(fctx, name); err != nil {
			log.Warn("could not tell the server the pod is finishing", "error", err)
		}
		fcancel()
		// A periodic round in progress finishes its uploads (Flush waits
		// for it) but takes no new file.
		rep, err := syncer.Flush(bctx)
		logFinalReport(log, rep, err)
		if fin, ok := unverifiedReport(name, rep, err); ok {
			// Named on the binding: this log ends with the pod.
			rctx, rcancel := context.WithTimeout(bctx, finishTimeout)
			if err := client.FinishWith(rctx, fin); err != nil {
				log.Warn("could not report the unverified artifacts to the server", "error", err)
			}
			rcancel()
		}
		stopSyncing()
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

// newSyncer builds the artifact sync from the configuration.
func newSyncer(cfg config, log *slog.Logger) (*artifacts.Syncer, *artifacts.Scanner, error) {
	up, err := artifacts.NewUploader(artifacts.UploaderConfig{
		ServerURL:     cfg.client.ServerURL,
		JobID:         cfg.client.JobID,
		NodeRank:      cfg.nodeRank,
		TokenFile:     cfg.client.TokenFile,
		PodTokenFile:  cfg.client.PodTokenFile,
		CAFile:        cfg.client.CAFile,
		MaxConns:      cfg.uploadWorkers,
		Logger:        log,
		DirectMinSize: directMinSize(cfg.directUpload),
	})
	if err != nil {
		return nil, nil, err
	}
	sc, err := artifacts.NewScanner(artifacts.ScannerConfig{
		Dir:     cfg.artifactDir,
		Include: cfg.include,
		Exclude: cfg.exclude,
		Settle:  cfg.settleTime,
	})
	if err != nil {
		return nil, nil, err
	}
	sy, err := artifacts.NewSyncer(artifacts.SyncerConfig{
		Scanner:     sc,
		Uploader:    up,
		JobID:       cfg.client.JobID,
		PodUID:      cfg.client.Pod.UID,
		Interval:    cfg.syncInterval,
		Workers:     cfg.uploadWorkers,
		FileEvents:  cfg.fileEvents,
		Checkpoints: cfg.checkpoints,
		Logger:      log,
	})
	if err != nil {
		sc.Close()
		return nil, nil, err
	}
	return sy, sc, nil
}

// execute runs a command the server pushed; nil acknowledges it OK. A
// command delivered again (same id) is executed again: it is idempotent, as
// verified files are neither read nor sent twice.
func execute(ctx context.Context, syncer *artifacts.Syncer, cmd binding.Command) error {
	switch cmd.Name {
	case binding.CommandFlush:
		_, err := syncer.FlushNow(ctx)
		return err
	case binding.CommandDrain, binding.CommandCancel:
		_, err := syncer.Flush(ctx)
		return err
	}
	return fmt.Errorf("unsupported command %q", cmd.Name)
}

// logFinalReport logs the outcome of the final flush: what was verified and
// what is missing, each missing file with its error.
func logFinalReport(log *slog.Logger, rep *artifacts.Report, err error) {
	if rep == nil {
		log.Error("final artifact flush failed", "error", err)
		return
	}
	if err == nil {
		log.Info("artifacts complete: every file verified, manifest uploaded", "files", len(rep.Verified),
			"manifest", rep.Manifest, "uploadedFiles", rep.Uploaded, "uploadedBytes", rep.UploadedBytes)
		return
	}
	const maxListed = 20
	for i, f := range rep.Failed {
		if i == maxListed {
			log.Error("more artifacts missing", "count", len(rep.Failed)-maxListed)
			break
		}
		log.Error("artifact missing", "path", f.Path, "error", f.Error())
	}
	log.Error("artifacts incomplete: no verified manifest", "verified", len(rep.Verified), "missing", len(rep.Missing),
		"error", err)
}

// unverifiedReport is the Finishing payload that names what the final flush
// left unverified (ok=false when it verified everything).
func unverifiedReport(reason string, rep *artifacts.Report, flushErr error) (binding.Finishing, bool) {
	if flushErr == nil || rep == nil || len(rep.Missing) == 0 {
		return binding.Finishing{}, false
	}
	msg := flushErr.Error()
	if len(rep.Failed) > 0 {
		msg = rep.Failed[0].Error()
	}
	// Session.FinishWith keeps it within the protocol's bounds.
	skipped := make([]binding.SkippedEntry, len(rep.Skipped))
	for i, f := range rep.Skipped {
		skipped[i] = binding.SkippedEntry{Path: f.Path, Reason: f.Reason}
	}
	return binding.Finishing{Reason: reason, Unverified: rep.Missing, UnverifiedCount: len(rep.Missing), ArtifactError: msg,
		Skipped: skipped, SkippedCount: len(skipped)}, true
}

// bindingEnded reports whether err says the binding is over for this pod
// (finished, revoked, or the node has another registered pod: a session
// taken over is not that, session.Client opens it again), as opposed to a
// refusal that a restart might fix (a token not yet valid, a server
// misconfiguration).
func bindingEnded(err error) bool {
	var pe *session.PermanentError
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
func progressFunc(r *progress.Reader, log *slog.Logger) func() *binding.Progress {
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

// directMinSize is the uploader's DirectMinSize for TETHER_DIRECT_UPLOAD:
// the default threshold, or negative (every file through the binding
// server).
func directMinSize(direct bool) int64 {
	if direct {
		return 0
	}
	return -1
}
