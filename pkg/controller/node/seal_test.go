package node

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// sealedSetNode is a Node of NodeSet team-a/web of class as nodeset makes
// it now: sealed, with its machine.
func sealedSetNode(name, class string) *corev1.Node {
	node := setNode(name, class)
	node.Labels[nodesetv1alpha1.LabelSeal] = nodeutil.Seal("team-a", "web", class)
	node.Spec.ProviderID = "test:///" + name
	node.Annotations = map[string]string{nodesetv1alpha1.AnnotationDriver: nodesetv1alpha1.DriverSimulated}
	return node
}

// eventsOf are the events of reason among events.
func eventsOf(events []string, reason string) []string {
	var out []string
	for _, e := range events {
		if strings.Contains(e, reason) {
			out = append(out, e)
		}
	}
	return out
}

func tamperedEvents(events []string) []string { return eventsOf(events, ReasonNodeLabelsTampered) }

// TestARelabelledNodeGetsItsLabelsBack: a Node whose kubelet relabelled it
// into another namespace's set, or another class, is told about once per
// change and gets the labels its seal says; its machine is not touched on
// the word of the labels, not even when the Node is deleted meanwhile.
func TestARelabelledNodeGetsItsLabelsBack(t *testing.T) {
	for _, tt := range []struct {
		name    string
		key     string
		value   string
		deleted bool
	}{
		{name: "into another namespace's set", key: nodesetv1alpha1.LabelNodeSetNamespace, value: "victim"},
		{name: "into another class", key: nodesetv1alpha1.LabelNodeClass, value: "other"},
		{name: "deleted while relabelled", key: nodesetv1alpha1.LabelNodeSetNamespace, value: "victim", deleted: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			node := sealedSetNode("web-a", "sim")
			node.Labels[tt.key] = tt.value
			node.ResourceVersion = "7"
			if tt.deleted {
				node.DeletionTimestamp = &metav1.Time{Time: testNow}
			}
			f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim"), testClass("other")}, node)
			require.NoError(t, f.setIndexer.Add(&nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"},
				Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "sim"}}))
			f.driver.machines["web-a"] = "test:///web-a"

			require.NoError(t, f.controller.syncNode(t.Context(), "web-a"))
			got := f.get("web-a")
			assert.Equal(t, "team-a", got.Labels[nodesetv1alpha1.LabelNodeSetNamespace])
			assert.Equal(t, "web", got.Labels[nodesetv1alpha1.LabelNodeSet])
			assert.Equal(t, "sim", got.Labels[nodesetv1alpha1.LabelNodeClass])
			assert.False(t, nodeutil.Tampered(got.Labels))
			events := tamperedEvents(f.events())
			require.Len(t, events, 1)
			assert.Contains(t, events[0], "Warning NodeLabelsTampered The Node claims")
			assert.Contains(t, events[0], "=\""+tt.value+"\"")
			assert.Contains(t, events[0], "put back to those of NodeSet team-a/web of NodeClass sim")

			// A sync of the same copy (the cache behind the write) tells nothing new.
			require.NoError(t, f.controller.syncNode(t.Context(), "web-a"))
			assert.Empty(t, tamperedEvents(f.events()))
			assert.Empty(t, f.driver.deletes, "no machine removed on the labels' word")
			assert.Contains(t, f.get("web-a").Finalizers, nodesetv1alpha1.FinalizerTermination)
		})
	}
}

// TestARelabelledNodeOfNoKnownSealIsLeftAlone: the seal of a NodeSet that
// is gone names nothing to put back: the Node keeps its labels, is told
// about, and its machine is neither made nor removed.
func TestARelabelledNodeOfNoKnownSealIsLeftAlone(t *testing.T) {
	node := sealedSetNode("web-a", "sim")
	node.Labels[nodesetv1alpha1.LabelNodeSetNamespace] = "victim"
	node.DeletionTimestamp = &metav1.Time{Time: testNow}
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, node)
	f.driver.machines["web-a"] = "test:///web-a"
	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, "victim", f.get("web-a").Labels[nodesetv1alpha1.LabelNodeSetNamespace])
	events := tamperedEvents(f.events())
	require.Len(t, events, 1)
	assert.Contains(t, events[0], "no NodeSet or NodeClass nodeset knows has its seal")
	assert.Empty(t, f.driver.deletes)
	assert.Zero(t, f.driver.creates)
}

// TestAStaticNodeRelabelledIntoASetIsPutBack: a static Node's seal is of
// its class alone: relabelled into a NodeSet, it loses the set's labels.
func TestAStaticNodeRelabelledIntoASetIsPutBack(t *testing.T) {
	node := loneNode("static-a", "sim", map[string]string{nodesetv1alpha1.LabelSeal: nodeutil.Seal("", "", "sim"),
		nodesetv1alpha1.LabelNodeSetNamespace: "victim", nodesetv1alpha1.LabelNodeSet: "web"})
	node.Finalizers = []string{nodesetv1alpha1.FinalizerTermination}
	node.Spec.ProviderID = "test:///static-a"
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, node)
	require.NoError(t, f.sync("static-a"))
	got := f.get("static-a")
	assert.NotContains(t, got.Labels, nodesetv1alpha1.LabelNodeSetNamespace)
	assert.NotContains(t, got.Labels, nodesetv1alpha1.LabelNodeSet)
	assert.Equal(t, "sim", got.Labels[nodesetv1alpha1.LabelNodeClass])
	assert.Contains(t, strings.Join(tamperedEvents(f.events()), "\n"), "put back to those of a static Node of NodeClass sim")
}

// TestANodeMadeBeforeTheSealIsSealed: a Node nodeset holds that has no seal
// (made by an earlier release) is sealed as it is labelled; on a
// Dedicated class it also gets the restricted tenant label it lacks. A
// static Node is sealed for its class alone. A kubelet's Node that nodeset
// does not hold is not sealed.
func TestANodeMadeBeforeTheSealIsSealed(t *testing.T) {
	dedicated := testClass("ded")
	dedicated.Spec.Tenancy = nodesetv1alpha1.TenancyDedicated
	old := setNode("web-old", "ded")
	old.Spec.ProviderID = "test:///web-old"
	static := loneNode("static-old", "sim", nil)
	static.Finalizers = []string{nodesetv1alpha1.FinalizerTermination}
	static.Spec.ProviderID = "test:///static-old"
	unheld := loneNode("kubelets", "sim", map[string]string{nodesetv1alpha1.LabelNodeSetNamespace: "team-a", nodesetv1alpha1.LabelNodeSet: "web"})
	unheld.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse,
		LastTransitionTime: metav1.NewTime(testNow.Add(-time.Hour))}}
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim"), dedicated}, old, static, unheld)
	f.driver.machines["web-old"], f.driver.machines["static-old"] = "test:///web-old", "test:///static-old"
	f.controller.sealUnsealed(t.Context())
	got := f.get("web-old")
	assert.Equal(t, nodeutil.Seal("team-a", "web", "ded"), got.Labels[nodesetv1alpha1.LabelSeal])
	assert.Equal(t, "team-a", got.Labels[nodesetv1alpha1.LabelTenantRestricted])
	assert.Equal(t, nodeutil.Seal("", "", "sim"), f.get("static-old").Labels[nodesetv1alpha1.LabelSeal])
	assert.NotContains(t, f.get("kubelets").Labels, nodesetv1alpha1.LabelSeal)

}

// TestAGroupDriverCannotReportTheSeal: the labels a group driver reports
// for a machine never bring a seal onto its Node.
func TestAGroupDriverCannotReportTheSeal(t *testing.T) {
	assert.False(t, machineKey(&nodesetv1alpha1.NodeSet{}, nodesetv1alpha1.LabelSeal, true))
}

// TestAStaticNodeIsSealedWhenHeld: an admin's static Node is sealed for its
// class when the node controller first holds it, in the same write.
func TestAStaticNodeIsSealedWhenHeld(t *testing.T) {
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, loneNode("static-a", "sim", nil))
	require.NoError(t, f.sync("static-a"))
	assert.Equal(t, nodeutil.Seal("", "", "sim"), f.get("static-a").Labels[nodesetv1alpha1.LabelSeal])
}

// TestARegisteredNodeIsSealedOnItsSync: a Ready Node of an earlier release
// (registered, no seal) is sealed by its next sync, with nothing else
// written.
func TestARegisteredNodeIsSealedOnItsSync(t *testing.T) {
	node := markReady(setNode("web-old", "sim"))
	node.Spec.Taints = nil
	node.Spec.ProviderID = "test:///web-old"
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, node)
	f.driver.machines["web-old"] = "test:///web-old"
	require.NoError(t, f.sync("web-old"))
	assert.Equal(t, nodeutil.Seal("team-a", "web", "sim"), f.get("web-old").Labels[nodesetv1alpha1.LabelSeal])
	assert.Equal(t, 1, f.nodeWrites())
	require.NoError(t, f.sync("web-old"))
	assert.Equal(t, 1, f.nodeWrites(), "once")
}

// TestAKubeletThatKeepsRelabellingItsNodeWaitsLonger: each restore of a
// Node's labels is a write of this controller, whose writes every tenant's
// Nodes share. The first few are made at once; after them a kubelet that
// relabels its Node again waits twice as long each time, and a Node left
// alone for a while starts over.
func TestAKubeletThatKeepsRelabellingItsNodeWaitsLonger(t *testing.T) {
	node := sealedSetNode("web-a", "sim")
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, node)
	require.NoError(t, f.setIndexer.Add(&nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "sim"}}))
	f.driver.machines["web-a"] = "test:///web-a"
	relabel := func() {
		current := f.get("web-a")
		current.Labels[nodesetv1alpha1.LabelNodeSetNamespace] = "victim"
		updated, err := f.kube.CoreV1().Nodes().Update(t.Context(), current, metav1.UpdateOptions{})
		require.NoError(t, err)
		f.updateCache(updated)
	}
	restoredNow := func() bool {
		t.Helper()
		relabel()
		before := f.nodeWrites()
		require.NoError(t, f.sync("web-a"))
		return f.nodeWrites() > before
	}
	for i := range freeRestores {
		assert.True(t, restoredNow(), "restore %d is made at once", i+1)
		f.now = f.now.Add(100 * time.Millisecond)
	}
	assert.False(t, restoredNow(), "the next waits")
	assert.Equal(t, "victim", f.get("web-a").Labels[nodesetv1alpha1.LabelNodeSetNamespace])
	f.now = f.now.Add(time.Second)
	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, "team-a", f.get("web-a").Labels[nodesetv1alpha1.LabelNodeSetNamespace], "put back once its wait is over")
	f.now = f.now.Add(time.Second)
	assert.False(t, restoredNow(), "the one after waits twice as long")
	f.now = f.now.Add(time.Second)
	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, "team-a", f.get("web-a").Labels[nodesetv1alpha1.LabelNodeSetNamespace])

	f.now = f.now.Add(restoresForgotten + time.Second)
	assert.True(t, restoredNow(), "left alone for a while, the Node starts over")
	assert.Empty(t, f.driver.deletes)
}
