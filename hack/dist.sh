#!/usr/bin/env bash
# make dist: builds kubectl-nodeset for each platform krew users run it on,
# packs the archives, writes their sha256 sums and fills the krew manifest
# (deploy/krew/nodeset.yaml) with them. Everything goes to _output/dist/:
#   kubectl-nodeset_<os>_<arch>.tar.gz (.zip on Windows)   binary (+ LICENSE)
#   sha256sums.txt                                         sha256sum -c format
#   nodeset.yaml                                           the filled krew manifest
#
#   VERSION=v0.1.0 hack/dist.sh       # default: the Makefile's VERSION
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
version="${VERSION:-$(sed -n 's/^VERSION ?= //p' Makefile)}"
out="${root}/_output/dist"
platforms=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64)

rm -rf "${out}"
for platform in "${platforms[@]}"; do
  goos="${platform%/*}" goarch="${platform#*/}"
  ext=""
  [[ ${goos} == windows ]] && ext=.exe
  echo "dist: building kubectl-nodeset ${version} for ${goos}/${goarch}" >&2
  CGO_ENABLED=0 GOOS="${goos}" GOARCH="${goarch}" go build -trimpath -ldflags="-s -w" \
    -o "${out}/bin/${goos}_${goarch}/kubectl-nodeset${ext}" ./cmd/kubectl-nodeset
done
go run ./hack/dist --bin-dir "${out}/bin" --out-dir "${out}" --version "${version}" \
  --manifest deploy/krew/nodeset.yaml --license LICENSE
rm -rf "${out}/bin"
(cd "${out}" && sha256sum -c --quiet sha256sums.txt)
echo "dist: ${version} in ${out}:" >&2
(cd "${out}" && ls -l --time-style=+ | tail -n +2 | awk '{print "  " $5 "\t" $NF}') >&2
cat "${out}/sha256sums.txt" >&2
