package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/checkpoint"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/sidecar/artifacts"
	"github.com/tether-dev/tether/pkg/sidecar/credentials"
	"github.com/tether-dev/tether/pkg/sidecar/session"
)

// EnvFlushBudget bounds the final flush on SIGTERM. The pod webhook always
// sets it, from the pod's terminationGracePeriodSeconds (the grace period
// less 5s, at least 5s); unset, the sidecar uses 25s, what the webhook gives
// a pod with the default 30s grace period.
const EnvFlushBudget = names.EnvFlushBudget

// Optional settings, not part of what the pod webhook injects.
const (
	// EnvLogLevel sets the log level: debug, info (default), warn or error.
	EnvLogLevel = "TETHER_LOG_LEVEL"
	// EnvSyncInterval is the time between two sync rounds (default 10s).
	EnvSyncInterval = "TETHER_SYNC_INTERVAL"
	// EnvSettleTime is how long a file must be unchanged to be uploaded
	// before the final flush (default 10s), when no file event says it is
	// complete: files never closed, or file events off or unavailable.
	EnvSettleTime = "TETHER_SETTLE_TIME"
	// EnvDirectUpload is "on" (default: files of 1 MiB or more go straight
	// to the store when the binding server offers it) or "off" (every file
	// through the binding server).
	EnvDirectUpload = "TETHER_DIRECT_UPLOAD"
	// EnvFileEvents: "on" (default) uploads a file as soon as the trainer
	// closes it after writing or renames it into place (inotify), falling
	// back to the settle rule when events are unavailable; "off" uses the
	// settle rule alone.
	EnvFileEvents = "TETHER_FILE_EVENTS"
	// EnvUploadWorkers is how many uploads run at once (default 8, at most
	// 64), and so the keep-alive connections kept to the server.
	EnvUploadWorkers = "TETHER_UPLOAD_WORKERS"
)

// config is everything the sidecar reads from its environment.
type config struct {
	client      session.Config // without Logger, Progress, OnCommand
	trainJob    string
	artifactDir string
	// include and exclude are the artifact globs (TETHER_INCLUDE and
	// TETHER_EXCLUDE split by jobconfig.SplitGlobs); nil means none.
	include, exclude []string
	// flushBudget bounds the final flush on SIGTERM; syncInterval and
	// settleTime shape the periodic sync.
	flushBudget, syncInterval, settleTime time.Duration
	// fileEvents uploads files on their close events (TETHER_FILE_EVENTS);
	// uploadWorkers bounds the uploads at once (TETHER_UPLOAD_WORKERS);
	// directUpload is TETHER_DIRECT_UPLOAD.
	fileEvents    bool
	uploadWorkers int
	directUpload  bool
	logLevel      slog.Level
	// nodeRank is the pod's node rank (TETHER_NODE_RANK; 0 when unset, as
	// from a webhook that bound node 0 only).
	nodeRank int
	// checkpoints finds the checkpoint heartbeats report: the pattern of
	// TETHER_CHECKPOINT_PATTERN, if set, then the default patterns.
	checkpoints *checkpoint.Detector
}

// loadConfig reads and checks the environment. Every error names the
// variable at fault. It reads the token and CA files to check them, but never
// puts the token into an error.
func loadConfig(getenv func(string) string) (config, error) {
	r := &envReader{getenv: getenv}
	cfg := config{
		trainJob:     r.required(names.EnvTrainJob),
		artifactDir:  r.required(names.EnvArtifactDir),
		include:      r.globs(names.EnvInclude),
		exclude:      r.globs(names.EnvExclude),
		flushBudget:  r.duration(EnvFlushBudget, artifacts.DefaultFlushBudget),
		syncInterval: r.duration(EnvSyncInterval, artifacts.DefaultSyncInterval),
		settleTime:   r.duration(EnvSettleTime, artifacts.DefaultSettleTime),
		directUpload: r.onOff(EnvDirectUpload),
		fileEvents:   r.onOff(EnvFileEvents),
		uploadWorkers: r.intIn(EnvUploadWorkers, artifacts.DefaultWorkers,
			1, artifacts.MaxWorkers, "the number of uploads at once"),
	}
	cfg.client = r.sessionConfig()
	cfg.nodeRank = r.intIn(names.EnvNodeRank, 0, 0, binding.MaxBoundNodes-1, "the node rank")
	cfg.checkpoints = r.checkpoints(binding.EnvCheckpointPattern)
	if v := getenv(EnvLogLevel); v != "" {
		if err := cfg.logLevel.UnmarshalText([]byte(v)); err != nil {
			r.fail("%s=%q: want debug, info, warn or error", EnvLogLevel, v)
		}
	}
	r.checkFiles(cfg)
	return cfg, errors.Join(r.errs...)
}

// sessionConfig reads what the binding session needs: who this worker is,
// where the server is, and the credentials to reach it.
func (r *envReader) sessionConfig() session.Config {
	c := session.Config{
		JobID:        r.required(names.EnvJobID),
		WorkerID:     r.required(names.EnvWorkerID),
		ServerURL:    r.required(names.EnvServerURL),
		TokenFile:    r.required(names.EnvTokenFile),
		PodTokenFile: r.required(names.EnvPodTokenFile),
		CAFile:       r.required(names.EnvCAFile),
		Pod: binding.PodIdentity{
			Name:      r.required(names.EnvPodName),
			Namespace: r.required(names.EnvPodNamespace),
			UID:       r.required(names.EnvPodUID),
			Node:      r.getenv(names.EnvNodeName), // empty until scheduled: optional
		},
	}
	if v := r.required(names.EnvHeartbeatInterval); v != "" {
		c.HeartbeatInterval = r.positiveDuration(names.EnvHeartbeatInterval, v, 10*time.Second, 0)
	}
	return c
}

// checkFiles checks what the settings point at: the server URL's shape, the
// token and CA files' contents, and that the artifact directory is one.
// Settings that are unset were reported already and are not checked again.
func (r *envReader) checkFiles(cfg config) {
	c := &cfg.client
	if c.ServerURL != "" {
		if u, err := url.Parse(c.ServerURL); err != nil || u.Scheme != "https" || u.Host == "" {
			r.fail("%s=%q: want an https URL such as https://tether-control-plane.tether-system.svc:8443", names.EnvServerURL, c.ServerURL)
		} else if u.Path != "" && u.Path != "/" {
			// The artifact endpoint is path-style at the listener's root.
			r.fail("%s=%q: must have no path: the artifact endpoint is at the server's root", names.EnvServerURL, c.ServerURL)
		}
	}
	if c.TokenFile != "" {
		if err := checkToken(c.TokenFile); err != nil {
			r.fail("%s: %w", names.EnvTokenFile, err)
		}
	}
	if c.PodTokenFile != "" {
		if _, err := credentials.ReadPodToken(c.PodTokenFile); err != nil {
			r.fail("%s: %w (the pod's projected ServiceAccount token the webhook mounts)", names.EnvPodTokenFile, err)
		}
	}
	if c.CAFile != "" {
		if err := checkCA(c.CAFile); err != nil {
			r.fail("%s: %w", names.EnvCAFile, err)
		}
	}
	if cfg.artifactDir != "" {
		if st, err := os.Stat(cfg.artifactDir); err != nil {
			r.fail("%s: %w", names.EnvArtifactDir, err)
		} else if !st.IsDir() {
			r.fail("%s: %s is not a directory", names.EnvArtifactDir, cfg.artifactDir)
		}
	}
}

// envReader reads settings from the environment, collecting one error per
// variable at fault so that a misconfigured pod learns everything at once.
type envReader struct {
	getenv func(string) string
	errs   []error
}

func (r *envReader) fail(format string, a ...any) {
	r.errs = append(r.errs, fmt.Errorf(format, a...))
}

// required is a variable the pod webhook always injects.
func (r *envReader) required(name string) string {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		r.fail("%s is not set; the sidecar expects the environment Tether's pod webhook injects", name)
	}
	return v
}

func (r *envReader) globs(name string) []string {
	gs, err := parseGlobs(r.getenv(name))
	if err != nil {
		r.fail("%s: %w", name, err)
	}
	return gs
}

// duration is an optional positive duration, def when unset or wrong.
func (r *envReader) duration(name string, def time.Duration) time.Duration {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		return def
	}
	return r.positiveDuration(name, v, def, def)
}

// positiveDuration parses v, the value of name; example is shown in the
// error, and orElse is returned when v is not a positive duration.
func (r *envReader) positiveDuration(name, v string, example, orElse time.Duration) time.Duration {
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		r.fail("%s=%q: not a duration such as %s", name, v, example)
	case d <= 0:
		r.fail("%s=%q: must be positive", name, v)
	default:
		return d
	}
	return orElse
}

// checkpoints is the detector of an optional checkpoint pattern, ahead of
// the default patterns; the defaults alone when unset or wrong.
func (r *envReader) checkpoints(name string) *checkpoint.Detector {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		return checkpoint.NewDetector()
	}
	p, err := checkpoint.ParsePattern(v)
	if err != nil {
		r.fail("%s: %w", name, err)
		return checkpoint.NewDetector()
	}
	return checkpoint.NewDetector(append([]checkpoint.Pattern{p}, checkpoint.Default()...)...)
}

// onOff is an optional switch, on when unset.
func (r *envReader) onOff(name string) bool {
	switch v := strings.TrimSpace(r.getenv(name)); v {
	case "", "on":
		return true
	case "off":
	default:
		r.fail("%s=%q: want on or off", name, v)
	}
	return false
}

// intIn is an optional integer from lo to hi, def when unset or wrong; what
// says what the number is.
func (r *envReader) intIn(name string, def, lo, hi int, what string) int {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		r.fail("%s=%q: want %s, %d to %d", name, v, what, lo, hi)
		return def
	}
	return n
}

// parseGlobs splits a glob list as the webhook injects it (the validated
// annotation globs joined with ",") and checks each glob.
func parseGlobs(list string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	return jobconfig.ParseGlobList(list)
}

func checkToken(path string) error {
	_, err := credentials.ReadToken(path)
	return err
}

func checkCA(path string) error {
	_, _, err := credentials.LoadCA(path)
	return err
}
