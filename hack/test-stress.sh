#!/usr/bin/env bash
# Runs `make test` NODESET_STRESS_RUNS times in a row (default 3) with a CPU
# hog beside it: Debian's stress-ng keeping every core busy
# (NODESET_STRESS_WORKERS workers, default one per core), as a busy CI host
# or cluster node does. Stops at the first failing run; the hog is stopped
# however the runs end. Prints one line per run and a summary.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
runs="${NODESET_STRESS_RUNS:-3}"
workers="${NODESET_STRESS_WORKERS:-$(nproc)}"

if ! command -v stress-ng >/dev/null; then
  echo "test-stress: installing stress-ng" >&2
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  ${sudo} apt-get install -y --no-install-recommends stress-ng >/dev/null 2>&1 ||
    { ${sudo} apt-get update >/dev/null && ${sudo} apt-get install -y --no-install-recommends stress-ng >/dev/null; }
fi

# Build and cache everything first, without the hog: the runs measure the
# tests, not the control plane's first build.
make kube-binaries test-deps

stress-ng --cpu "${workers}" --timeout 0 --quiet &
hog=$!
trap 'kill "${hog}" 2>/dev/null || true; wait "${hog}" 2>/dev/null || true' EXIT
echo "test-stress: stress-ng --cpu ${workers} running (pid ${hog})"

log_dir="${root}/_output/test-stress"
mkdir -p "${log_dir}"
passed=0
for i in $(seq 1 "${runs}"); do
  log="${log_dir}/run-${i}.log"
  start=$(date +%s)
  if make test TEST_FLAGS="${TEST_FLAGS:--count=1 -timeout=70m}" >"${log}" 2>&1; then
    passed=$((passed + 1))
    echo "test-stress: run ${i}/${runs} passed in $(( $(date +%s) - start ))s (${log})"
  else
    echo "test-stress: run ${i}/${runs} FAILED in $(( $(date +%s) - start ))s; failing tests:" >&2
    grep -E '^\s*--- FAIL|^FAIL' "${log}" >&2 || true
    echo "test-stress: ${passed} of ${runs} runs passed under the CPU hog" >&2
    exit 1
  fi
done
echo "test-stress: ${passed} of ${runs} runs passed under the CPU hog"
