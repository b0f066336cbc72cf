package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// registeredNode is a Node of set team-a/web with its machine, registered
// (no startup taint), Ready or NotReady since a moment.
func registeredNode(name string, ready bool, since time.Time) *corev1.Node {
	node := setNode(name, "sim")
	node.Spec.ProviderID = "test:///" + name
	node.Spec.Taints = nil
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(since)}}
	return node
}

// remediationFixture has nodes as the set team-a/web of class sim, with as
// many replicas, an unhealthy timeout of 5 minutes and a cap of
// maxUnhealthyPercent (at most 10).
func remediationFixture(t *testing.T, maxUnhealthyPercent int, nodes ...*corev1.Node) *fixture {
	t.Helper()
	objects := make([]runtime.Object, 0, len(nodes))
	for _, n := range nodes {
		objects = append(objects, n)
	}
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, objects...)
	f.controller.opts.Remediation = RemediationOptions{UnhealthyTimeout: 5 * time.Minute, MaxUnhealthyPercent: maxUnhealthyPercent, MaxUnhealthy: 10}
	f.controller.opts.NodeSets = f.nodesets
	set := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "sim", Replicas: ptr.To(int32(len(nodes)))}}
	require.NoError(t, f.setIndexer.Add(set))
	_, err := f.nodesets.NodesetV1alpha1().NodeSets("team-a").Create(context.Background(), set, metav1.CreateOptions{})
	require.NoError(t, err)
	return f
}

// A wave of NotReady Nodes is held back from the first moment one of them
// is overdue: the others count while they are not overdue yet, so the
// first is not replaced as if it were alone. Once the others recover, the
// overdue one is replaced.
func TestAWaveIsHeldBeforeItsLaterNodesAreOverdue(t *testing.T) {
	early := registeredNode("web-a", false, testNow.Add(-10*time.Minute))
	late := registeredNode("web-b", false, testNow.Add(-30*time.Second))
	f := remediationFixture(t, 20, early, late,
		registeredNode("web-c", true, testNow.Add(-time.Hour)), registeredNode("web-d", true, testNow.Add(-time.Hour)),
		registeredNode("web-e", true, testNow.Add(-time.Hour)))

	require.NoError(t, f.sync("web-a"))
	assert.Nil(t, f.get("web-a").DeletionTimestamp, "held: web-b is NotReady too, which makes 2 of 5 over the cap of 1")
	held := false
	for _, e := range f.events() {
		held = held || strings.Contains(e, ReasonRemediationHeld)
	}
	assert.True(t, held, "a RemediationHeld Event says why web-a stays")
	got, err := f.nodesets.NodesetV1alpha1().NodeSets("team-a").Get(context.Background(), "web", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, got.Status.Conditions)
	assert.Equal(t, ReasonTooManyUnhealthy, got.Status.Conditions[0].Reason)

	f.updateCache(registeredNode("web-b", true, testNow))
	require.NoError(t, f.sync("web-a"))
	_, err = f.kube.CoreV1().Nodes().Get(context.Background(), "web-a", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "web-a alone is unhealthy now: replaced (deleted; the fake has no finalizer handling): %v", err)
}

// A controller that starts while a Node has long been NotReady (kubelets
// and controller kept away by the same outage) gives it the whole
// unhealthy timeout from its start before replacing it.
func TestAStartingControllerGivesNotReadyNodesTheWholeTimeout(t *testing.T) {
	f := remediationFixture(t, 50,
		registeredNode("web-a", false, testNow.Add(-time.Hour)), registeredNode("web-b", true, testNow.Add(-time.Hour)),
		registeredNode("web-c", true, testNow.Add(-time.Hour)))

	f.controller.started = testNow.Add(-4 * time.Minute)
	overdue, ok := f.controller.unhealthyFor(f.get("web-a"), testClass("sim"))
	require.True(t, ok)
	assert.Equal(t, -time.Minute, overdue, "due 5 minutes after the start, not after the transition")
	require.NoError(t, f.sync("web-a"))
	assert.Nil(t, f.get("web-a").DeletionTimestamp, "kept: this controller has watched it NotReady for 4 minutes only")

	f.controller.started = testNow.Add(-6 * time.Minute)
	require.NoError(t, f.sync("web-a"))
	_, err := f.kube.CoreV1().Nodes().Get(context.Background(), "web-a", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "replaced once watched NotReady for the whole timeout: %v", err)
}

// TestALoneNodeNamedLikeASetsIsNotRemediated: a lone Node whose labels
// name a NodeSet but not its namespace belongs to no NodeSet; NotReady
// long past the timeout, it is left to its owner, not deleted for a
// replacement nobody makes.
func TestALoneNodeNamedLikeASetsIsNotRemediated(t *testing.T) {
	lone := registeredNode("lone-a", false, testNow.Add(-time.Hour))
	delete(lone.Labels, nodesetv1alpha1.LabelNodeSetNamespace)
	f := remediationFixture(t, 100, lone)
	f.controller.started = testNow.Add(-time.Hour)
	require.NoError(t, f.sync("lone-a"))
	assert.Nil(t, f.get("lone-a").DeletionTimestamp, "a lone Node is not remediated")
}

// A Node its kubelet labelled with the set's labels, without nodeset's
// finalizer, is none of the set's replicas: NotReady, it does not count
// toward the set's unhealthy Nodes, and the set's own overdue Node is
// replaced within the cap.
func TestAForeignNodeDoesNotHoldTheSetsRemediation(t *testing.T) {
	foreign := registeredNode("kubelets-own", false, testNow.Add(-10*time.Minute))
	foreign.Finalizers = nil
	foreign.Spec.ProviderID = "test:///elsewhere"
	f := remediationFixture(t, 10, registeredNode("web-a", false, testNow.Add(-10*time.Minute)),
		registeredNode("web-b", true, testNow.Add(-time.Hour)), registeredNode("web-c", true, testNow.Add(-time.Hour)),
		registeredNode("web-d", true, testNow.Add(-time.Hour)), registeredNode("web-e", true, testNow.Add(-time.Hour)), foreign)

	require.NoError(t, f.sync("web-a"))
	_, err := f.kube.CoreV1().Nodes().Get(context.Background(), "web-a", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "web-a is the set's one unhealthy Node, within the cap of 1: replaced: %v", err)
	_, err = f.kube.CoreV1().Nodes().Get(context.Background(), "kubelets-own", metav1.GetOptions{})
	assert.NoError(t, err, "the kubelet's own Node is not the set's to replace")
}
