// Package plan owns the rules of a NodeSet that more than one component
// applies: how many nodes it wants, which of its Nodes are going, how a
// rolling update proceeds, how large its cloud group is, which Nodes go
// first on scale-down and how much of a NodeClass's limits is in use. The
// nodeset controller, the node controller, the admission webhook and the
// cluster-autoscaler API all ask here, so each rule has one answer. It is
// pure: no API calls, no clocks of its own.
package plan

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// Replicas is the number of nodes the set wants: spec.replicas, 1 when unset.
func Replicas(set *nodesetv1alpha1.NodeSet) int32 {
	if set.Spec.Replicas == nil {
		return 1
	}
	return *set.Spec.Replicas
}

// Active are the Nodes not being deleted.
func Active(nodes []*corev1.Node) []*corev1.Node {
	out := make([]*corev1.Node, 0, len(nodes))
	for _, n := range nodes {
		if n.DeletionTimestamp == nil {
			out = append(out, n)
		}
	}
	return out
}

// Staying are the Nodes neither being deleted nor marked for replacement
// (nodeset.dev/replace: their replacement comes up first, then they go).
func Staying(nodes []*corev1.Node) []*corev1.Node {
	out := make([]*corev1.Node, 0, len(nodes))
	for _, n := range nodes {
		if n.DeletionTimestamp == nil && n.Annotations[nodesetv1alpha1.AnnotationReplace] == "" {
			out = append(out, n)
		}
	}
	return out
}

// DeleteList is the set of Node names in the NodeSet's delete-nodes
// annotation (cluster-autoscaler's DeleteNodes): Nodes that go whatever else
// the plan says.
func DeleteList(set *nodesetv1alpha1.NodeSet) map[string]bool {
	out := map[string]bool{}
	for _, name := range strings.Split(set.Annotations[nodesetv1alpha1.AnnotationDeleteNodes], ",") {
		if name = strings.TrimSpace(name); name != "" {
			out[name] = true
		}
	}
	return out
}

// ReadySince is when the Node's Ready condition last changed, and whether it is Ready.
func ReadySince(node *corev1.Node) (time.Time, bool) {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.LastTransitionTime.Time, c.Status == corev1.ConditionTrue
		}
	}
	return time.Time{}, false
}

// Available is whether the Node has been Ready for at least minReady at now.
func Available(node *corev1.Node, minReady time.Duration, now time.Time) bool {
	since, ready := ReadySince(node)
	return ready && (minReady == 0 || !since.Add(minReady).After(now))
}
