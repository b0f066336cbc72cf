#!/usr/bin/env bash
# Regenerates deepcopy, register, clientset (with watch and apply
# configurations), listers and informers for apis/ with k8s.io/code-generator
# at the version pinned in go.mod. Output: apis/**/zz_generated.*.go, pkg/generated/.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

codegen_root="$(go list -m -f '{{.Dir}}' k8s.io/code-generator)"
if [[ -z "${codegen_root}" || ! -d "${codegen_root}" ]]; then
  go mod download k8s.io/code-generator
  codegen_root="$(go list -m -f '{{.Dir}}' k8s.io/code-generator)"
fi
# The generators are installed into a cache of their own, keyed by version.
export GOBIN="${NODESET_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/nodeset}/codegen/$(go list -m -f '{{.Version}}' k8s.io/code-generator)"
mkdir -p "${GOBIN}"

# shellcheck source=/dev/null
source "${codegen_root}/kube_codegen.sh"

boilerplate="${root}/hack/boilerplate.go.txt"

kube::codegen::gen_helpers --boilerplate "${boilerplate}" "${root}/apis"
kube::codegen::gen_register --boilerplate "${boilerplate}" "${root}/apis"

rm -rf "${root}/pkg/generated"
mkdir -p "${root}/pkg/generated"/{applyconfiguration,clientset,listers,informers}
kube::codegen::gen_client \
  --with-watch \
  --with-applyconfig \
  --output-dir "${root}/pkg/generated" \
  --output-pkg nodeset.dev/nodeset/pkg/generated \
  --boilerplate "${boilerplate}" \
  "${root}/apis"
