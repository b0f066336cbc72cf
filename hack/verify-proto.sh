#!/usr/bin/env bash
# Fails when the committed stubs of pkg/autoscaler/protos differ from what
# hack/update-proto.sh generates.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
"${root}/hack/update-proto.sh" "${tmp}"
for f in externalgrpc.pb.go externalgrpc_grpc.pb.go; do
  if ! diff -u "${root}/pkg/autoscaler/protos/${f}" "${tmp}/pkg/autoscaler/protos/${f}"; then
    echo "verify-proto: pkg/autoscaler/protos/${f} is stale; run hack/update-proto.sh" >&2
    exit 1
  fi
done
echo "verify-proto: gRPC stubs are up to date"
