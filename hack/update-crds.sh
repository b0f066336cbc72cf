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

# controller-gen gives resource.Quantity values (ResourceLists) a pattern but no
# maxLength, and no marker reaches a map's values. Without one the API server
# estimates every quantity string at the request size, which makes any CEL rule
# that reads them (the quantity bounds in apis/) exceed the cost budget. Bound
# them at 32 characters, next to the pattern.
quantity_pattern='pattern: ^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$'
for crd in "${out}"/nodeset.dev_*.yaml; do
  QUANTITY_PATTERN="${quantity_pattern}" awk '
    { at = index($0, ENVIRON["QUANTITY_PATTERN"]) }
    at > 0 && substr($0, at) == ENVIRON["QUANTITY_PATTERN"] { print substr($0, 1, at - 1) "maxLength: 32" }
    { print }
  ' "${crd}" > "${crd}.tmp"
  mv "${crd}.tmp" "${crd}"
done
