#!/usr/bin/env bash
# Fails when a Go file is not gofmt-formatted or a go.mod is not tidy.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

unformatted="$(gofmt -l $(git ls-files '*.go'))"
if [[ -n "${unformatted}" ]]; then
  echo "verify-gofmt: not gofmt-formatted (run 'gofmt -w'):" >&2
  echo "${unformatted}" >&2
  exit 1
fi
for mod in . hack/tools hack/kube; do
  if ! go -C "${mod}" mod tidy -diff >/dev/null; then
    echo "verify-gofmt: ${mod}/go.mod is not tidy (run 'go -C ${mod} mod tidy'):" >&2
    go -C "${mod}" mod tidy -diff >&2 || true
    exit 1
  fi
done
echo "verify-gofmt: formatting and go.mod files are clean"
