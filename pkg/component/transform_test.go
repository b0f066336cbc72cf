package component

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStripNodeStatusKeepsWhatTheNodeSetControllerReads(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"k": "v"}, Annotations: map[string]string{"a": "b"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.NodeSpec{ProviderID: "simulated:///a", Unschedulable: true},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Images:     []corev1.ContainerImage{{Names: []string{"registry.example/app:1"}, SizeBytes: 1}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.37.2"},
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
	assert.Equal(t, corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}, got.Status)

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
			NodeInfo:        corev1.NodeSystemInfo{KubeletVersion: "v1.37.2"},
		},
	}
	out, err := StripNodeStatusButVolumes(node)
	require.NoError(t, err)
	got := out.(*corev1.Node)
	assert.Nil(t, got.ManagedFields)
	assert.Equal(t, corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		VolumesAttached: attached}, got.Status)
}

func TestSpamKeyByReasonSeparatesReasons(t *testing.T) {
	event := func(reason string) *corev1.Event {
		return &corev1.Event{Source: corev1.EventSource{Component: "node-controller"}, Type: corev1.EventTypeNormal, Reason: reason,
			InvolvedObject: corev1.ObjectReference{Kind: "NodeSet", Namespace: "team-a", Name: "web", UID: "u"}}
	}
	assert.Equal(t, SpamKeyByReason(event("Provisioned")), SpamKeyByReason(event("Provisioned")))
	assert.NotEqual(t, SpamKeyByReason(event("Provisioned")), SpamKeyByReason(event("OrphanMachineDeleted")))
}
