package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// kubeletNode is a Node a kubelet registered for instance, before its
// group's sync made or adopted one: none of a NodeSet's replicas, not held.
func kubeletNode(name, instance string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.NodeSpec{ProviderID: "aws:///eu-west-1a/" + instance}}
}

// evictionsOf counts the evictions posted for pods of namespace/name.
func evictionsOf(f *fixture, namespace, name string) int {
	count := 0
	for _, action := range f.kube.Actions() {
		if action.GetVerb() == "create" && action.GetSubresource() == "eviction" && action.GetNamespace() == namespace {
			if create, ok := action.(core.CreateAction); ok {
				if eviction, ok := create.GetObject().(*policyv1.Eviction); ok && eviction.Name == name {
					count++
				}
			}
		}
	}
	return count
}

// TestALifecycleActionOfAMachineWithAnUnheldNodeWaitsForItsDrain: a
// kubelet may register its Node before the group's sync makes or adopts
// one, and pods may be scheduled there; once its instance is terminating
// the sync adopts it no more. A lifecycle action of that instance is
// completed only after the Node is cordoned and its pods evicted, the
// action heartbeaten meanwhile and its message left on the queue. An
// instance with no Node at all has its action completed at once; so has
// one that is not the group's, whatever Node has its id (the notice's
// word alone drains no Node).
func TestALifecycleActionOfAMachineWithAnUnheldNodeWaitsForItsDrain(t *testing.T) {
	ctx := context.Background()
	queued := asgClassOf("queued", "https://sqs.eu-west-1.amazonaws.com/111122223333/queued", "")
	const nodeName, otherName = "ip-10-0-0-1.eu-west-1.compute.internal", "ip-10-0-0-2.eu-west-1.compute.internal"
	f, queue := newScopeFixture(t, []*nodesetv1alpha1.NodeClass{queued}, kubeletNode(nodeName, "i-0kubelet"), podOn("app", nodeName),
		kubeletNode(otherName, "i-0other"), podOn("other-app", otherName))
	group := scopeGroups(f)
	group.groups["queued-group"] = &drivers.GroupStatus{Name: "queued-group", Machines: []drivers.MachineStatus{
		{Name: nodeName, ProviderID: "aws:///eu-west-1a/i-0kubelet", State: drivers.MachineStopping}}}

	action := lifecycleNotice("r-kubelet", "queued-group", "i-0kubelet")
	action.Lifecycle.HeartbeatTimeout = 0 // its hook could not be read
	gone := lifecycleNotice("r-gone", "queued-group", "i-0gone")
	other := lifecycleNotice("r-other", "queued-group", "i-0other") // not the group's
	queue.notices = []drivers.Interruption{action, gone, other}
	require.Equal(t, consumeOK, f.controller.consumeOnce(ctx, "queued", nil))
	assert.Equal(t, []string{"queued-group", "queued-group"}, queue.completed, "the actions of the instances with no Node of theirs are completed at once")
	assert.Equal(t, []string{"r-gone", "r-other"}, queue.acked, "the draining one's message comes again")
	assert.False(t, f.get(otherName).Spec.Unschedulable, "a Node of an instance that is not the group's is left alone")
	assert.Zero(t, evictionsOf(f, "team-a", "other-app"))
	node := f.get(nodeName)
	assert.True(t, node.Spec.Unschedulable, "the Node is cordoned")
	assert.Equal(t, 1, evictionsOf(f, "team-a", "app"), "its pod is evicted")
	assert.Empty(t, node.Finalizers, "the Node is not taken")

	// The next delivery, past half the heartbeat timeout of the group's
	// class (recordingSource: a tenth of its 5-minute drain timeout).
	f.now = testNow.Add(20 * time.Second)
	queue.notices = []drivers.Interruption{action}
	require.Equal(t, consumeOK, f.controller.consumeOnce(ctx, "queued", nil))
	assert.Len(t, queue.completed, 2, "not completed while a pod is there")
	assert.Equal(t, 1, queue.beats, "the action is kept waiting by the heartbeat timeout of the group's class")
	assert.Equal(t, []string{"r-gone", "r-other"}, queue.acked)

	require.NoError(t, f.kube.CoreV1().Pods("team-a").Delete(ctx, "app", metav1.DeleteOptions{}))
	queue.notices = []drivers.Interruption{action}
	require.Equal(t, consumeOK, f.controller.consumeOnce(ctx, "queued", nil))
	assert.Len(t, queue.completed, 3, "drained: the action is completed")
	assert.Equal(t, []string{"r-gone", "r-other", "r-kubelet"}, queue.acked)
}

// TestALifecycleActionWaitsForTheDrainOfANodeWithoutProviderID: a kubelet
// run with an external cloud provider registers its Node without
// spec.providerID (the cloud controller manager sets it later), named as
// EKS names Nodes: the instance's private DNS name. Such a Node of the
// group's instance, named as the cloud describes the instance, is drained
// before the action is completed. A Node without providerID of another
// name is left alone, and so is the one of an instance the group does not
// have or whose name the cloud does not give yet.
func TestALifecycleActionWaitsForTheDrainOfANodeWithoutProviderID(t *testing.T) {
	ctx := context.Background()
	queued := asgClassOf("queued", "https://sqs.eu-west-1.amazonaws.com/111122223333/queued", "")
	const nodeName, otherName, unnamedName = "ip-10-0-0-1.eu-west-1.compute.internal", "ip-10-0-0-2.eu-west-1.compute.internal", "ip-10-0-0-3.eu-west-1.compute.internal"
	f, queue := newScopeFixture(t, []*nodesetv1alpha1.NodeClass{queued}, nodeWithoutProviderID(nodeName), podOn("app", nodeName),
		nodeWithoutProviderID(otherName), podOn("other-app", otherName), nodeWithoutProviderID(unnamedName), podOn("unnamed-app", unnamedName))
	group := scopeGroups(f)
	group.groups["queued-group"] = &drivers.GroupStatus{Name: "queued-group", Machines: []drivers.MachineStatus{
		{Name: nodeName, ProviderID: "aws:///eu-west-1a/i-0kubelet", State: drivers.MachineStopping},
		{ProviderID: "aws:///eu-west-1a/i-0unnamed", State: drivers.MachineStopping}, // EC2 does not describe it yet
	}}

	action := lifecycleNotice("r-kubelet", "queued-group", "i-0kubelet")
	other := lifecycleNotice("r-other", "queued-group", "i-0other") // not the group's
	unnamed := lifecycleNotice("r-unnamed", "queued-group", "i-0unnamed")
	queue.notices = []drivers.Interruption{action, other, unnamed}
	require.Equal(t, consumeOK, f.controller.consumeOnce(ctx, "queued", nil))
	assert.Equal(t, []string{"queued-group", "queued-group"}, queue.completed, "the actions with no Node of theirs are completed at once")
	assert.Equal(t, []string{"r-other", "r-unnamed"}, queue.acked, "the draining one's message comes again")
	for _, name := range []string{otherName, unnamedName} {
		assert.False(t, f.get(name).Spec.Unschedulable, "%s: a Node not named as the group's instance is left alone", name)
	}
	assert.Zero(t, evictionsOf(f, "team-a", "other-app"))
	assert.Zero(t, evictionsOf(f, "team-a", "unnamed-app"))
	node := f.get(nodeName)
	assert.True(t, node.Spec.Unschedulable, "the Node of the instance's private DNS name is cordoned")
	assert.Equal(t, 1, evictionsOf(f, "team-a", "app"), "its pod is evicted")
	assert.Empty(t, node.Finalizers, "the Node is not taken")

	require.NoError(t, f.kube.CoreV1().Pods("team-a").Delete(ctx, "app", metav1.DeleteOptions{}))
	queue.notices = []drivers.Interruption{action}
	require.Equal(t, consumeOK, f.controller.consumeOnce(ctx, "queued", nil))
	assert.Len(t, queue.completed, 3, "drained: the action is completed")
	assert.Equal(t, []string{"r-other", "r-unnamed", "r-kubelet"}, queue.acked)
}

// TestALifecycleActionWaitsForTheDrainOfANodeNamedByItsInstanceID: with
// EC2's resource-based hostnames a kubelet without a cloud provider's
// providerID registers its Node under the instance's id (as kops and the
// AWS cloud controller manager name it) or the id's host name in a domain
// of the VPC's choosing, which is not the private DNS name EC2 describes.
// Such a Node is the instance's, and is drained before the action is
// completed; a Node whose name only starts with the id's characters is not.
func TestALifecycleActionWaitsForTheDrainOfANodeNamedByItsInstanceID(t *testing.T) {
	ctx := context.Background()
	queued := asgClassOf("queued", "https://sqs.eu-west-1.amazonaws.com/111122223333/queued", "")
	const bareName, hostName, longerName = "i-0bare", "i-0host.corp.example", "i-0shortened"
	f, queue := newScopeFixture(t, []*nodesetv1alpha1.NodeClass{queued}, nodeWithoutProviderID(bareName), podOn("bare-app", bareName),
		nodeWithoutProviderID(hostName), podOn("host-app", hostName), nodeWithoutProviderID(longerName), podOn("longer-app", longerName))
	group := scopeGroups(f)
	group.groups["queued-group"] = &drivers.GroupStatus{Name: "queued-group", Machines: []drivers.MachineStatus{
		{Name: "i-0bare.eu-west-1.compute.internal", ProviderID: "aws:///eu-west-1a/i-0bare", State: drivers.MachineStopping},
		{ProviderID: "aws:///eu-west-1a/i-0host", State: drivers.MachineStopping},
		{Name: "i-0short.eu-west-1.compute.internal", ProviderID: "aws:///eu-west-1a/i-0short", State: drivers.MachineStopping},
	}}

	queue.notices = []drivers.Interruption{lifecycleNotice("r-bare", "queued-group", "i-0bare"),
		lifecycleNotice("r-host", "queued-group", "i-0host"), lifecycleNotice("r-short", "queued-group", "i-0short")}
	require.Equal(t, consumeOK, f.controller.consumeOnce(ctx, "queued", nil))
	assert.Equal(t, []string{"queued-group"}, queue.completed, "only the instance with no Node of its id has its action completed")
	assert.Equal(t, []string{"r-short"}, queue.acked, "the draining ones' messages come again")
	for _, name := range []string{bareName, hostName} {
		assert.True(t, f.get(name).Spec.Unschedulable, "%s: the Node named by the instance's id is cordoned", name)
	}
	assert.Equal(t, 1, evictionsOf(f, "team-a", "bare-app"))
	assert.Equal(t, 1, evictionsOf(f, "team-a", "host-app"))
	assert.False(t, f.get(longerName).Spec.Unschedulable, "a Node whose name only starts with the id is left alone")
	assert.Zero(t, evictionsOf(f, "team-a", "longer-app"))
}

// nodeWithoutProviderID is a kubelet's Node as one run with an external
// cloud provider registers it: no spec.providerID yet.
func nodeWithoutProviderID(name string) *corev1.Node {
	node := kubeletNode(name, "")
	node.Spec.ProviderID = ""
	return node
}
