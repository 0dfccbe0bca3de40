# Tether. Every target works on a fresh machine with Go and the module proxy:
# control-plane binaries for tests are built by hack/testbin.sh and cached by
# version under ~/.cache/tether/testbin (override with TETHER_TESTBIN).

SHELL := /bin/bash
GO ?= go
TESTBIN := $(shell bash hack/testbin.sh --print-dir)
export KUBEBUILDER_ASSETS ?= $(TESTBIN)

# Version of the binaries and tag of the images: internal/version.Version
# unless given (make images VERSION=v0.2.0).
VERSION ?= $(shell sed -n 's/^var Version = "\(.*\)"$$/\1/p' internal/version/version.go)
# Platforms of `make images`, e.g. linux/amd64,linux/arm64 (default: this
# machine's GOARCH); several make each image a multi-platform OCI index.
IMAGE_PLATFORMS ?= linux/$(shell $(GO) env GOARCH)

# Benchmarks: how long each admission load phase runs (make bench only:
# make bench-smoke keeps the smoke size's own).
TETHER_BENCH_DURATION ?= 20s

.PHONY: all build images test python-test unit integration fuzz bench bench-smoke soak soak-ci demo e2e e2e-monitoring lint generate verify-generate testbin clean

all: build

## build: compile the control plane, the sidecar and the demo into bin/
build:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/ ./cmd/...

## images: OCI images of the control plane, the sidecar and the two test images
## (trainer stand-in, pause) without a container engine, into bin/images/ (OCI
## layout directories and tars, images.json); same commit, same digests
images:
	$(GO) run ./hack/images -out bin/images -version $(VERSION) -platforms $(IMAGE_PLATFORMS)

## testbin: build kube-apiserver, etcd, kubectl, versitygw and SeaweedFS (the two S3 servers of the store suites) and helm from the Go module proxy, promtool and the Python client's tools (python3-kubernetes, pytest, flake8, mypy) from Debian (cached)
testbin:
	bash hack/testbin.sh kube-apiserver etcd kubectl versitygw seaweedfs helm promtool python

## test: unit tests, golden files, the envtest integration suites (test/integration/python runs the
## Python client's integration tests), the Python client's unit tests, and a short fuzz run
test: testbin
	$(GO) test -count=1 ./...
	$(MAKE) python-test
	$(MAKE) fuzz FUZZTIME=100000x

## python-test: the Python client's unit tests (clients/python/tests; no cluster) with Debian's Python
## and the packages hack/testbin.sh python extracts
python-test:
	bash hack/testbin.sh python
	cd clients/python && PYTHONDONTWRITEBYTECODE=1 $(TESTBIN)/python3 -m pytest -p no:cacheprovider --ignore=tests/integration tests

# Fuzz targets, one per input an attacker or a trainer controls: protocol
# frames and tokens, artifact keys and manifests, progress lines, annotation
# settings, admission requests. The short run in `make test` is 100,000
# executions of each (about 2 minutes for all on 2 cores, warm build cache);
# it counts executions, not seconds: a wall-clock fuzz time on a loaded
# 2-core machine can end with the fuzzer's own "context deadline exceeded"
# instead of a verdict. A long run by hand, e.g. before a release:
#   make fuzz FUZZTIME=10m                     (every target 10 minutes)
#   make fuzz FUZZTIME=1h FUZZ_TARGETS=./pkg/mutate:FuzzPodHandler
# New inputs that found new coverage stay in the build cache's fuzz corpus;
# a failing input is written to the package's testdata/fuzz/ and reproduced
# by plain `go test`.
FUZZTIME ?= 100000x
FUZZ_TARGETS ?= ./pkg/binding:FuzzDecodeFrame ./pkg/binding:FuzzTokenFromHeader \
	./pkg/artifactstore/objects:FuzzCheckKey ./pkg/artifactstore/verify:FuzzParseManifest \
	./pkg/sidecar/progress:FuzzLastProgressLine ./pkg/jobconfig:FuzzParse ./pkg/checkpoint:FuzzParsePattern \
	./pkg/mutate:FuzzPodHandler ./pkg/mutate:FuzzTrainJobHandler
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
	  echo "fuzz $$fn ($$pkg) for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) $$pkg; done

unit:
	$(GO) test -count=1 $$($(GO) list ./... | grep -v /test/integration)

integration: testbin
	$(GO) test -count=1 -v ./test/integration/...

## e2e: the end-to-end suite on a full local cluster (etcd, kube-apiserver,
## kube-controller-manager, kube-scheduler, kwok, JobSet, Trainer v2.3.0 and
## v2.0.0, Kueue, versitygw and SeaweedFS; all built from the Go module proxy and cached)
## plus a real node (kubelet, containerd, Debian's runc) running the images
## of `make images`; first the real node alone and the cluster network alone
## (two real nodes with pod networking, kube-proxy, CoreDNS), then three
## lanes at once, each cluster on a network block of its own (hack/e2e.sh):
## the scenarios (the serial ones one at a time, then the shared ones
## together: test/e2e/phases_test.go); Tether installed from its chart on a
## cluster of its own (test/install: install, upgrade, drain, uninstall,
## quick start, node loss), then scenario 1 against SeaweedFS on a kwok-only
## cluster, then the short soak (soak-ci); and the monitoring scenario
## (make e2e-monitoring) on an install of its own
E2E_TIMEOUT ?= 30m
SOAK_CI = SEED=20261205 DURATION=240s JOBS=10 REAL_NODES=0
e2e: images
	bash hack/testbin.sh e2e network helm prometheus
	TETHER_E2E=1 $(GO) test -count=1 -v -timeout 10m -run '^(TestRealNodeAlone|TestClusterNetworkPlumbing|TestClusterNetwork)$$' ./test/framework/localcluster/
	GO=$(GO) E2E_TIMEOUT=$(E2E_TIMEOUT) SOAK_CI='$(SOAK_CI)' bash hack/e2e.sh

## soak: a seeded fault soak checked offline (test/soak): SEED=<n> replays a
## run, DURATION (default 4m) and JOBS (default 12) size it; REAL_NODES=1
## (the default; root) adds the two real nodes, jobs on them and node kills
REAL_NODES ?= 1
soak: images
	bash hack/testbin.sh e2e network
	TETHER_SOAK=1 SEED=$(SEED) DURATION=$(DURATION) JOBS=$(JOBS) REAL_NODES=$(REAL_NODES) $(GO) test -count=1 -v -timeout 90m -run '^TestSoak$$' ./test/soak/

## e2e-monitoring: Tether installed from its chart, scraped by a real
## Prometheus (Debian's) as the chart's ServiceMonitor describes, every
## dashboard query answered and every shipped alert made to fire and resolve
## (test/install TestPrometheusScrapesAndAlerts; about 15 minutes; make e2e
## runs it in a lane of its own)
e2e-monitoring: images
	bash hack/testbin.sh e2e network helm prometheus
	TETHER_E2E=1 TETHER_E2E_MONITORING=1 $(GO) test -count=1 -v -timeout 30m -run '^TestPrometheusScrapesAndAlerts$$' ./test/install/

## soak-ci: the short soak CI runs: a fixed seed, 10 jobs over 4 minutes, every fault kind
## at least once and two overlapping (it fails otherwise); kwok nodes only
## (make e2e runs it in the install lane, after test/install)
soak-ci:
	$(MAKE) soak $(SOAK_CI)

# The packages that hold a benchmark (test/performance/*, pkg/mutate): go test
# ./... would also link every other test binary and start the integration
# suites' control planes for nothing (several minutes on 2 cores).
BENCH_PKGS = $(sort $(dir $(shell grep -rl --include='*_test.go' --exclude-dir=.git --exclude-dir=testdata '^func Benchmark' .)))

## bench: Go benchmarks (figures via b.ReportMetric; nothing is asserted on time)
bench: testbin
	TETHER_BENCH_DURATION=$(TETHER_BENCH_DURATION) $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m $(BENCH_PKGS)

## bench-smoke: every benchmark of the module once at smoke size
## (TETHER_BENCH_SMOKE=1: small files, few jobs, short phases; a few
## minutes on 2 cores), end to end: a benchmark that no longer runs fails
## here (CI runs it); its figures mean nothing at that size
bench-smoke: testbin
	TETHER_BENCH_SMOKE=1 $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 15m $(BENCH_PKGS)

## demo: the main job on an embedded default: a full local cluster on loopback
## (no cluster or Docker needed); the first run builds exactly the binaries it
## runs (hack/testbin.sh's demo group: no real node, no Trainer v2.0.0, no S3)
demo:
	bash hack/testbin.sh demo
	$(GO) run ./cmd/tether-demo $(DEMO_ARGS)

## lint: go vet, gofmt, generated code up to date, golangci-lint (.golangci.yml),
## kube-api-linter on api/ (api/.golangci-kal.yml), shellcheck on hack/ and .ci/,
## helm lint of charts/tether (all built by hack/testbin.sh lint helm, cached by version),
## flake8 and mypy on the Python client (clients/python) and examples/python-orchestrator (Debian's, hack/testbin.sh python)
lint: verify-generate
	$(GO) vet ./...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	bash hack/testbin.sh lint helm
	$(TESTBIN)/golangci-lint run ./...
	cd api && $(TESTBIN)/golangci-lint-kube-api-linter run -c .golangci-kal.yml ./...
	$(TESTBIN)/shellcheck hack/*.sh .ci/run
	$(TESTBIN)/helm lint --strict charts/tether --namespace tether-system --kube-version 1.37.2
	bash hack/testbin.sh python
	cd clients/python && $(TESTBIN)/python3 -m flake8 tether tests ../../examples/python-orchestrator && $(TESTBIN)/python3 -m mypy --cache-dir=/dev/null tether ../../examples/python-orchestrator/orchestrator.py

## generate: deepcopy and the CRD from api/ (controller-gen, cached by version)
generate:
	bash hack/testbin.sh controller-gen
	$(TESTBIN)/controller-gen object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(TESTBIN)/controller-gen crd paths=./api/... output:crd:dir=manifests/base/crd
	@# The chart's CRD (crds/ is not templated): the same object kustomize renders, label included.
	sed 's|^metadata:$$|metadata:\n  labels:\n    app.kubernetes.io/part-of: tether|' manifests/base/crd/tether.dev_workerbindings.yaml >charts/tether/crds/tether.dev_workerbindings.yaml

verify-generate: generate
	@git diff --exit-code -- api manifests/base/crd charts/tether/crds || { echo "generated files are stale: run 'make generate' and commit"; exit 1; }

clean:
	rm -rf bin
