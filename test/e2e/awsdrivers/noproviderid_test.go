package awsdrivers

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers/awscloud"
	"nodeset.dev/nodeset/drivers/eksasg"
	"nodeset.dev/nodeset/test/framework"
)

// TestALifecycleActionWaitsForTheDrainOfAKubeletNodeWithoutProviderID: an
// instance of the group whose termination waits on nodeset's hook has a
// Node its kubelet registered, run with an external cloud provider: named
// by the instance's private DNS name, without spec.providerID, with a pod
// on it, and none of the NodeSet's replicas (the group's sync adopts no
// Node of a terminating instance). The lifecycle action is completed only
// once that Node is cordoned and its pod evicted; a Node without
// providerID of another name is left alone.
func TestALifecycleActionWaitsForTheDrainOfAKubeletNodeWithoutProviderID(t *testing.T) {
	e, ctx := newNoticeEnv(t)
	const ns = "noproviderid"
	group, nodes := e.spotSet(ns, "noproviderid", "", 1)
	keep := nodes[0].Spec.ProviderID

	t.Log("the group gets an instance while the node controller is down; its termination waits on nodeset's hook")
	e.ctrl.Node.Kill(syscall.SIGKILL)
	e.update(ns, "web", func(s *nodesetv1alpha1.NodeSet) { s.Spec.Replicas = ptr.To[int32](2) })
	_, err := e.asg.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: aws.String(group), DesiredCapacity: aws.Int32(2)})
	require.NoError(t, err)
	_, live, err := e.instances(group)
	require.NoError(t, err)
	require.Len(t, live, 2)
	var instance string
	for providerID := range live {
		if providerID != keep {
			instance, err = awscloud.InstanceID(providerID)
			require.NoError(t, err)
		}
	}
	e.lifecycle.holdForHook(instance)
	described, err := e.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{instance}})
	require.NoError(t, err)
	dnsName := aws.ToString(described.Reservations[0].Instances[0].PrivateDnsName)
	require.NotEmpty(t, dnsName)
	const otherName = "ip-192-0-2-10." + region + ".compute.internal"

	t.Log("its kubelet registers its Node without providerID, and a pod runs there")
	require.NoError(t, framework.WaitForDefaultServiceAccount(ctx, e.kube, ns))
	now := metav1.Now()
	for node, pod := range map[string]string{dnsName: "app", otherName: "other-app"} {
		_, err := e.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{corev1.LabelHostname: node}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
				Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			// Node names come again in the next test's moto.
			_ = e.kube.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{})
		})
		_, err = e.kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = e.kube.CoreV1().Pods(ns).Delete(context.Background(), pod, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		})
	}
	require.NoError(t, e.ctrl.Node.Start())

	e.queue.Put(t, framework.TerminateLifecycleAction(region, group, eksasg.HookName, instance, "token-kubelet", time.Now()))
	// The pod is there until evicted (and then finished, as its kubelet
	// would): the action must not be completed before.
	var completedWithPod bool
	var cordonedBefore bool
	e.waitFor("the pod evicted and gone, or the action completed", 2*time.Minute, func() (bool, string) {
		completed := len(e.lifecycle.actions()) > 0
		node, err := e.kube.CoreV1().Nodes().Get(ctx, dnsName, metav1.GetOptions{})
		require.NoError(t, err)
		pod, err := e.kube.CoreV1().Pods(ns).Get(ctx, "app", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		require.NoError(t, err)
		if completed {
			completedWithPod = true
			return true, ""
		}
		if pod.DeletionTimestamp != nil {
			cordonedBefore = node.Spec.Unschedulable
			_ = e.kube.CoreV1().Pods(ns).Delete(ctx, "app", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
		return false, fmt.Sprintf("pod app on %s, deleting: %v; cordoned: %v", dnsName, pod.DeletionTimestamp != nil, node.Spec.Unschedulable)
	})
	require.False(t, completedWithPod, "the lifecycle action was completed while its instance's Node still had its pod")
	assert.True(t, cordonedBefore, "the Node was cordoned before its pod was evicted")
	e.waitFor("the lifecycle action completed", time.Minute, func() (bool, string) {
		return len(e.lifecycle.actions()) > 0, "not yet"
	})
	first := e.lifecycle.actions()[0]
	assert.Equal(t, completedAction{instance: instance, token: "token-kubelet", result: "CONTINUE", hook: eksasg.HookName, at: first.at}, first)

	node, err := e.kube.CoreV1().Nodes().Get(ctx, dnsName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, node.Spec.Unschedulable, "the Node stays cordoned")
	assert.Empty(t, node.Spec.ProviderID, "it was not adopted")
	assert.Empty(t, node.Finalizers, "nor taken")
	other, err := e.kube.CoreV1().Nodes().Get(ctx, otherName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.False(t, other.Spec.Unschedulable, "a Node without providerID of another name is left alone")
	otherPod, err := e.kube.CoreV1().Pods(ns).Get(ctx, "other-app", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Nil(t, otherPod.DeletionTimestamp, "and so is its pod")
}
