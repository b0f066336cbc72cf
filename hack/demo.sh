#!/usr/bin/env bash
# make demo: a control plane on this machine, both controllers with the
# simulated driver, the example catalogue and a NodeSet of 3, scaled to 5 and
# back to 2. Everything is left running; hack/demo.sh down stops it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
state="${NODESET_LOCAL_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/nodeset/local-up}"
run="${state}/demo"

if [[ "${1:-}" == "down" ]]; then
  for name in nodeset-controller node-controller; do
    if [[ -f "${run}/${name}.pid" ]]; then
      kill "$(cat "${run}/${name}.pid")" 2>/dev/null || true
    fi
  done
  hack/local-down.sh
  exit 0
fi

t0=$(date +%s)
step() { printf '\n\033[1m[%3ss] %s\033[0m\n' "$(( $(date +%s) - t0 ))" "$*"; }

step "starting the local control plane (first run builds it: several minutes)"
# local-up also registers the nodeset webhooks (at 127.0.0.1:${webhook_port},
# with a CA bundle) and the admission policies of deploy/admission, as an install does.
webhook_port="${NODESET_WEBHOOK_PORT:-19443}"
hack/local-up.sh --webhook-port "${webhook_port}" >/dev/null
bin="$(hack/kube-binaries.sh)"
export KUBECONFIG="${state}/kubeconfig"
kubectl() { "${bin}/kubectl" "$@"; }
mkdir -p "${run}"

step "building the controllers"
go build -tags grpcnotrace -o "${root}/bin/" ./cmd/nodeset-controller ./cmd/node-controller ./cmd/kubectl-nodeset

step "installing RBAC and starting both controllers (simulated driver)"
kubectl apply -k deploy/rbac >/dev/null
kubectl apply -f hack/demo/local-users.yaml >/dev/null
go run ./hack/localup --dir "${state}" --kubeconfig-for nodeset-controller >"${run}/nodeset-controller.kubeconfig.path"
go run ./hack/localup --dir "${state}" --kubeconfig-for node-controller >"${run}/node-controller.kubeconfig.path"
start() {
  local name=$1; shift
  if [[ -f "${run}/${name}.pid" ]] && kill -0 "$(cat "${run}/${name}.pid")" 2>/dev/null; then
    kill "$(cat "${run}/${name}.pid")"; sleep 1
  fi
  setsid "${root}/bin/${name}" --kubeconfig="$(cat "${run}/${name}.kubeconfig.path")" "$@" \
    >"${run}/${name}.log" 2>&1 < /dev/null &
  echo $! >"${run}/${name}.pid"
}
start nodeset-controller --metrics-bind-address=127.0.0.1:18080 --health-probe-bind-address=127.0.0.1:18081 \
  --autoscaler-bind-address=127.0.0.1:18086 \
  --webhook-bind-address="127.0.0.1:${webhook_port}" --webhook-cert-file="${state}/webhook.crt" --webhook-key-file="${state}/webhook.key"
start node-controller --drivers=simulated --metrics-bind-address=127.0.0.1:18082 --health-probe-bind-address=127.0.0.1:18083

for _ in $(seq 1 120); do
  if (exec 3<>"/dev/tcp/127.0.0.1/${webhook_port}") 2>/dev/null; then break; fi
  sleep 0.5
done
(exec 3<>"/dev/tcp/127.0.0.1/${webhook_port}") 2>/dev/null ||
  { echo "demo: nodeset-controller does not serve the webhook on 127.0.0.1:${webhook_port}; logs in ${run}" >&2; exit 1; }

step "applying deploy/examples/: a catalogue of NodeClasses and a NodeSet of 3"
kubectl apply -f deploy/examples/

# refused PATTERN COMMAND...: runs COMMAND, which must fail with a message
# matching PATTERN, and prints that message.
refused() {
  local want=$1; shift
  local out
  if out="$("$@" 2>&1)"; then
    echo "demo: admitted, but should have been refused: $*" >&2; exit 1
  fi
  if ! grep -q -- "${want}" <<<"${out}"; then
    echo "demo: refused, but not by ${want}: ${out}" >&2; exit 1
  fi
  echo "${out}"
}

step "the webhook refuses a NodeSet of team-a for gpu-dedicated, a class only ml-research may use (server dry run)"
refused NamespaceNotAllowed kubectl create --dry-run=server -f - <<'YAML'
apiVersion: nodeset.dev/v1alpha1
kind: NodeSet
metadata: {name: gpus, namespace: team-a}
spec: {nodeClassName: gpu-dedicated, replicas: 1}
YAML

step "the admission policy refuses a pod of team-a tolerating ml-research's Dedicated nodes (server dry run)"
refused dedicated-tenancy.nodeset.dev kubectl create --dry-run=server -f - <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: intruder, namespace: team-a}
spec:
  containers: [{name: app, image: registry.k8s.io/pause:3.10}]
  tolerations: [{key: nodeset.dev/tenant, operator: Equal, value: ml-research, effect: NoSchedule}]
  nodeSelector: {nodeset.dev/tenant: ml-research}
YAML

wait_ready() {
  local want=$1
  for _ in $(seq 1 300); do
    ready="$(kubectl get nodesets web -n team-a -o jsonpath='{.status.readyReplicas}')"
    nodes="$(kubectl get nodes -l nodeset.dev/nodeset=web --no-headers 2>/dev/null | wc -l)"
    if [[ "${ready:-0}" == "${want}" && "${nodes}" == "${want}" ]]; then return 0; fi
    sleep 0.5
  done
  echo "demo: the NodeSet did not reach ${want} ready nodes; logs in ${run}" >&2
  exit 1
}
wait_ready 3
step "3 nodes ready"
kubectl get nodeclasses,nodesets -A
kubectl get nodes -L nodeset.dev/nodeset,node.kubernetes.io/instance-type

step "kubectl scale nodeset/web --replicas=5"
kubectl scale -n team-a nodeset/web --replicas=5
wait_ready 5
step "5 nodes ready"
kubectl get nodesets -n team-a
kubectl get nodes -L nodeset.dev/nodeset

step "kubectl scale nodeset/web --replicas=2 (nodes are drained, machines deprovisioned)"
kubectl scale -n team-a nodeset/web --replicas=2
wait_ready 2
step "2 nodes ready"
kubectl get nodesets -n team-a
kubectl get nodes -L nodeset.dev/nodeset

step "the kubectl plugin: kubectl nodeset classes, kubectl nodeset status web"
"${root}/bin/kubectl-nodeset" classes -n team-a
echo
"${root}/bin/kubectl-nodeset" status web -n team-a --events 5

cat <<MSG

Everything is still running. Try it:

  export KUBECONFIG=${KUBECONFIG}
  export PATH=${root}/bin:${bin}:\$PATH   # kubectl and the kubectl-nodeset plugin
  kubectl get nodesets,nodes -A
  kubectl nodeset classes -n team-a
  kubectl nodeset create api -n team-a --class sim-small --replicas 2 --label tier=api
  kubectl nodeset scale api -n team-a --replicas 3
  kubectl nodeset status api -n team-a
  kubectl delete node <a web node>      # drained, deprovisioned, replaced

Controller logs: ${run}/*.log
Stop everything: make demo-down
MSG
