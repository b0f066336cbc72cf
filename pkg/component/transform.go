package component

import (
	corev1 "k8s.io/api/core/v1"
)

// StripNodeStatus is StripManagedFields that also keeps, of a Node's status,
// only its conditions and the two fields of its system information that say
// a kubelet reported on it (nodeutil.KubeletReported: its version and
// machine ID, which a kubelet's own registration carries before any
// condition): a real Node's images, addresses, capacity and the rest of its
// system information are most of its size, and a process that reads no
// more of Nodes than their metadata, spec and conditions (the
// nodeset-controller) need not hold them for every Node of the cluster.
// Such a process must never write a cached Node's status.
func StripNodeStatus(obj any) (any, error) {
	obj, err := StripManagedFields(obj)
	if node, ok := obj.(*corev1.Node); ok {
		node.Status = corev1.NodeStatus{Conditions: node.Status.Conditions, NodeInfo: reportedBy(node.Status.NodeInfo)}
	}
	return obj, err
}

// reportedBy is what the cache keeps of a Node's system information.
func reportedBy(info corev1.NodeSystemInfo) corev1.NodeSystemInfo {
	return corev1.NodeSystemInfo{KubeletVersion: info.KubeletVersion, MachineID: info.MachineID}
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
		node.Status = corev1.NodeStatus{Conditions: node.Status.Conditions, NodeInfo: reportedBy(node.Status.NodeInfo),
			VolumesAttached: node.Status.VolumesAttached}
	}
	return obj, err
}
