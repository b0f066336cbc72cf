#!/usr/bin/env bash
# Regenerates the Go stubs of pkg/autoscaler/protos/externalgrpc.proto with
# Debian's protoc and the protoc-gen-go / protoc-gen-go-grpc pinned in
# hack/tools/go.mod. Installs protoc from Debian when it is missing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-${root}}"

if ! command -v protoc >/dev/null; then
  echo "update-proto: installing Debian's protobuf-compiler" >&2
  sudo=""
  [[ "$(id -u)" == 0 ]] || sudo="sudo"
  ${sudo} apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev >/dev/null \
    || { ${sudo} apt-get update >/dev/null && ${sudo} apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev >/dev/null; }
fi

bin="$(mktemp -d)"
trap 'rm -rf "${bin}"' EXIT
(cd "${root}/hack/tools" && GOBIN="${bin}" go install google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc)

mkdir -p "${out}/pkg/autoscaler/protos"
cd "${root}"
PATH="${bin}:${PATH}" protoc \
  -I pkg/autoscaler/protos -I /usr/include \
  --go_out="${out}/pkg/autoscaler/protos" --go_opt=paths=source_relative \
  --go-grpc_out="${out}/pkg/autoscaler/protos" --go-grpc_opt=paths=source_relative \
  pkg/autoscaler/protos/externalgrpc.proto
