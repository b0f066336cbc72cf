#!/usr/bin/env bash
# Stops the control plane hack/local-up.sh started and removes its state.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
go run ./hack/localup --down "$@"
