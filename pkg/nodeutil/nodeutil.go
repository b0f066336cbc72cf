// Package nodeutil holds the small questions every nodeset component asks of
// a core v1 Node.
package nodeutil

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// The phases of a nodeset Node, as metrics and kubectl nodeset show them.
const (
	// PhaseProvisioning: the Node exists, its machine does not yet (no providerID).
	PhaseProvisioning = "provisioning"
	// PhaseRegistering: the machine exists; its kubelet is not Ready yet or
	// the startup taint is still on.
	PhaseRegistering = "registering"
	// PhaseReady: Ready and untainted.
	PhaseReady = "ready"
	// PhaseDraining: deleted; its pods are being evicted.
	PhaseDraining = "draining"
	// PhaseDeleting: deleted and drained; its machine is going away.
	PhaseDeleting = "deleting"
)

// NodeSetOf is the namespace and name of the NodeSet whose Node labels
// these are; ok is false for a Node of no NodeSet (a lone or foreign Node).
func NodeSetOf(labels map[string]string) (namespace, name string, ok bool) {
	namespace, name = labels[nodesetv1alpha1.LabelNodeSetNamespace], labels[nodesetv1alpha1.LabelNodeSet]
	return namespace, name, namespace != "" && name != ""
}

// Phase returns the Node's phase.
func Phase(node *corev1.Node) string {
	switch {
	case node.DeletionTimestamp != nil && node.Annotations[nodesetv1alpha1.AnnotationDrainFinished] != "":
		return PhaseDeleting
	case node.DeletionTimestamp != nil:
		return PhaseDraining
	case node.Spec.ProviderID == "":
		return PhaseProvisioning
	case !IsReady(node) || HasStartupTaint(node):
		return PhaseRegistering
	}
	return PhaseReady
}

// HasStartupTaint reports whether the Node still has nodeset's startup taint.
func HasStartupTaint(node *corev1.Node) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == nodesetv1alpha1.TaintUnregistered {
			return true
		}
	}
	return false
}

// IsReady reports whether the Node's Ready condition is True.
func IsReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// WithoutString returns list without any s, as a new slice.
func WithoutString(list []string, s string) []string {
	return slices.DeleteFunc(slices.Clone(list), func(item string) bool { return item == s })
}
