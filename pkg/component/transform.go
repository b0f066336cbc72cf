package component

import (
	corev1 "k8s.io/api/core/v1"
)

// StripNodeStatus is StripManagedFields that also keeps, of a Node's status,
// only its conditions: a real Node's images, addresses, capacity and system
// information are most of its size, and a process that reads no more of
// Nodes than their metadata, spec and conditions (the nodeset-controller)
// need not hold them for every Node of the cluster. Such a process must
// never write a cached Node's status.
func StripNodeStatus(obj any) (any, error) {
	obj, err := StripManagedFields(obj)
	if node, ok := obj.(*corev1.Node); ok {
		node.Status = corev1.NodeStatus{Conditions: node.Status.Conditions}
	}
	return obj, err
}
