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

	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/sidecar/artifacts"
	"github.com/tether-dev/tether/pkg/sidecar/credentials"
	"github.com/tether-dev/tether/pkg/sidecar/session"
)

// EnvFlushBudget bounds the final flush on SIGTERM. The pod webhook always
// sets it, from the pod's terminationGracePeriodSeconds (the grace period
// less 5s, at least 5s); unset, the sidecar uses 25s, what the webhook gives
// a pod with the default 30s grace period.
const EnvFlushBudget = binding.EnvFlushBudget

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
}

// loadConfig reads and checks the environment. Every error names the
// variable at fault. It reads the token and CA files to check them, but never
// puts the token into an error.
func loadConfig(getenv func(string) string) (config, error) {
	var errs []error
	req := func(name string) string {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is not set; the sidecar expects the environment Tether's pod webhook injects", name))
		}
		return v
	}
	globs := func(name string) []string {
		gs, err := parseGlobs(getenv(name))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		return gs
	}
	duration := func(name string, def time.Duration) time.Duration {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s=%q: not a duration such as %s", name, v, def))
		case d <= 0:
			errs = append(errs, fmt.Errorf("%s=%q: must be positive", name, v))
		default:
			return d
		}
		return def
	}
	cfg := config{
		trainJob:     req(binding.EnvTrainJob),
		artifactDir:  req(binding.EnvArtifactDir),
		include:      globs(binding.EnvInclude),
		exclude:      globs(binding.EnvExclude),
		flushBudget:  duration(EnvFlushBudget, artifacts.DefaultFlushBudget),
		syncInterval: duration(EnvSyncInterval, artifacts.DefaultSyncInterval),
		settleTime:   duration(EnvSettleTime, artifacts.DefaultSettleTime),
	}
	switch v := strings.TrimSpace(getenv(EnvDirectUpload)); v {
	case "", "on":
		cfg.directUpload = true
	case "off":
	default:
		errs = append(errs, fmt.Errorf("%s=%q: want on or off", EnvDirectUpload, v))
	}
	switch v := strings.TrimSpace(getenv(EnvFileEvents)); v {
	case "", "on":
		cfg.fileEvents = true
	case "off":
	default:
		errs = append(errs, fmt.Errorf("%s=%q: want on or off", EnvFileEvents, v))
	}
	cfg.uploadWorkers = artifacts.DefaultWorkers
	if v := strings.TrimSpace(getenv(EnvUploadWorkers)); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > artifacts.MaxWorkers {
			errs = append(errs, fmt.Errorf("%s=%q: want the number of uploads at once, 1 to %d", EnvUploadWorkers, v, artifacts.MaxWorkers))
		} else {
			cfg.uploadWorkers = n
		}
	}
	c := &cfg.client
	c.JobID = req(binding.EnvJobID)
	c.WorkerID = req(binding.EnvWorkerID)
	c.ServerURL = req(binding.EnvServerURL)
	c.TokenFile = req(binding.EnvTokenFile)
	c.PodTokenFile = req(binding.EnvPodTokenFile)
	c.CAFile = req(binding.EnvCAFile)
	c.Pod = binding.PodIdentity{
		Name:      req(binding.EnvPodName),
		Namespace: req(binding.EnvPodNamespace),
		UID:       req(binding.EnvPodUID),
		Node:      getenv(binding.EnvNodeName), // empty until scheduled: optional
	}
	if v := req(binding.EnvHeartbeatInterval); v != "" {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s=%q: not a duration such as 10s", binding.EnvHeartbeatInterval, v))
		case d <= 0:
			errs = append(errs, fmt.Errorf("%s=%q: must be positive", binding.EnvHeartbeatInterval, v))
		default:
			c.HeartbeatInterval = d
		}
	}
	if v := strings.TrimSpace(getenv(binding.EnvNodeRank)); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n >= binding.MaxBoundNodes {
			errs = append(errs, fmt.Errorf("%s=%q: want the node rank, 0 to %d", binding.EnvNodeRank, v, binding.MaxBoundNodes-1))
		} else {
			cfg.nodeRank = n
		}
	}
	if v := getenv(EnvLogLevel); v != "" {
		if err := cfg.logLevel.UnmarshalText([]byte(v)); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want debug, info, warn or error", EnvLogLevel, v))
		}
	}
	if c.ServerURL != "" {
		if u, err := url.Parse(c.ServerURL); err != nil || u.Scheme != "https" || u.Host == "" {
			errs = append(errs, fmt.Errorf("%s=%q: want an https URL such as https://tether-control-plane.tether-system.svc:8443", binding.EnvServerURL, c.ServerURL))
		} else if u.Path != "" && u.Path != "/" {
			// The artifact endpoint is path-style at the listener's root.
			errs = append(errs, fmt.Errorf("%s=%q: must have no path: the artifact endpoint is at the server's root", binding.EnvServerURL, c.ServerURL))
		}
	}
	if c.TokenFile != "" {
		if err := checkToken(c.TokenFile); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", binding.EnvTokenFile, err))
		}
	}
	if c.PodTokenFile != "" {
		if _, err := credentials.ReadPodToken(c.PodTokenFile); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w (the pod's projected ServiceAccount token the webhook mounts)", binding.EnvPodTokenFile, err))
		}
	}
	if c.CAFile != "" {
		if err := checkCA(c.CAFile); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", binding.EnvCAFile, err))
		}
	}
	if cfg.artifactDir != "" {
		if st, err := os.Stat(cfg.artifactDir); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", binding.EnvArtifactDir, err))
		} else if !st.IsDir() {
			errs = append(errs, fmt.Errorf("%s: %s is not a directory", binding.EnvArtifactDir, cfg.artifactDir))
		}
	}
	return cfg, errors.Join(errs...)
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
