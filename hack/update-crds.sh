#!/usr/bin/env bash
# Regenerates the CRD manifests in deploy/crds/ from the types in apis/ with
# controller-gen, pinned in hack/tools/go.mod.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

out="${1:-${root}/deploy/crds}"
mkdir -p "${out}"
rm -f "${out}"/nodeset.dev_*.yaml
go -C hack/tools tool controller-gen crd \
  paths="${root}/apis/..." output:crd:dir="${out}"
