package component

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// kubeletInfo is the system information a kubelet reports of its node.
var kubeletInfo = corev1.NodeSystemInfo{KubeletVersion: "v1.37.2", MachineID: "ec2a7d1c0e3f4b5a9c8d7e6f5a4b3c2d",
	OSImage: "Debian GNU/Linux 13", KernelVersion: "6.12.0", ContainerRuntimeVersion: "containerd://2.1.4", Architecture: "amd64"}

// reported is what the caches keep of kubeletInfo: what says a kubelet
// reported on the Node (nodeutil.KubeletReported), before any condition.
var reported = corev1.NodeSystemInfo{KubeletVersion: "v1.37.2", MachineID: "ec2a7d1c0e3f4b5a9c8d7e6f5a4b3c2d"}

func TestStripNodeStatusKeepsWhatTheNodeSetControllerReads(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"k": "v"}, Annotations: map[string]string{"a": "b"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.NodeSpec{ProviderID: "simulated:///a", Unschedulable: true},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Images:     []corev1.ContainerImage{{Names: []string{"registry.example/app:1"}, SizeBytes: 1}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
			NodeInfo:   kubeletInfo,
		},
	}
	out, err := StripNodeStatus(node)
	require.NoError(t, err)
	got := out.(*corev1.Node)
	assert.Nil(t, got.ManagedFields)
	assert.Equal(t, "simulated:///a", got.Spec.ProviderID)
	assert.True(t, got.Spec.Unschedulable)
	assert.Equal(t, map[string]string{"k": "v"}, got.Labels)
	assert.Equal(t, map[string]string{"a": "b"}, got.Annotations)
	assert.Equal(t, corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		NodeInfo: reported}, got.Status)

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}}
	out, err = StripNodeStatus(ns)
	require.NoError(t, err)
	assert.Nil(t, out.(*corev1.Namespace).ManagedFields, "other objects lose their managed fields alone")
}

func TestStripNodeStatusButVolumesKeepsWhatTheNodeControllerReads(t *testing.T) {
	attached := []corev1.AttachedVolume{{Name: "kubernetes.io/csi/ebs^vol-1", DevicePath: "/dev/xvdba"}}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "a", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Status: corev1.NodeStatus{
			Conditions:      []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			VolumesAttached: attached,
			Images:          []corev1.ContainerImage{{Names: []string{"registry.example/app:1"}, SizeBytes: 1}},
			NodeInfo:        kubeletInfo,
		},
	}
	out, err := StripNodeStatusButVolumes(node)
	require.NoError(t, err)
	got := out.(*corev1.Node)
	assert.Nil(t, got.ManagedFields)
	assert.Equal(t, corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		NodeInfo: reported, VolumesAttached: attached}, got.Status)
}

// TestACachedKubeletRegistrationIsStillTheKubelets: a kubelet's own
// registration carries its system information before any condition. As
// the controllers' caches hold it, it is still a Node a kubelet reported on
// (nodeutil.KubeletReported, nodeutil.Foreign): without that, a kubelet
// that registers a Node labelled with a class, no condition yet, would
// pass for an admin's lone Node, and get a machine of that class.
func TestACachedKubeletRegistrationIsStillTheKubelets(t *testing.T) {
	for name, strip := range map[string]func(any) (any, error){"StripNodeStatus": StripNodeStatus, "StripNodeStatusButVolumes": StripNodeStatusButVolumes} {
		for _, info := range []corev1.NodeSystemInfo{kubeletInfo, {KubeletVersion: "v1.37.2"}, {MachineID: "ec2a7d1c0e3f4b5a9c8d7e6f5a4b3c2d"}} {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "evil", Labels: map[string]string{nodesetv1alpha1.LabelNodeClass: "gpu"}},
				Status: corev1.NodeStatus{NodeInfo: info}}
			require.True(t, nodeutil.KubeletReported(node))
			out, err := strip(node)
			require.NoError(t, err)
			assert.True(t, nodeutil.KubeletReported(out.(*corev1.Node)), "%s of %+v", name, info)
		}
	}
}

func TestSpamKeyByReasonSeparatesReasons(t *testing.T) {
	event := func(reason string) *corev1.Event {
		return &corev1.Event{Source: corev1.EventSource{Component: "node-controller"}, Type: corev1.EventTypeNormal, Reason: reason,
			InvolvedObject: corev1.ObjectReference{Kind: "NodeSet", Namespace: "team-a", Name: "web", UID: "u"}}
	}
	assert.Equal(t, SpamKeyByReason(event("Provisioned")), SpamKeyByReason(event("Provisioned")))
	assert.NotEqual(t, SpamKeyByReason(event("Provisioned")), SpamKeyByReason(event("OrphanMachineDeleted")))
}
