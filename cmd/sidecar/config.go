package main

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/tether-dev/tether/pkg/binding"
)

// EnvLogLevel optionally sets the log level: debug, info (default), warn or
// error. It is not part of what the pod webhook injects.
const EnvLogLevel = "TETHER_LOG_LEVEL"

// config is everything the sidecar reads from its environment.
type config struct {
	client      binding.ClientConfig // without Logger, Progress, OnCommand
	trainJob    string
	artifactDir string
	// include and exclude are for artifact sync, which is not implemented
	// yet; they are only logged.
	include, exclude string
	logLevel         slog.Level
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
	cfg := config{
		trainJob:    req(binding.EnvTrainJob),
		artifactDir: req(binding.EnvArtifactDir),
		include:     getenv(binding.EnvInclude),
		exclude:     getenv(binding.EnvExclude),
	}
	c := &cfg.client
	c.JobID = req(binding.EnvJobID)
	c.WorkerID = req(binding.EnvWorkerID)
	c.ServerURL = req(binding.EnvServerURL)
	c.TokenFile = req(binding.EnvTokenFile)
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
	if v := getenv(EnvLogLevel); v != "" {
		if err := cfg.logLevel.UnmarshalText([]byte(v)); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want debug, info, warn or error", EnvLogLevel, v))
		}
	}
	if c.ServerURL != "" {
		if u, err := url.Parse(c.ServerURL); err != nil || u.Scheme != "https" || u.Host == "" {
			errs = append(errs, fmt.Errorf("%s=%q: want an https URL such as https://tether-control-plane.tether-system.svc:8443", binding.EnvServerURL, c.ServerURL))
		}
	}
	if c.TokenFile != "" {
		if err := checkToken(c.TokenFile); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", binding.EnvTokenFile, err))
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

func checkToken(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, binding.MaxTokenLength+64))
	if err != nil {
		return err
	}
	h := http.Header{binding.HeaderAuthorization: {"Bearer " + strings.TrimSpace(string(b))}}
	if _, err := binding.TokenFromHeader(h); err != nil {
		return fmt.Errorf("%s does not hold a 64-character lowercase hex token", path)
	}
	return nil
}

func checkCA(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return fmt.Errorf("%s holds no PEM certificate", path)
	}
	return nil
}
