#!/usr/bin/env bash
# Fails when generated code (deepcopy, register, clientset, listers, informers,
# apply configurations, CRDs, docs/api-reference.md) is stale or untracked. Fix with: make generate
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

generated=(apis pkg/generated deploy/crds docs/api-reference.md)
if [[ -n "$(git status --porcelain -- "${generated[@]}")" ]]; then
  echo "verify-codegen: uncommitted changes under ${generated[*]}; commit them first:" >&2
  git status --short -- "${generated[@]}" >&2
  exit 1
fi

hack/update-codegen.sh >/dev/null
hack/update-crds.sh >/dev/null
hack/update-api-docs.sh >/dev/null

if [[ -n "$(git status --porcelain -- "${generated[@]}")" ]]; then
  echo "verify-codegen: generated code is stale; run 'make generate' and commit the result:" >&2
  git status --short -- "${generated[@]}" >&2
  git --no-pager diff --stat -- "${generated[@]}" >&2
  exit 1
fi
echo "verify-codegen: generated code is up to date"
