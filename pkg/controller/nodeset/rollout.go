package nodeset

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// plan is what one sync does to a NodeSet's Nodes.
type plan struct {
	// create is how many Nodes to create with the current template.
	create int
	// remove are the Nodes to delete.
	remove []*corev1.Node
	// replacing is true when remove holds outdated Nodes a rollout replaces.
	replacing bool
}

// rolling reports whether the set is in a rolling update: its strategy is
// RollingUpdate, it is not paused and some of its Nodes are outdated.
func rolling(set *nodesetv1alpha1.NodeSet, templateHash string, active []*corev1.Node) bool {
	if set.Spec.Paused || !isRollingUpdate(set) {
		return false
	}
	for _, n := range active {
		if n.Labels[nodesetv1alpha1.LabelTemplateHash] != templateHash {
			return true
		}
	}
	return false
}

func isRollingUpdate(set *nodesetv1alpha1.NodeSet) bool {
	return set.Spec.Strategy.Type == "" || set.Spec.Strategy.Type == nodesetv1alpha1.RollingUpdateStrategy
}

// planReplicas decides the creations and deletions that bring the set's Nodes
// (nodes, terminating ones included) towards spec.replicas Nodes of the
// current template.
//
// Outside a rolling update it is a ReplicaSet: create or delete the
// difference, outdated and unhealthy Nodes going first. In a rolling update it
// is a Deployment with one Node per pod: never more than replicas + maxSurge
// Nodes (a terminating Node counts, its machine still exists) and never fewer
// than replicas - maxUnavailable available Nodes that are not terminating.
func planReplicas(set *nodesetv1alpha1.NodeSet, templateHash string, nodes []*corev1.Node, now time.Time) plan {
	// Nodes listed for deletion (cluster-autoscaler's DeleteNodes) go
	// whatever else happens; the rest is planned without them.
	listed := DeleteList(set)
	var forced, rest []*corev1.Node
	for _, n := range nodes {
		if n.DeletionTimestamp == nil && listed[n.Name] {
			forced = append(forced, n)
		} else {
			rest = append(rest, n)
		}
	}
	p := planRest(set, templateHash, rest, now)
	if len(forced) > 0 {
		p.remove = append(forced, p.remove...)
	}
	return p
}

// DeleteList is the set of Node names in the NodeSet's delete-nodes annotation.
func DeleteList(set *nodesetv1alpha1.NodeSet) map[string]bool {
	out := map[string]bool{}
	for _, name := range strings.Split(set.Annotations[nodesetv1alpha1.AnnotationDeleteNodes], ",") {
		if name = strings.TrimSpace(name); name != "" {
			out[name] = true
		}
	}
	return out
}

// RollingOut reports whether a rolling update of the set is under way, by
// the template hash its status last recorded: some Node not being deleted
// has another one.
func RollingOut(set *nodesetv1alpha1.NodeSet, nodes []*corev1.Node) bool {
	return set.Status.TemplateHash != "" && rolling(set, set.Status.TemplateHash, activeNodes(nodes))
}

func planRest(set *nodesetv1alpha1.NodeSet, templateHash string, nodes []*corev1.Node, now time.Time) plan {
	replicas := int(ptrValue(set.Spec.Replicas))
	active := activeNodes(nodes)
	minReady := time.Duration(set.Spec.MinReadySeconds) * time.Second
	if !rolling(set, templateHash, active) {
		switch diff := len(active) - replicas; {
		case diff < 0:
			create := -diff
			if isRollingUpdate(set) {
				// Nodes still draining count toward maxSurge here too: at the
				// tail of a rollout the last outdated Nodes are terminating
				// while the last new ones are still to be made.
				surge, _ := rollingBounds(set, replicas)
				create = min(create, max(replicas+surge-len(nodes), 0))
			}
			return plan{create: create}
		case diff > 0:
			return plan{remove: chooseVictims(active, diff, set.Spec.DeletePolicy, templateHash)}
		}
		return plan{}
	}

	surge, unavailable := rollingBounds(set, replicas)
	var current, outdated []*corev1.Node
	available := 0
	for _, n := range active {
		if isAvailable(n, minReady, now) {
			available++
		}
		if n.Labels[nodesetv1alpha1.LabelTemplateHash] == templateHash {
			current = append(current, n)
		} else {
			outdated = append(outdated, n)
		}
	}

	p := plan{replacing: true}
	if room := replicas + surge - len(nodes); room > 0 {
		p.create = max(min(room, replicas-len(current)), 0)
	}

	// Remove outdated Nodes while enough stay available: an unavailable one
	// costs nothing, an available one costs one. Nodes of the new template
	// still coming up are not available, so they hold removals back.
	minAvailable := replicas - unavailable
	for _, n := range chooseVictims(outdated, len(outdated), set.Spec.DeletePolicy, templateHash) {
		if isAvailable(n, minReady, now) {
			if available-1 < minAvailable {
				continue
			}
			available--
		}
		p.remove = append(p.remove, n)
	}
	return p
}

// rollingBounds resolves maxSurge (rounded up) and maxUnavailable (rounded
// down) against replicas, with the defaults 1 and 0. When both come to zero
// (small percentages of few replicas) maxUnavailable is 1, as for Deployments,
// so that a rollout can always move.
func rollingBounds(set *nodesetv1alpha1.NodeSet, replicas int) (surge, unavailable int) {
	surgeValue, unavailableValue := intstr.FromInt32(1), intstr.FromInt32(0)
	if ru := set.Spec.Strategy.RollingUpdate; ru != nil {
		if ru.MaxSurge != nil {
			surgeValue = *ru.MaxSurge
		}
		if ru.MaxUnavailable != nil {
			unavailableValue = *ru.MaxUnavailable
		}
	}
	surge, err := intstr.GetScaledValueFromIntOrPercent(&surgeValue, replicas, true)
	if err != nil {
		surge = 1
	}
	unavailable, err = intstr.GetScaledValueFromIntOrPercent(&unavailableValue, replicas, false)
	if err != nil {
		unavailable = 0
	}
	if surge == 0 && unavailable == 0 {
		unavailable = 1
	}
	return surge, min(unavailable, replicas)
}

// isAvailable: Ready for at least minReady.
func isAvailable(node *corev1.Node, minReady time.Duration, now time.Time) bool {
	since, ready := readyTransition(node)
	return ready && (minReady == 0 || !since.Add(minReady).After(now))
}

// GroupSize is the size the cloud group of a group-driver NodeSet should
// have: spec.replicas, plus maxSurge while a rolling update replaces
// outdated Nodes (never more than there are outdated Nodes left). The node
// controller raises the group to it; the rollout then removes outdated
// Nodes here as the new ones become available, each removal lowering the
// group by one.
func GroupSize(set *nodesetv1alpha1.NodeSet, templateHash string, nodes []*corev1.Node) int32 {
	replicas := int(ptrValue(set.Spec.Replicas))
	active := activeNodes(nodes)
	if !rolling(set, templateHash, active) {
		return int32(replicas)
	}
	outdated := 0
	for _, n := range active {
		if n.Labels[nodesetv1alpha1.LabelTemplateHash] != templateHash {
			outdated++
		}
	}
	surge, _ := rollingBounds(set, replicas)
	return int32(replicas + min(surge, outdated))
}
