#!/usr/bin/env bash
# Runs the real cluster-autoscaler against the demo (make demo) and checks
# that it scales a NodeSet exactly: up from zero, up from some, down when
# nodes are empty, down by draining when their pods fit elsewhere, never by
# draining a node of a NodeSet that is rolling out or not Accepted, and
# past a not-Accepted NodeSet's refused scale-up, or a cloud out of
# capacity, to another set; and that its loop goes on scaling other sets
# while NodeSets are deleted or stop being autoscaled, and past a NodeSet
# below a min size its class gives it no room for. Prints each step's nodes
# needed and nodes added, and fails on a mismatch.
#
# cluster-autoscaler's Go module is not served by the module proxy, so this
# is not part of make test: build the binary from its source first, e.g.
#
#   git clone --depth 1 --branch cluster-autoscaler-1.36.1 https://github.com/kubernetes/autoscaler
#   (cd autoscaler/cluster-autoscaler && go build -tags externalgrpc -o /tmp/cluster-autoscaler .)
#   make demo
#   CLUSTER_AUTOSCALER=/tmp/cluster-autoscaler hack/cluster-autoscaler-check.sh
#
# The demo's nodeset-controller serves the externalgrpc API on
# 127.0.0.1:18086 (plaintext on loopback); cluster-autoscaler runs with its
# defaults but for shorter scale-down delays, so the check takes minutes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
ca="${CLUSTER_AUTOSCALER:?set CLUSTER_AUTOSCALER to a cluster-autoscaler binary built with -tags externalgrpc}"
state="${NODESET_LOCAL_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/nodeset/local-up}"
run="${state}/demo"
export KUBECONFIG="${state}/kubeconfig"
bin="$(hack/kube-binaries.sh)"
kubectl() { "${bin}/kubectl" "$@"; }
[[ -f "${run}/nodeset-controller.pid" ]] || { echo "cluster-autoscaler-check: run make demo first" >&2; exit 1; }

ns=team-a
t0=$(date +%s)
say() { printf '[%3ss] %s\n' "$(( $(date +%s) - t0 ))" "$*"; }
fail() { echo "cluster-autoscaler-check: FAILED: $*" >&2; exit 1; }
set_nodes() { kubectl get nodes -l "nodeset.dev/nodeset=$1" --no-headers 2>/dev/null | wc -l; }
set_replicas() { kubectl get nodeset -n "${ns}" "$1" -o jsonpath='{.spec.replicas}'; }
pool_nodes() { set_nodes ca-pool; }
# marked_for_deletion SET: whether cluster-autoscaler tainted a node of the NodeSet to delete it.
marked_for_deletion() {
  kubectl get nodes -l "nodeset.dev/nodeset=$1" -o jsonpath='{.items[*].spec.taints[*].key}' | grep -qw ToBeDeletedByClusterAutoscaler
}
ca_log="${run}/cluster-autoscaler.log"
# log_mark: the number of cluster-autoscaler's next log line; log_from LINE: its log from there.
log_mark() { echo $(( $(wc -l <"${ca_log}") + 1 )); }
log_from() { tail -n "+$1" "${ca_log}"; }
# min_size_lines LINE NODE: how often since LINE cluster-autoscaler skipped NODE (a regular expression) for its group's min size.
min_size_lines() { log_from "$1" | grep -cE "Skipping $2 - node group min size reached" || true; }

# class_yaml NAME [SIMULATED] [SPEC]: a NodeClass of 2-CPU simulated
# machines; SIMULATED is added to its simulated section, SPEC is a line of
# its spec.
class_yaml() {
  cat <<YAML
---
apiVersion: nodeset.dev/v1alpha1
kind: NodeClass
metadata: {name: $1}
spec:
  driver: simulated
  simulated: {instanceType: sim.ca, capacity: {cpu: "2", memory: 8Gi, pods: "110"}${2:+, $2}}
${3:+  $3}
YAML
}
# set_yaml NAME CLASS LABEL [REPLICAS]: an autoscaled NodeSet (0 to 10,
# REPLICAS or 0 now) whose Nodes carry example.com/ca-check=LABEL.
set_yaml() {
  cat <<YAML
---
apiVersion: nodeset.dev/v1alpha1
kind: NodeSet
metadata: {name: $1, namespace: ${ns}}
spec:
  nodeClassName: $2
  replicas: ${4:-0}
  autoscaling: {minReplicas: 0, maxReplicas: 10}
  template:
    labels: {example.com/ca-check: $3}
YAML
}

cleanup() {
  [[ -n "${ca_pid:-}" ]] && kill "${ca_pid}" 2>/dev/null || true
  [[ -n "${unadmitted:-}" ]] && admit_all >/dev/null 2>&1 || true
  rm -f "${run}/churn"
  [[ -n "${churn_pid:-}" ]] && kill "${churn_pid}" 2>/dev/null || true
  kubectl delete deployment -n "${ns}" ca-load ca-small ca-wide ca-roll-big ca-roll-small ca-fallback ca-scarce-load ca-steady-load --ignore-not-found --wait=false >/dev/null 2>&1 || true
  kubectl delete nodeset -n "${ns}" ca-left ca-right ca-roll ca-refused ca-fallback ca-scarce ca-plenty ca-steady ca-toggle ca-short ca-huge --ignore-not-found --wait=false >/dev/null 2>&1 || true
  kubectl get nodesets -n "${ns}" -o name 2>/dev/null | grep '/ca-churn-' | xargs -r "${bin}/kubectl" delete -n "${ns}" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  # The classes the steps change, back as the steps make them, for the next run.
  kubectl patch nodeclass ca-roll --type=json -p '[{"op":"remove","path":"/spec/simulated/failurePercent"}]' >/dev/null 2>&1 || true
  kubectl patch nodeclass ca-closed --type=json -p '[{"op":"remove","path":"/spec/allowedNamespaces"}]' >/dev/null 2>&1 || true
}
trap cleanup EXIT

{ class_yaml ca-check; set_yaml ca-pool ca-check pool; } | kubectl apply -f - >/dev/null
for _ in $(seq 1 120); do
  [[ -n "$(kubectl get nodeclass ca-check -o jsonpath='{.status.capacity.resources.cpu}')" ]] && break
  sleep 0.5
done

printf 'address: "127.0.0.1:18086"\n' >"${run}/cluster-autoscaler-cloud.yaml"
# start_ca [FLAG...]: starts cluster-autoscaler with the check's flags and
# FLAGs, its log appended to ${ca_log}.
start_ca() {
  "${ca}" --cloud-provider=externalgrpc --cloud-config="${run}/cluster-autoscaler-cloud.yaml" \
    --kubeconfig="${KUBECONFIG}" --leader-elect=false --address=127.0.0.1:18087 \
    --scan-interval=5s --scale-down-unneeded-time=30s --scale-down-delay-after-add=30s \
    --scale-down-delay-after-delete=10s --balance-similar-node-groups \
    --balancing-ignore-label=nodeset.dev/nodeset --balancing-ignore-label=nodeset.dev/nodeset-namespace \
    --balancing-ignore-label=nodeset.dev/template-hash \
    --balancing-ignore-label=node-restriction.kubernetes.io/nodeset-owner \
    --balancing-ignore-label=beta.kubernetes.io/os --balancing-ignore-label=beta.kubernetes.io/arch \
    --balancing-ignore-label=beta.kubernetes.io/instance-type \
    --balancing-ignore-label=topology.ebs.csi.aws.com/zone --balancing-ignore-label=topology.k8s.aws/zone-id \
    --v=4 "$@" >>"${ca_log}" 2>&1 &
  ca_pid=$!
}
: >"${ca_log}"
start_ca
say "${ca} started (log: ${run}/cluster-autoscaler.log)"

# deployment NAME REPLICAS CPU [soft anti-affinity]: pods only the check's NodeSet can take
# (or, with selector=wide, only the two balanced ones).
deployment() {
  local spread=""
  [[ "${4:-}" == spread ]] && spread='
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: '"$1"'}}}'
  kubectl apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: $1, namespace: ${ns}}
spec:
  replicas: $2
  selector: {matchLabels: {app: $1}}
  template:
    metadata: {labels: {app: $1}}
    spec:
      nodeSelector: {example.com/ca-check: ${selector:-pool}}
      terminationGracePeriodSeconds: 1${spread}
      containers:
      - {name: app, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: $3, memory: 256Mi}}}
YAML
}

# expect WANT SECONDS WHAT: waits until the set has WANT Nodes and every pod
# of the check is bound, and fails if it ever has more than it had or WANT,
# whichever is more: a scale-up adds no node too many, a scale-down none.
expect() {
  local want=$1 limit=$2 what=$3 n pending
  local most bound
  most=$(pool_nodes)
  bound=$(( most > want ? most : want ))
  local deadline=$(( $(date +%s) + limit ))
  while (( $(date +%s) < deadline )); do
    n=$(pool_nodes)
    (( n > most )) && most=$n
    (( most > bound )) && fail "${what}: ${most} nodes, ${want} needed"
    pending=$(kubectl get pods -n "${ns}" -l 'app in (ca-load,ca-small)' --field-selector=spec.nodeName= --no-headers 2>/dev/null | wc -l)
    if (( n == want && pending == 0 )); then
      say "${what}: ${want} needed, ${most} at most, ${n} now"
      return 0
    fi
    sleep 1
  done
  fail "${what}: not ${want} nodes within ${limit}s (${n} now, ${pending} pods pending)"
}

deployment ca-load 3 1500m
expect 3 120 "scale-up from zero (3 pods of 1.5 CPU, 2-CPU nodes)"
kubectl scale -n "${ns}" deployment/ca-load --replicas=5 >/dev/null
expect 5 120 "scale-up from 3 (2 more pods)"
kubectl scale -n "${ns}" deployment/ca-load --replicas=3 >/dev/null
expect 3 300 "scale-down of empty nodes (2 pods fewer)"
deployment ca-small 3 500m spread
expect 3 60 "3 pods of 0.5 CPU, one on each node's half CPU left: no node added"
kubectl delete deployment -n "${ns}" ca-load --wait=true >/dev/null
expect 1 300 "scale-down by draining (the small pods fit on one node)"
grep -qE "removed with drain" "${ca_log}" || fail "no node was removed by draining it"
kubectl delete deployment -n "${ns}" ca-small --wait=true >/dev/null
expect 0 300 "scale-down to zero"

# Two similar NodeSets of one class with room for 4 nodes, and pods that
# need 6: the balanced plan asks 3 of each; nodeset adds what fits, so the
# class ends with exactly 4 nodes, both sets grow, no scale-up fails and
# nothing is backed off.
{ class_yaml ca-limited '' 'limits: {maxNodes: 4}'; set_yaml ca-left ca-limited wide; set_yaml ca-right ca-limited wide; } | kubectl apply -f - >/dev/null
wide_nodes() { kubectl get nodes -l nodeset.dev/nodeclass=ca-limited --no-headers 2>/dev/null | wc -l; }
selector=wide deployment ca-wide 6 1500m
deadline=$(( $(date +%s) + 180 ))
most=0
while (( $(date +%s) < deadline )); do
  n=$(wide_nodes)
  (( n > most )) && most=$n
  (( n > 4 )) && fail "balanced scale-up: ${n} nodes of a class limited to 4"
  bound=$(kubectl get pods -n "${ns}" -l app=ca-wide --field-selector=spec.nodeName!= --no-headers 2>/dev/null | wc -l)
  (( n == 4 && bound == 4 )) && break
  sleep 1
done
left=$(set_nodes ca-left) right=$(set_nodes ca-right)
(( left + right == 4 )) || fail "balanced scale-up: ${left} + ${right} nodes, 4 wanted"
(( left > 0 && right > 0 )) || fail "balanced scale-up grew one set only: ${left} + ${right}"
say "balanced scale-up past the class's room: ${left} + ${right} nodes (limit 4), 4 of 6 pods bound"
if grep -E "Failed to increase|failed to increase|Disabling scale-up for node group|backoff" "${ca_log}" | grep -E "ca-left|ca-right" >&2; then
  fail "cluster-autoscaler failed or backed off a balanced scale-up"
fi
kubectl delete deployment -n "${ns}" ca-wide --wait=true >/dev/null
for _ in $(seq 1 300); do (( $(wide_nodes) == 0 )) && break; sleep 1; done
(( $(wide_nodes) == 0 )) || fail "balanced sets not scaled down to zero"
say "balanced sets scaled down to zero"

# A NodeSet rolling out keeps its nodes: nodeset refuses to delete them, so
# cluster-autoscaler must not drain one it finds unneeded (it evicts the
# pods first and gives the node back when the deletion is refused). Its
# class is changed to machines that never register, so the rollout's surge
# Node never comes up and the set stays mid-rollout with two old nodes whose
# pods fit on one. While it rolls out, no pod of the set's nodes may be
# evicted and no node tainted for deletion, and cluster-autoscaler must say
# "node group min size reached" for them; once the class is changed back and
# the rollout is done, it drains one of the two.
{ class_yaml ca-roll; set_yaml ca-roll ca-roll roll; } | kubectl apply -f - >/dev/null
roll_nodes() { set_nodes ca-roll; }
# roll_pods: the small pods as "uid node deleting?", one a line, sorted.
roll_pods() {
  kubectl get pods -n "${ns}" -l app=ca-roll-small --no-headers \
    -o custom-columns='UID:.metadata.uid,NODE:.spec.nodeName,DELETING:.metadata.deletionTimestamp' 2>/dev/null | sort
}
# wait_for SECONDS WHAT COMMAND...: polls COMMAND every second until it succeeds.
wait_for() {
  local limit=$1 what=$2; shift 2
  local deadline=$(( $(date +%s) + limit ))
  until "$@"; do
    (( $(date +%s) < deadline )) || fail "${what}: not within ${limit}s"
    sleep 1
  done
}
roll_bound() {
  local want=$1 app=$2
  (( $(kubectl get pods -n "${ns}" -l "app=${app}" --field-selector=spec.nodeName!= --no-headers 2>/dev/null | wc -l) == want ))
}
roll_status() { kubectl get nodeset -n "${ns}" ca-roll -o jsonpath='{.spec.replicas} {.status.replicas} {.status.updatedReplicas} {.status.readyReplicas}'; }
rolling_out() { local r s u x; read -r r s u x <<<"$(roll_status)"; (( ${u:-0} >= 1 && ${s:-0} > ${u:-0} )); }
rolled_out() { local r s u x; read -r r s u x <<<"$(roll_status)"; (( r == 2 && ${s:-0} == 2 && ${u:-0} == 2 && ${x:-0} == 2 && $(roll_nodes) == 2 )); }
selector=roll deployment ca-roll-big 2 1500m
wait_for 120 "scale-up of the rolling set to 2 nodes" eval '(( $(roll_nodes) == 2 )) && roll_bound 2 ca-roll-big'
selector=roll deployment ca-roll-small 2 400m spread
wait_for 60 "small pods bound, one on each node" eval 'roll_bound 2 ca-roll-small && (( $(roll_pods | awk "{print \$2}" | sort -u | wc -l) == 2 ))'
old_nodes=$(kubectl get nodes -l nodeset.dev/nodeset=ca-roll -o jsonpath='{.items[*].metadata.name}')
kubectl patch nodeclass ca-roll --type=merge -p '{"spec":{"simulated":{"failurePercent":100}}}' >/dev/null
wait_for 60 "the set rolling out" rolling_out
held_from=$(log_mark)
pods_before=$(roll_pods)
kubectl delete deployment -n "${ns}" ca-roll-big --wait=true >/dev/null
say "rolling out ($(roll_status | awk '{print $3 " of " $2 " nodes updated"}')); both old nodes now 20 % used, their pods fit on one"
# Long enough for cluster-autoscaler to drain one if it were a candidate:
# --scale-down-unneeded-time=30s, a loop every 5 s.
deadline=$(( $(date +%s) + 90 ))
while (( $(date +%s) < deadline )); do
  rolling_out || fail "held rollout: the set stopped rolling out ($(roll_status))"
  [[ "$(roll_pods)" == "${pods_before}" ]] ||
    fail "held rollout: cluster-autoscaler evicted pods of a set that is rolling out: before
${pods_before}
now
$(roll_pods)"
  marked_for_deletion ca-roll && fail "held rollout: cluster-autoscaler marked a node of a set that is rolling out for deletion"
  sleep 1
done
held=$(min_size_lines "${held_from}" "ca-roll-[a-z0-9]+")
(( held > 0 )) || fail "held rollout: cluster-autoscaler never said 'node group min size reached' for the set's nodes"
if log_from "${held_from}" | grep -E "Scale-down: removing (empty )?node \"?ca-roll-|Failed to delete|failed to delete" | grep ca-roll >&2; then
  fail "held rollout: cluster-autoscaler tried to remove a node of a set that is rolling out"
fi
say "held rollout: 90 s, no pod evicted, no node marked; ${held} 'node group min size reached' lines for ca-roll"
# The class back as it was: the surge Node is outdated now, and goes; the
# rollout is done, and cluster-autoscaler may drain one of the old nodes.
kubectl patch nodeclass ca-roll --type=json -p '[{"op":"remove","path":"/spec/simulated/failurePercent"}]' >/dev/null
wait_for 120 "rollout done" rolled_out
say "rollout done ($(roll_status | awk '{print $3 " of " $2 " nodes updated"}')); nodes: ${old_nodes}"
wait_for 180 "scale-down by draining after the rollout" eval '(( $(roll_nodes) == 1 )) && roll_bound 2 ca-roll-small'
log_from "${held_from}" | grep -qE "ca-roll-[a-z0-9]+.*removed with drain|Scale-down: removing node ca-roll-" ||
  fail "after the rollout: no node of the set was removed by draining it"
[[ "$(roll_pods)" != "${pods_before}" ]] || fail "after the rollout: no pod moved"
say "after the rollout: one node drained and removed, its pod moved: $(roll_nodes) node"
kubectl delete deployment -n "${ns}" ca-roll-small --wait=true >/dev/null

# A NodeSet that is not Accepted (its class no longer allows the namespace)
# keeps its Nodes, and nodeset makes and removes none: cluster-autoscaler
# must neither drain its empty node ("node group min size reached") nor
# count on a scale-up of it. Its IncreaseSize is refused
# (FailedPrecondition); cluster-autoscaler backs the set off and, once
# another NodeSet can take the pods, grows that one instead.
{ class_yaml ca-closed; set_yaml ca-refused ca-closed fallback 1; } | kubectl apply -f - >/dev/null
refused_ready() { kubectl get nodes -l nodeset.dev/nodeset=ca-refused --no-headers 2>/dev/null | grep -cw Ready; }
accepted() { kubectl get nodeset -n "${ns}" "$1" -o jsonpath='{.status.conditions[?(@.type=="Accepted")].status}/{.status.conditions[?(@.type=="Accepted")].reason}'; }
wait_for 120 "the set's node Ready" eval '(( $(refused_ready) == 1 ))'
refused_node=$(kubectl get nodes -l nodeset.dev/nodeset=ca-refused -o jsonpath='{.items[0].metadata.name}')
kubectl patch nodeclass ca-closed --type=merge -p '{"spec":{"allowedNamespaces":{"from":"List","namespaces":["ca-nobody"]}}}' >/dev/null
wait_for 60 "the set not Accepted" eval '[[ "$(accepted ca-refused)" == False/NamespaceNotAllowed ]]'
refused_from=$(log_mark)
say "NodeSet ca-refused not Accepted ($(accepted ca-refused)), its node ${refused_node} empty"
# Longer than --scale-down-unneeded-time=30s, a loop every 5 s.
deadline=$(( $(date +%s) + 60 ))
while (( $(date +%s) < deadline )); do
  (( $(set_nodes ca-refused) == 1 )) || fail "not Accepted: the set's node was removed"
  marked_for_deletion ca-refused && fail "not Accepted: cluster-autoscaler marked the set's node for deletion"
  sleep 1
done
held=$(min_size_lines "${refused_from}" "${refused_node}")
(( held > 0 )) || fail "not Accepted: cluster-autoscaler never said 'node group min size reached' for ${refused_node}"
say "not Accepted: 60 s, its empty node kept and not marked; ${held} 'node group min size reached' lines"
# Two pods of 1.5 CPU that only the fallback label takes: one fits on the
# set's node, the other needs a node of a set that grows.
selector=fallback deployment ca-fallback 2 1500m
wait_for 120 "cluster-autoscaler refusing a scale-up of the set" eval \
  'log_from "${refused_from}" | grep -E "ca-refused" | grep -qE "FailedPrecondition|not Accepted"'
log_from "${refused_from}" | grep -E "ca-refused" | grep -E "FailedPrecondition|not Accepted" | head -n 3 >&2
log_from "${refused_from}" | grep -q "Disabling scale-up for node group team-a/ca-refused" ||
  fail "not Accepted: cluster-autoscaler did not back the set off after its refused scale-up"
[[ "$(set_replicas ca-refused)" == 1 ]] || fail "not Accepted: the set's replicas changed"
set_yaml ca-fallback ca-check fallback | kubectl apply -f - >/dev/null
wait_for 180 "a scale-up of the other NodeSet" eval 'roll_bound 2 ca-fallback'
fallback=$(set_nodes ca-fallback)
(( fallback == 1 )) || fail "not Accepted: ${fallback} nodes of the other set, 1 needed"
(( $(set_nodes ca-refused) == 1 )) || fail "not Accepted: the set has $(set_nodes ca-refused) nodes, 1 kept"
[[ "$(set_replicas ca-refused)" == 1 ]] || fail "not Accepted: the set's replicas changed"
say "not Accepted: its scale-up refused; the other set grew by ${fallback}; both pods bound"
kubectl delete deployment -n "${ns}" ca-fallback --wait=true >/dev/null

# A cloud out of capacity: the class has room for one machine, the pods
# need three nodes. cluster-autoscaler asks for three; one gets its machine,
# the other two record the create's OutOfCapacity error, an instance of
# class OutOfResources. cluster-autoscaler must count the scale-up failed,
# back the set off, delete the two failed nodes (the set keeps its Ready
# one), and grow another NodeSet for the two pods left.
{ class_yaml ca-scarce 'maxMachines: 1'; set_yaml ca-scarce ca-scarce scarce; } | kubectl apply -f - >/dev/null
for _ in $(seq 1 120); do
  [[ -n "$(kubectl get nodeclass ca-scarce -o jsonpath='{.status.capacity.resources.cpu}')" ]] && break
  sleep 0.5
done
scarce_from=$(log_mark)
scarce_ready() { kubectl get nodes -l nodeset.dev/nodeset=ca-scarce --no-headers 2>/dev/null | grep -cw Ready; }
out_of_capacity() { kubectl get nodes -l nodeset.dev/nodeset=ca-scarce -o jsonpath='{range .items[*]}{.metadata.annotations.nodeset\.dev/provisioning-error}{"\n"}{end}' | grep -c '^OutOfCapacity: ' || true; }
selector=scarce deployment ca-scarce-load 3 1500m
failed=0
deadline=$(( $(date +%s) + 240 ))
while :; do
  n=$(set_nodes ca-scarce)
  (( n > 3 )) && fail "out of capacity: ${n} nodes of the set, 3 needed at most"
  (( $(set_replicas ca-scarce) > 3 )) && fail "out of capacity: replicas $(set_replicas ca-scarce), 3 needed at most"
  f=$(out_of_capacity); (( f > failed )) && failed=$f
  log_from "${scarce_from}" | grep -q "Disabling scale-up for node group team-a/ca-scarce" &&
    (( n == 1 && $(scarce_ready) == 1 )) && [[ "$(set_replicas ca-scarce)" == 1 ]] && break
  (( $(date +%s) < deadline )) || fail "out of capacity: not backed off and down to its one Ready node within 240s ($(set_nodes ca-scarce) nodes, replicas $(set_replicas ca-scarce), $(scarce_ready) Ready)"
  sleep 1
done
log_from "${scarce_from}" | grep -E "ca-scarce" | grep -E "Failed adding|because of create errors|Disabling scale-up" | head -n 4 >&2
log_from "${scarce_from}" | grep -E "Failed adding [0-9]+ nodes .*team-a/ca-scarce due to .*OutOfCapacity" >/dev/null ||
  fail "out of capacity: cluster-autoscaler did not count the scale-up failed for OutOfCapacity"
log_from "${scarce_from}" | grep -qE "Deleting [0-9]+ from team-a/ca-scarce node group because of create errors" ||
  fail "out of capacity: cluster-autoscaler did not delete the nodes that failed to create"
plan=$(log_from "${scarce_from}" | grep -oE "team-a/ca-scarce [0-9]+->[0-9]+" | head -n 1)
say "out of capacity: planned ${plan}; ${failed} nodes seen with OutOfCapacity; counted failed, backed off, the failed deleted; 1 Ready node left"
set_yaml ca-plenty ca-check scarce | kubectl apply -f - >/dev/null
wait_for 180 "the pods left placed on another NodeSet" eval 'roll_bound 3 ca-scarce-load'
plenty=$(set_nodes ca-plenty)
(( plenty == 2 )) || fail "out of capacity: ${plenty} nodes of the other set, 2 needed"
(( $(set_nodes ca-scarce) == 1 )) || fail "out of capacity: the set has $(set_nodes ca-scarce) nodes, 1 kept"
say "out of capacity: the other set grew by ${plenty}; all 3 pods bound"
kubectl delete deployment -n "${ns}" ca-scarce-load --wait=true >/dev/null

# loops_since LINE: how many loops cluster-autoscaler started since LINE.
loops_since() { log_from "$1" | grep -c "Starting main loop" || true; }
# loop_errors: how many of its loops cluster-autoscaler counted failed
# (its errors_total metric), since it started.
loop_errors() { curl -sf http://127.0.0.1:18087/metrics | awk '/^cluster_autoscaler_errors_total/ {s += $2} END {print s + 0}'; }
# failed_reads LINE: cluster-autoscaler's lines since LINE that say a loop
# ended on a cloud provider's error, or that a call a loop reads every
# group with failed.
failed_reads() {
  log_from "$1" | grep -E "Failed to refresh cloud provider|Failed to recompute template node infos|Failed to update node registry|Failed to update cluster state|Failed to fix node group sizes|Unable to build proper template node|Error on gRPC call (NodeGroups|NodeGroupTargetSize|NodeGroupNodes|NodeGroupTemplateNodeInfo|NodeGroupForNode)\b" || true
}
ready_nodes() { kubectl get nodes -l "nodeset.dev/nodeset=$1" --no-headers 2>/dev/null | grep -cw Ready || true; }
# expect_set SET WANT SECONDS WHAT: as expect, for SET and the pods of
# ca-steady-load.
expect_set() {
  local set=$1 want=$2 limit=$3 what=$4 n most pending
  most=$(set_nodes "${set}")
  local bound=$(( most > want ? most : want ))
  local deadline=$(( $(date +%s) + limit ))
  while (( $(date +%s) < deadline )); do
    n=$(set_nodes "${set}")
    (( n > most )) && most=$n
    (( most > bound )) && fail "${what}: ${most} nodes, ${want} needed"
    pending=$(kubectl get pods -n "${ns}" -l app=ca-steady-load --field-selector=spec.nodeName= --no-headers 2>/dev/null | wc -l)
    if (( n == want && pending == 0 )); then
      say "${what}: ${want} needed, ${most} at most, ${n} now"
      return 0
    fi
    sleep 1
  done
  fail "${what}: not ${want} nodes within ${limit}s (${n} now, ${pending} pods pending)"
}

# A loop outlives NodeSets deleted, being deleted or stripped of
# spec.autoscaling while it runs. cluster-autoscaler lists the node groups
# once a loop and then reads every group of that list: an error from its
# target size or its instances ends the loop for every group, and so, up
# to cluster-autoscaler 1.33, does one from its template but
# Unimplemented. A tenant churns NodeSets (each round makes four and
# deletes the four of the round before, and takes spec.autoscaling off
# another set and puts it back) while a third set is scaled up and down:
# it must scale exactly, and no loop may fail or read a group with an
# error. Whether a round lands between a loop's list and its reads is
# chance; the churn lasts dozens of loops.
{ set_yaml ca-steady ca-check steady; set_yaml ca-toggle ca-check churn; } | kubectl apply -f - >/dev/null
churn_sets() { local i; for i in 1 2 3 4; do echo "ca-churn-$1-$i"; done; }
churn() {
  local round=0
  while [[ -f "${run}/churn" ]]; do
    round=$(( round + 1 ))
    for name in $(churn_sets "${round}"); do set_yaml "${name}" ca-check churn; done | kubectl apply -f - >/dev/null 2>&1 &
    (( round > 1 )) && kubectl delete nodeset -n "${ns}" $(churn_sets $(( round - 1 ))) --wait=false >/dev/null 2>&1 &
    kubectl patch nodeset -n "${ns}" ca-toggle --type=json -p '[{"op":"remove","path":"/spec/autoscaling"}]' >/dev/null 2>&1 &
    wait
    kubectl patch nodeset -n "${ns}" ca-toggle --type=merge -p '{"spec":{"autoscaling":{"minReplicas":0,"maxReplicas":10}}}' >/dev/null 2>&1 || true
    echo "${round}" >"${run}/churn-rounds"
  done
  kubectl delete nodeset -n "${ns}" $(churn_sets "${round}") --wait=false >/dev/null 2>&1 || true
}
churn_from=$(log_mark)
errors_before=$(loop_errors)
touch "${run}/churn"
churn &
churn_pid=$!
selector=steady deployment ca-steady-load 2 1500m
expect_set ca-steady 2 180 "NodeSets churning: scale-up of another set from zero (2 pods of 1.5 CPU)"
kubectl delete deployment -n "${ns}" ca-steady-load --wait=true >/dev/null
expect_set ca-steady 0 300 "NodeSets churning: scale-down of that set to zero"
wait_for 120 "20 loops of cluster-autoscaler during the churn" eval '(( $(loops_since "${churn_from}") >= 20 ))'
rm -f "${run}/churn"
wait "${churn_pid}" || true
churn_pid=
failed=$(failed_reads "${churn_from}")
[[ -z "${failed}" ]] || fail "NodeSets churning: cluster-autoscaler read a group with an error or ended a loop:
$(head -n 5 <<<"${failed}")"
(( $(loop_errors) == errors_before )) || fail "NodeSets churning: cluster-autoscaler counted $(( $(loop_errors) - errors_before )) failed loops"
say "NodeSets churning: $(cat "${run}/churn-rounds") rounds (4 sets made and 4 deleted, spec.autoscaling off and on, each) over $(loops_since "${churn_from}") loops; no loop failed, no group read with an error"

# A NodeSet below its minReplicas that its class gives fewer Nodes: one
# of 3 and one of 1005 (min = max = replicas), each in a class with room
# for one Node, made as a tenant may with the webhook away (it refuses
# them; here it is told to pass over objects with a label of the check's
# while they are made). nodeset lists each missing replica as a pending instance,
# at most 1000 a set, and answers the larger one's target size as its
# Node and those 1000. cluster-autoscaler must find both sizes correct:
# past --max-node-provision-time (30 s here) it would otherwise lower the
# target to the registered Node (fixNodeGroupSize), which cannot go below
# the min size, and that refusal ends every loop for every group. It
# gives up on none of the pending instances (min size reached), leaves
# both sets' replicas alone, and goes on scaling another set.
# admit_all: the webhook back on every NodeSet.
admit_all() {
  kubectl patch validatingwebhookconfiguration nodeset.dev --type=json -p '[{"op":"replace","path":"/webhooks/0/objectSelector","value":{}}]' >/dev/null
  unadmitted=
}
short_yaml() {
  cat <<YAML
---
apiVersion: nodeset.dev/v1alpha1
kind: NodeSet
metadata: {name: $1, namespace: ${ns}, labels: {example.com/ca-check-unadmitted: "true"}}
spec:
  nodeClassName: $2
  replicas: $3
  autoscaling: {minReplicas: $3, maxReplicas: $3}
  template:
    labels: {example.com/ca-check: short}
YAML
}
{ class_yaml ca-tight-a '' 'limits: {maxNodes: 1}'; class_yaml ca-tight-b '' 'limits: {maxNodes: 1}'; } | kubectl apply -f - >/dev/null
[[ "$(kubectl get validatingwebhookconfiguration nodeset.dev -o jsonpath='{.webhooks[0].name}')" == nodesets.nodeset.dev ]] ||
  fail "the webhook configuration nodeset.dev does not start with nodesets.nodeset.dev"
unadmitted=1
kubectl patch validatingwebhookconfiguration nodeset.dev --type=json -p '[{"op":"add","path":"/webhooks/0/objectSelector","value":{"matchExpressions":[{"key":"example.com/ca-check-unadmitted","operator":"DoesNotExist"}]}}]' >/dev/null
{ short_yaml ca-short ca-tight-a 3; short_yaml ca-huge ca-tight-b 1005; } | kubectl apply -f - >/dev/null
admit_all
wait_for 120 "one Ready node of each set below its min size" eval '(( $(ready_nodes ca-short) == 1 && $(ready_nodes ca-huge) == 1 ))'
kill "${ca_pid}"
wait "${ca_pid}" 2>/dev/null || true
short_from=$(log_mark)
start_ca --max-node-provision-time=30s
say "cluster-autoscaler restarted with --max-node-provision-time=30s; ca-short: 1 node of 3, ca-huge: 1 node of 1005"
wait_for 60 "cluster-autoscaler's metrics" eval '[[ -n "$(loop_errors)" ]] && curl -sf http://127.0.0.1:18087/metrics >/dev/null'
min_size_skip() { log_from "${short_from}" | grep -cE "Node group team-a/$1 min size reached, skipping removal of $2 unregistered nodes" || true; }
wait_for 180 "cluster-autoscaler finding the pending instances long unregistered" eval \
  '(( $(min_size_skip ca-huge 1000) > 0 && $(min_size_skip ca-short 2) > 0 ))'
# fixNodeGroupSize runs after that in each loop: two more loops.
skip_from=$(log_mark)
wait_for 60 "two more loops" eval '(( $(loops_since "${skip_from}") >= 2 ))'
selector=steady deployment ca-steady-load 2 1500m
expect_set ca-steady 2 180 "below min size: scale-up of another set from zero (2 pods of 1.5 CPU)"
failed=$(failed_reads "${short_from}")
[[ -z "${failed}" ]] || fail "below min size: cluster-autoscaler ended a loop or read a group with an error:
$(head -n 5 <<<"${failed}")"
if log_from "${short_from}" | grep -E "Decreasing size of team-a/ca-(short|huge)" >&2; then
  fail "below min size: cluster-autoscaler lowered the target of a set below its min size"
fi
(( $(loop_errors) == 0 )) || fail "below min size: cluster-autoscaler counted $(loop_errors) failed loops"
[[ "$(set_replicas ca-short) $(set_replicas ca-huge)" == "3 1005" ]] || fail "below min size: replicas $(set_replicas ca-short) and $(set_replicas ca-huge), 3 and 1005 wanted"
say "below min size: over $(loops_since "${short_from}") loops, $(min_size_skip ca-short 2) and $(min_size_skip ca-huge 1000) 'min size reached, skipping removal' lines for ca-short (2 pending) and ca-huge (1000 pending); no size fixed, no loop failed, replicas still 3 and 1005"
kubectl delete deployment -n "${ns}" ca-steady-load --wait=true >/dev/null
kubectl delete nodeset -n "${ns}" ca-short ca-huge --wait=false >/dev/null
say "cluster-autoscaler scaled the NodeSet exactly in every step"
