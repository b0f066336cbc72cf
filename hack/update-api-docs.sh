#!/usr/bin/env bash
# Regenerates docs/api-reference.md from the CRDs in deploy/crds.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
go run ./hack/apidocs deploy/crds docs/api-reference.md
