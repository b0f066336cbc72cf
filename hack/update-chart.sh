#!/usr/bin/env bash
# Regenerates what the Helm chart (deploy/charts/nodeset) derives from the rest
# of the repository: crds/ from deploy/crds, templates/admission.yaml from
# deploy/admission, Chart.yaml's version and appVersion from the Makefile's
# VERSION, and README.md's values table from the comments of values.yaml.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="$(sed -n 's/^VERSION ?= //p' "${root}/Makefile")"
bin="$("${root}/hack/chart-tools.sh")"
"${bin}/nodeset-chart" generate --root "${root}" --version "${version}" "$@"
