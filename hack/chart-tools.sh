#!/usr/bin/env bash
# Builds helm (pinned in hack/chart/go.mod, from the Go module proxy) and
# nodeset-chart (hack/chart: the chart's generator and drift check) and caches
# them outside the repository: helm keyed by the module's go.mod and go.sum,
# nodeset-chart by those and its sources (an edit to it does not rebuild helm).
# Prints the directory that holds both.
#
#   hack/chart-tools.sh            # build if needed, print the bin directory
#   NODESET_CACHE=/some/dir ...    # cache somewhere else (default ~/.cache/nodeset)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mod="${root}/hack/chart"
cache="${NODESET_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/nodeset}"
helm_version="$(grep -oE '^(require )?[[:space:]]*helm.sh/helm/v3 v[^ ]+' "${mod}/go.mod" | awk '{print $NF}')"
client_go="$(grep -oE '^[[:space:]]*k8s.io/client-go v[^ ]+' "${mod}/go.mod" | awk '{print $NF}')"
# As helm's Makefile does: the Kubernetes version helm template and lint assume
# is the one of its client libraries (v0.37.x: 1.37), and helm version is the pin.
k8s_minor="$(cut -d. -f2 <<<"${client_go}")"
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${helm_version}"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  ldflags+=" -X ${pkg}.k8sVersionMajor=1 -X ${pkg}.k8sVersionMinor=${k8s_minor}"
done
mod_key="$(cat "${mod}/go.mod" "${mod}/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)"
key="$(cat "${mod}/go.mod" "${mod}/go.sum" "${BASH_SOURCE[0]}" "${mod}"/*.go | sha256sum | cut -c1-12)"
helm_bin="${cache}/chart/helm${helm_version}-${mod_key}"
bin="${cache}/chart/nodeset-chart-${key}/bin"

if [[ -x "${bin}/helm" && -x "${bin}/nodeset-chart" ]]; then
  echo "${bin}"
  exit 0
fi
mkdir -p "${bin}"
exec 9>"${bin}.lock"
if ! flock -n 9; then
  echo "chart-tools: another build is running; waiting for it" >&2
  flock 9
fi
if [[ -x "${bin}/helm" && -x "${bin}/nodeset-chart" ]]; then
  echo "${bin}"
  exit 0
fi
echo "chart-tools: building helm ${helm_version} (the first time: a few minutes) and nodeset-chart into ${bin}" >&2
cd "${mod}"
export CGO_ENABLED=0 GOFLAGS=-mod=readonly
mkdir -p "${helm_bin}"
if [[ ! -x "${helm_bin}/helm" ]]; then
  go build -trimpath -ldflags="${ldflags}" -o "${helm_bin}/helm.tmp" helm.sh/helm/v3/cmd/helm
  mv "${helm_bin}/helm.tmp" "${helm_bin}/helm"
fi
ln -f "${helm_bin}/helm" "${bin}/helm.tmp" 2>/dev/null || cp "${helm_bin}/helm" "${bin}/helm.tmp"
mv "${bin}/helm.tmp" "${bin}/helm"
if [[ ! -x "${bin}/nodeset-chart" ]]; then
  go build -trimpath -ldflags="${ldflags}" -o "${bin}/nodeset-chart.tmp" .
  mv "${bin}/nodeset-chart.tmp" "${bin}/nodeset-chart"
fi
echo "${bin}"
