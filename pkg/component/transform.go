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

// StripNodeStatusButVolumes is StripNodeStatus that also keeps the volumes
// attached to each Node, which the node controller's drain waits for
// (drain.waitForVolumeDetach). The process may update cached Nodes: an
// update of a Node leaves its status as the API server has it (only the
// status subresource writes it); its status writes must be patches of
// their own fields.
func StripNodeStatusButVolumes(obj any) (any, error) {
	obj, err := StripManagedFields(obj)
	if node, ok := obj.(*corev1.Node); ok {
		node.Status = corev1.NodeStatus{Conditions: node.Status.Conditions, VolumesAttached: node.Status.VolumesAttached}
	}
	return obj, err
}
