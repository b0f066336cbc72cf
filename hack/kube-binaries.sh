#!/usr/bin/env bash
# Builds the pinned control-plane binaries (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl) from their Go modules, as
# pinned in hack/kube/go.mod, and caches them outside the repository, keyed by
# that pin. Prints the directory that holds them.
#
# A cache directory missing a binary (one made before a binary was added to the
# list) is completed under the directory's lock; each binary is built to a
# temporary name and renamed into place, so a binary in use is never replaced
# or removed, and a reader never sees a half-written one.
#
#   hack/kube-binaries.sh            # build if needed, print the bin directory
#   NODESET_CACHE=/some/dir ...      # cache somewhere else (default ~/.cache/nodeset)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mod="${root}/hack/kube"
cache="${NODESET_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/nodeset}"
module_version() { grep -oE "^(require )?[[:space:]]*$1 v[^ ]+" "${mod}/go.mod" | awk '{print $NF}'; }
k8s_version="$(module_version k8s.io/kubernetes)"
etcd_version="$(module_version go.etcd.io/etcd/server/v3)"
# The Kubernetes binaries report the pinned release as their version (what
# kubectl version, Helm's kubeVersion check and clients' skew checks read),
# as a release build does; without it they say v0.0.0-master.
k8s_minor="$(echo "${k8s_version}" | cut -d. -f2)"
version_pkg=k8s.io/component-base/version
ldflags="-s -w -X ${version_pkg}.gitVersion=${k8s_version} -X ${version_pkg}.gitMajor=1 -X ${version_pkg}.gitMinor=${k8s_minor} -X ${version_pkg}.gitTreeState=clean"
key="$( (cat "${mod}/go.mod" "${mod}/go.sum" "${mod}/cmd/etcd/main.go"; echo "${ldflags}") | sha256sum | cut -c1-12)"
bin="${cache}/kube/${k8s_version}-etcd${etcd_version}-${key}/bin"
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl)

have_all() {
  local b
  for b in "${binaries[@]}"; do [[ -x "${bin}/${b}" ]] || return 1; done
}

if have_all; then
  echo "${bin}"
  exit 0
fi

mkdir -p "${bin}"
lock="${bin}.lock"
exec 9>"${lock}"
if ! flock -n 9; then
  echo "kube-binaries: another build is running; waiting for it" >&2
  flock 9
fi
if have_all; then
  echo "${bin}"
  exit 0
fi

echo "kube-binaries: building Kubernetes ${k8s_version} and etcd ${etcd_version} into ${bin}" >&2
echo "kube-binaries: the first build takes about ten minutes on two cores; later runs reuse the cache" >&2
cd "${mod}"
# -mod=readonly: a build never rewrites go.mod or go.sum, whose hash names the
# cache directory (hack/kube/go.mod is tidy, with every binary a tool of it).
export CGO_ENABLED=0 GOFLAGS=-mod=readonly
start=$(date +%s)
declare -A pkgs=(
  [etcd]=./cmd/etcd
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kubectl]=k8s.io/kubernetes/cmd/kubectl
)
for b in "${binaries[@]}"; do
  [[ -x "${bin}/${b}" ]] && continue
  echo "kube-binaries: [$(( $(date +%s) - start ))s] building ${b} (${pkgs[$b]})" >&2
  # Print a dot every 15s so a long build is visibly alive.
  ( while sleep 15; do printf . >&2; done ) &
  ticker=$!
  if ! go build -trimpath -ldflags="${ldflags}" -o "${bin}/${b}.tmp" "${pkgs[$b]}"; then
    kill "${ticker}" 2>/dev/null || true
    echo "kube-binaries: building ${b} failed" >&2
    exit 1
  fi
  kill "${ticker}" 2>/dev/null || true
  mv "${bin}/${b}.tmp" "${bin}/${b}"
  echo " done" >&2
done
echo "kube-binaries: [$(( $(date +%s) - start ))s] all built" >&2
echo "${bin}"
