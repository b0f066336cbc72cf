#!/usr/bin/env bash
# Runs staticcheck, pinned here, over the module's packages but the generated
# ones (pkg/generated); findings in other generated files (zz_generated.*,
# *.pb.go) are dropped. The Go module proxy serves it; the first run builds it.
set -euo pipefail

STATICCHECK_VERSION="v0.8.2" # staticcheck 2026.2.2, which knows Go 1.26

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

packages="$(go list ./... | grep -v '^nodeset.dev/nodeset/pkg/generated/')"
set +e
# shellcheck disable=SC2086 # one package a word
findings="$(go run "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" ${packages} 2>&1)"
status=$?
set -e
findings="$(grep -Ev '(zz_generated\.[^:]*|\.pb\.go):[0-9]+:' <<<"${findings}" || true)"
if [[ ${status} -ne 0 && -n "${findings}" ]]; then
  echo "verify-staticcheck: staticcheck ${STATICCHECK_VERSION} found:" >&2
  echo "${findings}" >&2
  exit 1
fi
echo "verify-staticcheck: staticcheck ${STATICCHECK_VERSION} finds nothing"
