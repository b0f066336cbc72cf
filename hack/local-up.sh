#!/usr/bin/env bash
# Starts a real control plane on this machine: etcd, kube-apiserver (RBAC on,
# token authentication), kube-controller-manager (the controllers a cluster
# runs) and kube-scheduler on loopback ports, built from their Go modules by
# hack/kube-binaries.sh (cached), with the nodeset CRDs
# installed, the nodeset webhooks registered as a real install has them
# (failurePolicy Ignore; at https://127.0.0.1:19443, --webhook-port, with a CA
# bundle: run nodeset-controller with the flags it prints) and the
# admission policies of deploy/admission applied. Running it
# again reuses the running control plane and issues a new webhook certificate.
# State, logs and kubeconfig: ${NODESET_LOCAL_DIR:-~/.cache/nodeset/local-up}.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
bin="$(hack/kube-binaries.sh)"
go run ./hack/localup --bin-dir "${bin}" "$@"
