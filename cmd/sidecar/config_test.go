package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/checkpoint"
)

const testToken = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// testEnv is a complete, valid environment; caPEM is written as the CA file.
func testEnv(t *testing.T, serverURL, caPEM string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	artifacts := filepath.Join(dir, "artifacts")
	if err := os.Mkdir(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		names.EnvJobID:             "job-1",
		names.EnvWorkerID:          "worker-0",
		names.EnvTrainJob:          "mnist",
		names.EnvServerURL:         serverURL,
		names.EnvTokenFile:         write("token", testToken),
		names.EnvPodTokenFile:      write("pod-token", "eyJhbGciOiJSUzI1NiJ9.eyJhdWQiOlsidGV0aGVyLmRldi9iaW5kaW5nIl19.c2ln"),
		names.EnvCAFile:            write("ca.crt", caPEM),
		names.EnvArtifactDir:       artifacts,
		names.EnvHeartbeatInterval: "50ms",
		names.EnvPodName:           "mnist-node-0-0",
		names.EnvPodNamespace:      "team-a",
		names.EnvPodUID:            "uid-1",
		names.EnvNodeName:          "node-a",
	}
}

func getenv(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}

// selfSignedPEM is any parseable certificate, for configuration checks.
func selfSignedPEM(t *testing.T) string {
	t.Helper()
	_, caPEM := newStub(t, nil)
	return caPEM
}

func TestLoadConfig(t *testing.T) {
	env := testEnv(t, "https://tether.example:8443", selfSignedPEM(t))
	env[EnvLogLevel] = "debug"
	cfg, err := loadConfig(getenv(env))
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.client
	if c.JobID != "job-1" || c.WorkerID != "worker-0" || c.HeartbeatInterval != 50*time.Millisecond ||
		c.Pod != (binding.PodIdentity{Namespace: "team-a", Name: "mnist-node-0-0", UID: "uid-1", Node: "node-a"}) ||
		cfg.trainJob != "mnist" || cfg.logLevel != slog.LevelDebug {
		t.Errorf("config = %+v", cfg)
	}
	if ps := cfg.checkpoints.Patterns(); len(ps) != len(checkpoint.Default()) || ps[0].String() != checkpoint.Default()[0].String() {
		t.Errorf("checkpoint patterns %v, want the defaults", ps)
	}
	if cfg.include != nil || cfg.exclude != nil || cfg.flushBudget != 25*time.Second ||
		cfg.syncInterval != 10*time.Second || cfg.settleTime != 10*time.Second || !cfg.fileEvents || cfg.uploadWorkers != 8 || !cfg.directUpload {
		t.Errorf("defaults: %+v", cfg)
	}
	env[names.EnvInclude] = "ckpt/**, *.{safetensors,json}"
	env[names.EnvExclude] = "ckpt/tmp/**"
	env[EnvFlushBudget], env[EnvSyncInterval], env[EnvSettleTime] = "55s", "3s", "1m"
	env[EnvFileEvents], env[EnvUploadWorkers], env[EnvDirectUpload] = "off", "3", "off"
	env[binding.EnvCheckpointPattern] = " dcp "
	cfg, err = loadConfig(getenv(env))
	if err != nil {
		t.Fatal(err)
	}
	if ps := cfg.checkpoints.Patterns(); len(ps) != 1+len(checkpoint.Default()) || ps[0].String() != checkpoint.DCP.String() || len(ps[0].Required()) != 1 {
		t.Errorf("checkpoint patterns %v, want the DCP preset, then the defaults", ps)
	}
	if !slices.Equal(cfg.include, []string{"ckpt/**", "*.{safetensors,json}"}) || !slices.Equal(cfg.exclude, []string{"ckpt/tmp/**"}) ||
		cfg.flushBudget != 55*time.Second || cfg.syncInterval != 3*time.Second || cfg.settleTime != time.Minute ||
		cfg.fileEvents || cfg.uploadWorkers != 3 || cfg.directUpload {
		t.Errorf("config = %+v", cfg)
	}
	for _, k := range []string{names.EnvInclude, names.EnvExclude, EnvFlushBudget, EnvSyncInterval, EnvSettleTime, EnvFileEvents, EnvUploadWorkers, EnvDirectUpload, binding.EnvCheckpointPattern} {
		delete(env, k)
	}
	delete(env, names.EnvNodeName) // optional
	delete(env, EnvLogLevel)
	if cfg, err := loadConfig(getenv(env)); err != nil || cfg.logLevel != slog.LevelInfo {
		t.Errorf("without the optional variables: %v, level %v", err, cfg.logLevel)
	}
}

func TestLoadConfigNamesTheVariable(t *testing.T) {
	ca := selfSignedPEM(t)
	for _, tc := range []struct {
		name   string
		mutate func(t *testing.T, env map[string]string)
		want   string
	}{
		{"missing job", func(_ *testing.T, env map[string]string) { delete(env, names.EnvJobID) }, names.EnvJobID + " is not set"},
		{"missing pod uid", func(_ *testing.T, env map[string]string) { env[names.EnvPodUID] = " " }, names.EnvPodUID + " is not set"},
		{"bad interval", func(_ *testing.T, env map[string]string) { env[names.EnvHeartbeatInterval] = "often" }, names.EnvHeartbeatInterval + `="often"`},
		{"zero interval", func(_ *testing.T, env map[string]string) { env[names.EnvHeartbeatInterval] = "0s" }, "must be positive"},
		{"http", func(_ *testing.T, env map[string]string) { env[names.EnvServerURL] = "http://x" }, names.EnvServerURL},
		{"log level", func(_ *testing.T, env map[string]string) { env[EnvLogLevel] = "loud" }, EnvLogLevel},
		{"no token file", func(_ *testing.T, env map[string]string) { env[names.EnvTokenFile] = "/nonexistent/token" }, names.EnvTokenFile},
		{"missing pod token", func(_ *testing.T, env map[string]string) { delete(env, names.EnvPodTokenFile) }, names.EnvPodTokenFile + " is not set"},
		{"empty pod token", func(t *testing.T, env map[string]string) {
			if err := os.WriteFile(env[names.EnvPodTokenFile], []byte("\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, names.EnvPodTokenFile + ": "},
		{"bad token", func(t *testing.T, env map[string]string) {
			if err := os.WriteFile(env[names.EnvTokenFile], []byte("secret-but-malformed"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, names.EnvTokenFile + ": "},
		{"bad CA", func(t *testing.T, env map[string]string) {
			if err := os.WriteFile(env[names.EnvCAFile], []byte("junk"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, names.EnvCAFile + ": "},
		{"artifact dir", func(_ *testing.T, env map[string]string) { env[names.EnvArtifactDir] = "/nonexistent" }, names.EnvArtifactDir},
		{"server path", func(_ *testing.T, env map[string]string) { env[names.EnvServerURL] = "https://x:8443/tether" }, "must have no path"},
		{"include", func(_ *testing.T, env map[string]string) { env[names.EnvInclude] = "ckpt/**,a/[b" }, names.EnvInclude + `: glob "a/[b" is malformed`},
		{"exclude", func(_ *testing.T, env map[string]string) { env[names.EnvExclude] = "/abs/**" }, names.EnvExclude},
		{"empty glob", func(_ *testing.T, env map[string]string) { env[names.EnvExclude] = "a,,b" }, names.EnvExclude + ": empty glob"},
		{"flush budget", func(_ *testing.T, env map[string]string) { env[EnvFlushBudget] = "soon" }, EnvFlushBudget + `="soon"`},
		{"sync interval", func(_ *testing.T, env map[string]string) { env[EnvSyncInterval] = "-1s" }, EnvSyncInterval},
		{"settle time", func(_ *testing.T, env map[string]string) { env[EnvSettleTime] = "0" }, EnvSettleTime},
		{"direct upload", func(_ *testing.T, env map[string]string) { env[EnvDirectUpload] = "yes" }, EnvDirectUpload + `="yes": want on or off`},
		{"file events", func(_ *testing.T, env map[string]string) { env[EnvFileEvents] = "yes" }, EnvFileEvents + `="yes": want on or off`},
		{"upload workers", func(_ *testing.T, env map[string]string) { env[EnvUploadWorkers] = "0" }, EnvUploadWorkers + `="0"`},
		{"too many workers", func(_ *testing.T, env map[string]string) { env[EnvUploadWorkers] = "65" }, "1 to 64"},
		{"checkpoint pattern", func(_ *testing.T, env map[string]string) { env[binding.EnvCheckpointPattern] = "checkpoint/" },
			binding.EnvCheckpointPattern + `: checkpoint pattern "checkpoint/": 0 {step} placeholders, want exactly one`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testEnv(t, "https://tether.example:8443", ca)
			tc.mutate(t, env)
			_, err := loadConfig(getenv(env))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret-but-malformed") || strings.Contains(err.Error(), testToken) {
				t.Errorf("the error shows the token file's content: %v", err)
			}
		})
	}
}
