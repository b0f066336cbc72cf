#!/usr/bin/env bash
# Fails when the Helm chart (deploy/charts/nodeset) drifts from the kustomize
# manifests of deploy/ or from what hack/update-chart.sh generates:
#   - generated files: crds/, templates/admission.yaml, Chart.yaml's versions
#     (the Makefile's VERSION), README.md's values table;
#   - each overlay of deploy/overlays renders the same objects as the chart with
#     the equivalent values of hack/chart/overlays (after taking away the labels
#     and annotations Helm adds; the base's Namespace is left to
#     --create-namespace);
#   - the image tags of deploy/base are the project's VERSION;
#   - hack/chart's go.mod is tidy and go vet finds nothing in it;
#   - helm lint passes for every values file of the chart's ci/.
# helm and nodeset-chart are built from the Go module proxy (hack/chart-tools.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
version="$(sed -n 's/^VERSION ?= //p' Makefile)"
bin="$(hack/chart-tools.sh)"

if ! go -C hack/chart mod tidy -diff >/dev/null; then
  echo "verify-chart: hack/chart/go.mod is not tidy (run 'go -C hack/chart mod tidy')" >&2
  exit 1
fi
go -C hack/chart vet ./...
"${bin}/nodeset-chart" generate --check --root "${root}" --version "${version}"
"${bin}/nodeset-chart" drift --root "${root}"
for tag in $(sed -n 's/^ *newTag: //p' deploy/base/kustomization.yaml); do
  if [[ "${tag}" != "${version}" ]]; then
    echo "verify-chart: deploy/base/kustomization.yaml has image tag ${tag}, the Makefile's VERSION is ${version}" >&2
    exit 1
  fi
done
for values in deploy/charts/nodeset/ci/*.yaml; do
  "${bin}/helm" lint --strict --quiet deploy/charts/nodeset --namespace nodeset-system -f "${values}" >/dev/null || {
    "${bin}/helm" lint --strict deploy/charts/nodeset --namespace nodeset-system -f "${values}" >&2
    exit 1
  }
done
echo "verify-chart: the chart is generated, lint-clean and renders what deploy/overlays render (${version})"
