#!/usr/bin/env bash
# Builds the control-plane binaries Tether's tests run against, from the Go
# module proxy only (no prebuilt downloads exist on this network).
#
#   hack/testbin.sh [component...]     default: kube-apiserver etcd kubectl
#   hack/testbin.sh --print-dir        prints the directory to use as KUBEBUILDER_ASSETS
#   hack/testbin.sh --print-group demo prints the components of the demo group (builds nothing)
#
# Binaries are cached by version under $TETHER_TESTBIN (default
# ~/.cache/tether/testbin/<component>-<version>/<component>); a cached binary is
# never rebuilt, so the script is idempotent and a warm run takes milliseconds.
# A per-version "current" directory of symlinks is what tests point at.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
CONTROLLER_TOOLS_VERSION=${CONTROLLER_TOOLS_VERSION:-v0.20.1}
VERSITYGW_VERSION=${VERSITYGW_VERSION:-v1.8.0}
# The second S3 server of the store suites (test/framework/s3server): SeaweedFS's
# weed, a pseudo-version (the module proxy serves no tag of it). Its go.mod
# has replace directives, so it is built in a wrapper module that copies
# them; it has no build tags that leave out back ends (the optional ones,
# e.g. rocksdb or tikv, are opt-in), so the default weed is what is built.
SEAWEEDFS_VERSION=${SEAWEEDFS_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}
# The full local cluster of the e2e suite: kwok's fake nodes, JobSet, Trainer
# and Kueue beside the control plane, every listener on loopback.
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
JOBSET_VERSION=${JOBSET_VERSION:-v0.12.0}
TRAINER_VERSION=${TRAINER_VERSION:-v2.3.0}
# The oldest Trainer the injector supports, run next to v2.3.0 (test/framework/localcluster/trainer_v20.go).
TRAINER_V20_VERSION=v2.0.0
KUEUE_VERSION=${KUEUE_VERSION:-v0.17.0}
# The Helm chart's lint, render and install (charts/tether). A binary, not the
# SDK in Tether's module: helm v3.22 requires k8s.io/* v0.37, Tether is on v0.36.
HELM_VERSION=${HELM_VERSION:-v3.22.0}
# make lint: golangci-lint v2 and kube-api-linter's standalone binary (a
# pseudo-version: the module has no tags); promtool and shellcheck from Debian.
# Debian's prometheus package also gives test/install its Prometheus server.
GOLANGCI_LINT_VERSION=${GOLANGCI_LINT_VERSION:-v2.15.0}
KUBE_API_LINTER_VERSION=${KUBE_API_LINTER_VERSION:-v0.0.0-20260716143926-092fe0c72997}
DEBIAN_PROMETHEUS=${DEBIAN_PROMETHEUS:-prometheus}
DEBIAN_SHELLCHECK=${DEBIAN_SHELLCHECK:-shellcheck}
# The real node of the e2e suite (test/framework/localcluster/node.go):
# kubelet from the Kubernetes wrapper module, containerd 2.x from the module
# proxy, runc and the CNI loopback plugin from Debian (runc needs cgo and
# libseccomp: Debian's build enforces seccomp, a CGO_ENABLED=0 build would
# not).
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
DEBIAN_RUNC=${DEBIAN_RUNC:-runc}
DEBIAN_CNI=${DEBIAN_CNI:-containernetworking-plugins}
# The two-node cluster network (test/framework/localcluster/network.go):
# kube-proxy from the Kubernetes wrapper module, CoreDNS built as a main of our
# own with only the plugins the cluster uses (its default set pulls in cloud
# SDKs), and Debian's nft with the shared libraries it links.
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}
DEBIAN_NFT_PACKAGES=${DEBIAN_NFT_PACKAGES:-nftables libnftables1 libnftnl11 libmnl0 libjansson4 libxtables12}
# The demo group: exactly what a kwok-only cluster (localcluster.Start with
# Kueue, Trainer v2.3.0, no real node; `make demo`) execs. cmd/tether-demo's
# test checks it against localcluster.Options.Components.
DEMO_COMPONENTS=(kube-apiserver etcd kubectl kube-controller-manager kube-scheduler kwok jobset trainer-controller-manager kueue)
ROOT=${TETHER_TESTBIN:-${XDG_CACHE_HOME:-$HOME/.cache}/tether/testbin}
CURRENT="$ROOT/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"

log() { printf '[testbin %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ "${1:-}" == "--print-dir" ]]; then echo "$CURRENT"; exit 0; fi
if [[ "${1:-}" == "--print-group" ]]; then
  case "${2:-}" in
    demo) echo "${DEMO_COMPONENTS[*]}"; exit 0 ;;
    *) log "--print-group: unknown group ${2:-} (known: demo)"; exit 2 ;;
  esac
fi

components=("$@")
[[ ${#components[@]} -gt 0 ]] || components=(kube-apiserver etcd kubectl)

mkdir -p "$ROOT" "$CURRENT"

# k8s_wrapper writes a module that requires k8s.io/kubernetes and replaces each
# staging module with its published tag (kubernetes' own go.mod points them at
# ./staging, which `go install pkg@version` refuses).
k8s_wrapper() {
  local dir="$ROOT/src/kubernetes-$K8S_VERSION"
  if [[ ! -f "$dir/.ready" ]]; then
    log "preparing wrapper module for k8s.io/kubernetes $K8S_VERSION"
    mkdir -p "$dir"
    local gomod
    gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    local staging="v0${K8S_VERSION#v1}"
    {
      echo "module tether.dev/testbin/kubernetes"
      echo
      echo "go 1.26.0"
      echo
      echo "require k8s.io/kubernetes $K8S_VERSION"
      echo
      echo "replace ("
      grep -E '^\s+k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" \
        | awk '{print $1}' | grep -vE 'sample-cli-plugin|sample-controller' \
        | while read -r m; do echo "	$m => $m $staging"; done
      echo ")"
    } >"$dir/go.mod"
    cat >"$dir/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubectl/pkg/cmd"
)
GO
    (cd "$dir" && { GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true; })
    (cd "$dir" && GOFLAGS=-mod=mod go get "k8s.io/kubernetes@$K8S_VERSION" >&2)
    touch "$dir/.ready"
  fi
  echo "$dir"
}

etcd_wrapper() {
  local dir="$ROOT/src/etcd-$ETCD_VERSION"
  if [[ ! -f "$dir/.ready" ]]; then
    log "preparing wrapper module for etcd $ETCD_VERSION"
    mkdir -p "$dir"
    cat >"$dir/go.mod" <<MOD
module tether.dev/testbin/etcd

go 1.26.0

require go.etcd.io/etcd/server/v3 $ETCD_VERSION

replace (
	go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/pkg/v3 => go.etcd.io/etcd/client/pkg/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/v3 => go.etcd.io/etcd/client/v3 $ETCD_VERSION
	go.etcd.io/etcd/pkg/v3 => go.etcd.io/etcd/pkg/v3 $ETCD_VERSION
)
MOD
    (cd "$dir" && GOFLAGS=-mod=mod go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2)
    touch "$dir/.ready"
  fi
  echo "$dir"
}

# jobset_wrapper: JobSet's version list is refused by the proxy, so its exact
# version is required from a wrapper module and its main package built there.
jobset_wrapper() {
  local dir="$ROOT/src/jobset-$JOBSET_VERSION"
  if [[ ! -f "$dir/.ready" ]]; then
    log "preparing wrapper module for sigs.k8s.io/jobset $JOBSET_VERSION"
    mkdir -p "$dir"
    printf 'module tether.dev/testbin/jobset\n\ngo 1.26.0\n\nrequire sigs.k8s.io/jobset %s\n' "$JOBSET_VERSION" >"$dir/go.mod"
    (cd "$dir" && GOFLAGS=-mod=mod go get "sigs.k8s.io/jobset@$JOBSET_VERSION" >&2)
    touch "$dir/.ready"
  fi
  echo "$dir"
}

# seaweedfs_wrapper writes a module that requires SeaweedFS and repeats the
# replace directives of its go.mod (a replace applies only in the main
# module, and `go install pkg@version` refuses a module that has any).
seaweedfs_wrapper() {
  local dir="$ROOT/src/seaweedfs-$SEAWEEDFS_VERSION" m=github.com/seaweedfs/seaweedfs
  if [[ ! -f "$dir/.ready" ]]; then
    log "preparing wrapper module for $m $SEAWEEDFS_VERSION"
    mkdir -p "$dir"
    local gomod
    gomod=$(go mod download -json "$m@$SEAWEEDFS_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    {
      printf 'module tether.dev/testbin/seaweedfs\n\ngo 1.26.0\n\nrequire %s %s\n\n' "$m" "$SEAWEEDFS_VERSION"
      # Both forms: single-line replaces and the lines of a replace block.
      grep -E '^replace [^(]' "$gomod" || true
      awk '/^replace \($/ {b=1; print; next} b && /^\)/ {b=0; print; next} b {print}' "$gomod"
    } >"$dir/go.mod"
    (cd "$dir" && GOFLAGS=-mod=mod go get "$m@$SEAWEEDFS_VERSION" >&2)
    touch "$dir/.ready"
  fi
  echo "$dir"
}

# seaweedfs builds weed (one binary: `weed server` runs master, volume
# server, filer and S3 gateway), cached as $ROOT/seaweedfs-<version>/weed.
seaweedfs() {
  local dir="$ROOT/seaweedfs-$SEAWEEDFS_VERSION" m=github.com/seaweedfs/seaweedfs
  if [[ -x "$dir/weed" ]]; then
    log "seaweedfs $SEAWEEDFS_VERSION: cached ($dir/weed)"
  else
    local wrapper
    wrapper=$(seaweedfs_wrapper)
    log "seaweedfs $SEAWEEDFS_VERSION: building $m/weed (one-time, ~9 min cold on 2 cores)"
    local start=$SECONDS commit=${SEAWEEDFS_VERSION##*-}
    mkdir -p "$dir"
    (cd "$wrapper" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X $m/weed/util/version.COMMIT=$commit" -o "$dir/weed.tmp" "$m/weed")
    mv "$dir/weed.tmp" "$dir/weed"
    log "seaweedfs $SEAWEEDFS_VERSION: built in $((SECONDS - start))s"
  fi
  ln -sfn "$dir/weed" "$CURRENT/weed"
}

# coredns_wrapper writes a module whose main links CoreDNS's core and only the
# plugins the local cluster's Corefile uses (test/framework/localcluster/coredns.go):
# no forward, no cloud back ends.
coredns_wrapper() {
  local dir="$ROOT/src/coredns-$COREDNS_VERSION"
  if [[ ! -f "$dir/.ready" ]]; then
    log "preparing wrapper module for github.com/coredns/coredns $COREDNS_VERSION"
    mkdir -p "$dir"
    printf 'module tether.dev/testbin/coredns\n\ngo 1.26.0\n\nrequire github.com/coredns/coredns %s\n' "$COREDNS_VERSION" >"$dir/go.mod"
    cat >"$dir/main.go" <<'GO'
// Command coredns is CoreDNS with the plugins Tether's local cluster uses.
package main

import (
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"

	"github.com/coredns/coredns/coremain"
)

func main() { coremain.Run() }
GO
    # tidy, not `go get` of the module: that would fetch every default plugin's SDKs.
    (cd "$dir" && GOFLAGS=-mod=mod go mod tidy >&2)
    touch "$dir/.ready"
  fi
  echo "$dir"
}

build() {
  local name=$1 version=$2 wrapper=$3 pkg=$4 ldflags=${5:-}
  local out="$ROOT/$name-$version/$name"
  if [[ -x "$out" ]]; then
    log "$name $version: cached ($out)"
  else
    log "$name $version: building $pkg (one-time)"
    local start=$SECONDS
    mkdir -p "$ROOT/$name-$version"
    (cd "$wrapper" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp" "$pkg")
    mv "$out.tmp" "$out"
    log "$name $version: built in $((SECONDS - start))s"
  fi
  ln -sfn "$out" "$CURRENT/$name"
}

# tool installs a developer tool that `go install pkg@version` can build as is; an optional
# fourth argument names its link in $CURRENT (default: the binary's name).
tool() {
  local name=$1 version=$2 pkg=$3 link=${4:-$1}
  local out="$ROOT/$name-$version/$name"
  if [[ -x "$out" ]]; then
    log "$name $version: cached ($out)"
  else
    log "$name $version: installing $pkg@$version (one-time)"
    GOBIN="$ROOT/$name-$version" CGO_ENABLED=0 go install "$pkg@$version"
  fi
  ln -sfn "$out" "$CURRENT/$link"
}

k8s_ldflags() {
  local v=$K8S_VERSION
  local minor=${v#v1.}; minor=${minor%%.*}
  echo "-X k8s.io/component-base/version.gitVersion=$v -X k8s.io/client-go/pkg/version.gitVersion=$v \
-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
-X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/component-base/version.buildDate=2026-01-01T00:00:00Z"
}

# containerd builds containerd, its runc shim and ctr in one `go install`
# (containerd's go.mod has no replace directives). The graph drivers that
# need cgo are left out, as containerd's own static release does.
containerd() {
  local dir="$ROOT/containerd-$CONTAINERD_VERSION"
  if [[ -x "$dir/containerd" && -x "$dir/containerd-shim-runc-v2" && -x "$dir/ctr" ]]; then
    log "containerd $CONTAINERD_VERSION: cached ($dir)"
  else
    log "containerd $CONTAINERD_VERSION: building containerd, containerd-shim-runc-v2, ctr (one-time, ~4-5 min cold)"
    local start=$SECONDS m=github.com/containerd/containerd/v2
    GOBIN="$dir" CGO_ENABLED=0 go install -trimpath -tags "no_btrfs no_devmapper no_zfs urfave_cli_no_docs" \
      -ldflags "-s -w -X $m/version.Version=$CONTAINERD_VERSION -X $m/version.Package=$m" \
      "$m/cmd/containerd@$CONTAINERD_VERSION" "$m/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" "$m/cmd/ctr@$CONTAINERD_VERSION"
    log "containerd $CONTAINERD_VERSION: built in $((SECONDS - start))s"
  fi
  local b
  for b in containerd containerd-shim-runc-v2 ctr; do ln -sfn "$dir/$b" "$CURRENT/$b"; done
}

# debian_pkg extracts a Debian package (apt-get download + dpkg-deb -x, nothing
# installed system-wide) into $ROOT/debian/<package>-<version> and prints
# that directory. The version is the one apt would install today.
debian_pkg() {
  local pkg=$1 version
  command -v apt-get >/dev/null || { log "$pkg: apt-get not found: the real node needs Debian's $pkg (install it, or run on Debian)"; exit 1; }
  version=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')
  if [[ -z "$version" || "$version" == "(none)" ]]; then
    log "$pkg: no candidate in apt's lists; running apt-get update"
    apt-get update -qq >&2 || { log "$pkg: apt-get update failed (Debian's package mirror must be reachable)"; exit 1; }
    version=$(apt-cache policy "$pkg" | awk '/Candidate:/ {print $2}')
  fi
  local dir="$ROOT/debian/$pkg-${version//[:~+]/_}"
  if [[ ! -f "$dir/.ready" ]]; then
    log "$pkg $version: downloading from Debian (one-time)"
    local tmp
    tmp=$(mktemp -d)
    (cd "$tmp" && apt-get download -qq -o APT::Sandbox::User=root "$pkg=$version" >&2) || { rm -rf "$tmp"; log "$pkg: apt-get download failed"; exit 1; }
    mkdir -p "$dir"
    dpkg-deb -x "$tmp"/*.deb "$dir"
    rm -rf "$tmp"
    touch "$dir/.ready"
  else
    log "$pkg $version: cached ($dir)"
  fi
  echo "$dir"
}

# nft extracts Debian's nftables and the libraries it links that a base system
# lacks, and writes $ROOT/nft-<version>/nft: a script that runs the extracted
# binary with those libraries first (kube-proxy's nftables mode runs `nft`
# from PATH). Nothing is installed system-wide.
nft() {
  local d libs="" pkg version real
  for pkg in $DEBIAN_NFT_PACKAGES; do
    d=$(debian_pkg "$pkg")
    [[ "$pkg" == nftables ]] && { version=${d##*/nftables-}; real="$d/usr/sbin/nft"; }
    libs="$libs${libs:+:}$d/usr/lib/$(uname -m)-linux-gnu"
  done
  local dir="$ROOT/nft-$version"
  if [[ ! -x "$dir/nft" ]]; then
    mkdir -p "$dir"
    # shellcheck disable=SC2016 # $LD_LIBRARY_PATH and $@ are the script's own, expanded when it runs
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' "$libs" "$real" >"$dir/nft.tmp"
    chmod +x "$dir/nft.tmp"
    "$dir/nft.tmp" --version >&2 || { log "nft $version: the extracted binary does not run (a shared library missing? add its package to DEBIAN_NFT_PACKAGES)"; exit 1; }
    mv "$dir/nft.tmp" "$dir/nft"
    log "nft $version: ready ($dir/nft)"
  else
    log "nft $version: cached ($dir/nft)"
  fi
  ln -sfn "$dir/nft" "$CURRENT/nft"
}

# The Python client's tools (clients/python): Debian's python3-kubernetes
# (the client's one dependency), pytest, flake8 and mypy, with every Python
# package they depend on that this machine's Debian Python lacks, each
# extracted by debian_pkg (nothing installed system-wide). Writes
# $ROOT/python-<kubernetes version>/python3: /usr/bin/python3 with their
# dist-packages on PYTHONPATH; `python3 -m pytest|flake8|mypy` run the tools.
DEBIAN_PYTHON_ROOTS=${DEBIAN_PYTHON_ROOTS:-python3-kubernetes python3-pytest python3-flake8 python3-mypy}
python_deps() {
  # Breadth-first over Depends (first alternatives included), keeping the
  # Python packages dpkg does not list as installed.
  local -A seen=()
  local todo=("$@") p d
  while ((${#todo[@]})); do
    p=${todo[0]}; todo=("${todo[@]:1}")
    [[ -n "${seen[$p]:-}" ]] && continue
    seen[$p]=1
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' && continue
    echo "$p"
    for d in $(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances "$p" 2>/dev/null \
      | awk '/Depends:/ {print $2}' | grep -E '^python3-'); do
      todo+=("$d")
    done
  done
}
python_tools() {
  local pkgs roots p d path="" version
  command -v apt-cache >/dev/null || { log "python: apt-cache not found: the Python client's tests need Debian's python3-kubernetes (run on Debian 12)"; exit 1; }
  [[ -x /usr/bin/python3 ]] || { log "python: /usr/bin/python3 not found (Debian's python3)"; exit 1; }
  version=$(apt-cache policy python3-kubernetes 2>/dev/null | awk '/Candidate:/ {print $2}')
  if [[ -z "$version" || "$version" == "(none)" ]]; then
    apt-get update -qq >&2 || { log "python: apt-get update failed (Debian's package mirror must be reachable)"; exit 1; }
    version=$(apt-cache policy python3-kubernetes | awk '/Candidate:/ {print $2}')
  fi
  local dir="$ROOT/python-${version//[:~+]/_}"
  if [[ ! -x "$dir/python3" ]]; then
    read -ra roots <<<"$DEBIAN_PYTHON_ROOTS"
    mapfile -t pkgs < <(python_deps "${roots[@]}")
    for p in "${pkgs[@]}"; do
      d=$(debian_pkg "$p")
      [[ -d "$d/usr/lib/python3/dist-packages" ]] && path="$path${path:+:}$d/usr/lib/python3/dist-packages"
    done
    mkdir -p "$dir"
    # shellcheck disable=SC2016 # $PYTHONPATH and $@ are the wrapper's own, expanded when it runs
    printf '#!/bin/sh\nPYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH} exec /usr/bin/python3 "$@"\n' "$path" >"$dir/python3.tmp"
    chmod +x "$dir/python3.tmp"
    "$dir/python3.tmp" -c 'import kubernetes, pytest, flake8, mypy' >&2 || { log "python: the extracted packages do not import (a dependency missing? add it to DEBIAN_PYTHON_ROOTS)"; exit 1; }
    mv "$dir/python3.tmp" "$dir/python3"
    log "python (python3-kubernetes $version): ready ($dir/python3)"
  else
    log "python (python3-kubernetes $version): cached ($dir/python3)"
  fi
  ln -sfn "$dir/python3" "$CURRENT/python3"
}

for c in "${components[@]}"; do
  case "$c" in
    kube-apiserver|kube-controller-manager|kube-scheduler)
      build "$c" "$K8S_VERSION" "$(k8s_wrapper)" "k8s.io/kubernetes/cmd/$c" "$(k8s_ldflags)" ;;
    kubelet)
      build kubelet "$K8S_VERSION" "$(k8s_wrapper)" "k8s.io/kubernetes/cmd/kubelet" "$(k8s_ldflags)" ;;
    containerd)
      containerd ;;
    runc)
      d=$(debian_pkg "$DEBIAN_RUNC"); ln -sfn "$d/usr/sbin/runc" "$CURRENT/runc" ;;
    cni-plugins)
      d=$(debian_pkg "$DEBIAN_CNI"); ln -sfn "$d/usr/lib/cni" "$CURRENT/cni" ;;
    node)
      "$0" kubelet containerd runc cni-plugins ;;
    kube-proxy)
      build kube-proxy "$K8S_VERSION" "$(k8s_wrapper)" "k8s.io/kubernetes/cmd/kube-proxy" "$(k8s_ldflags)" ;;
    coredns)
      build coredns "$COREDNS_VERSION" "$(coredns_wrapper)" tether.dev/testbin/coredns ;;
    nft)
      nft ;;
    network)
      "$0" node kube-proxy coredns nft ;;
    kubectl)
      build kubectl "$K8S_VERSION" "$(k8s_wrapper)" "k8s.io/kubernetes/cmd/kubectl" "$(k8s_ldflags)" ;;
    etcd)
      build etcd "$ETCD_VERSION" "$(etcd_wrapper)" "go.etcd.io/etcd/server/v3" ;;
    controller-gen)
      tool controller-gen "$CONTROLLER_TOOLS_VERSION" sigs.k8s.io/controller-tools/cmd/controller-gen ;;
    versitygw)
      tool versitygw "$VERSITYGW_VERSION" github.com/versity/versitygw/cmd/versitygw ;;
    seaweedfs)
      seaweedfs ;;
    kwok)
      tool kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok ;;
    trainer-controller-manager)
      tool trainer-controller-manager "$TRAINER_VERSION" github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager ;;
    trainer-controller-manager-v2.0.0)
      # Cached as $ROOT/trainer-controller-manager-v2.0.0/trainer-controller-manager and linked
      # as $CURRENT/trainer-controller-manager-v2.0.0, next to the default-version manager.
      tool trainer-controller-manager "$TRAINER_V20_VERSION" github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager \
        "trainer-controller-manager-$TRAINER_V20_VERSION" ;;
    kueue)
      tool kueue "$KUEUE_VERSION" sigs.k8s.io/kueue/cmd/kueue ;;
    jobset)
      build jobset "$JOBSET_VERSION" "$(jobset_wrapper)" sigs.k8s.io/jobset ;;
    helm)
      tool helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm ;;
    golangci-lint)
      tool golangci-lint "$GOLANGCI_LINT_VERSION" github.com/golangci/golangci-lint/v2/cmd/golangci-lint ;;
    kube-api-linter)
      tool golangci-lint-kube-api-linter "$KUBE_API_LINTER_VERSION" sigs.k8s.io/kube-api-linter/cmd/golangci-lint-kube-api-linter ;;
    python)
      python_tools ;;
    promtool)
      d=$(debian_pkg "$DEBIAN_PROMETHEUS"); ln -sfn "$d/usr/bin/promtool" "$CURRENT/promtool" ;;
    prometheus)
      # The server of the same package: test/install scrapes the installed
      # control plane with it as the chart's ServiceMonitor describes.
      d=$(debian_pkg "$DEBIAN_PROMETHEUS"); ln -sfn "$d/usr/bin/prometheus" "$CURRENT/prometheus" ;;
    shellcheck)
      d=$(debian_pkg "$DEBIAN_SHELLCHECK"); ln -sfn "$d/usr/bin/shellcheck" "$CURRENT/shellcheck" ;;
    lint)
      "$0" golangci-lint kube-api-linter shellcheck ;;
    demo)
      "$0" "${DEMO_COMPONENTS[@]}" ;;
    e2e)
      "$0" kube-apiserver etcd kubectl kube-controller-manager kube-scheduler kwok jobset trainer-controller-manager trainer-controller-manager-v2.0.0 kueue versitygw seaweedfs node ;;
    *) log "unknown component $c (known: kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl etcd containerd runc cni-plugins node kube-proxy coredns nft network controller-gen versitygw seaweedfs kwok jobset trainer-controller-manager trainer-controller-manager-v2.0.0 kueue helm golangci-lint kube-api-linter promtool prometheus shellcheck lint demo e2e)"; exit 2 ;;
  esac
done
log "ready: KUBEBUILDER_ASSETS=$CURRENT"
