package node

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestAGroupIsNotGrownForANamespaceItsClassNoLongerAllows: the class (or,
// for a Selector class, the Namespace) changes so that the set's namespace
// may not use it, and the set is scaled up before the NodeSetController's
// verdict: its Accepted is still True. The node controller judges the
// namespace against the class as it is and neither grows the group nor
// makes one; a size it already has, and any way down, stay allowed.
func TestAGroupIsNotGrownForANamespaceItsClassNoLongerAllows(t *testing.T) {
	for _, tc := range []struct {
		name string
		// allowed is the class's allowedNamespaces, admitting team-a.
		allowed nodesetv1alpha1.AllowedNamespaces
		// disallow takes team-a out: in the class, or in the Namespace.
		disallow func(g *groupFixture)
	}{{
		name:    "a List class edited",
		allowed: nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromList, Namespaces: []string{"team-a"}},
		disallow: func(g *groupFixture) {
			class := asgTestClass()
			class.Generation = 2
			class.Status.Conditions[0].ObservedGeneration = 2 // validated: a namespace list is no driver's concern
			class.Spec.AllowedNamespaces = &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromList, Namespaces: []string{"team-b"}}
			require.NoError(t, g.classIndexer.Update(class))
		},
	}, {
		name: "a Selector class's Namespace relabelled",
		allowed: nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromSelector,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}},
		disallow: func(g *groupFixture) {
			ns, err := g.kube.CoreV1().Namespaces().Get(context.Background(), "team-a", metav1.GetOptions{})
			require.NoError(t, err)
			ns.Labels["tier"] = "tin"
			_, err = g.kube.CoreV1().Namespaces().Update(context.Background(), ns, metav1.UpdateOptions{})
			require.NoError(t, err)
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGroupFixture(t, 2, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"tier": "gold"}}})
			class := asgTestClass()
			class.Spec.AllowedNamespaces = tc.allowed.DeepCopy()
			require.NoError(t, g.classIndexer.Update(class))
			require.NoError(t, g.syncGroup())
			require.Len(t, g.group.ensured, 1, "allowed: the group is made")
			assert.EqualValues(t, 2, g.group.ensured[0].Replicas)
			g.events()

			tc.disallow(g)
			scale := func(replicas int32) {
				set := g.getSet() // Accepted is still True: no verdict on the change yet
				set.Spec.Replicas = ptr.To(replicas)
				_, err := g.nodesets.NodesetV1alpha1().NodeSets("team-a").Update(context.Background(), set, metav1.UpdateOptions{})
				require.NoError(t, err)
				require.NoError(t, g.setIndexer.Update(set))
			}
			scale(4)
			require.NoError(t, g.syncGroup())
			assert.Len(t, g.group.ensured, 1, "the group is not grown")
			group := g.group.groups[g.group.ensured[0].Name]
			assert.EqualValues(t, 2, group.DesiredSize)
			held := 0
			for _, e := range g.events() {
				if strings.HasPrefix(e, "Warning "+nodesetv1alpha1.ReasonNamespaceNotAllowed) && strings.Contains(e, `namespace "team-a" may not use NodeClass "asg"`) {
					held++
				}
			}
			assert.Equal(t, 1, held, "the set is told why")

			scale(1)
			require.NoError(t, g.syncGroup())
			require.Len(t, g.group.ensured, 2, "a size the group has is no growth: the group is kept as it is")
			assert.EqualValues(t, 1, g.group.ensured[1].Replicas)
			assert.EqualValues(t, 2, group.DesiredSize, "lowered only by terminations")

			t.Log("a set whose group was never made gets none")
			set := g.getSet()
			set.Status.Group = nil
			_, err := g.nodesets.NodesetV1alpha1().NodeSets("team-a").UpdateStatus(context.Background(), set, metav1.UpdateOptions{})
			require.NoError(t, err)
			g.controller.groupSizes.forget("team-a/web")
			delete(g.group.groups, g.group.ensured[0].Name)
			require.NoError(t, g.setIndexer.Update(set))
			require.NoError(t, g.syncGroup())
			assert.Len(t, g.group.ensured, 2, "no group is made")
			assert.Empty(t, g.group.groups)
		})
	}
}

// TestAHeldGroupIsToldOncePerRefusal: a group held because the set's
// namespace may no longer use its class is looked at again every poll
// until the NodeSetController's verdict comes. Each look is no new Event
// (an API write per held set per poll while that controller is away);
// a refusal that changes, or a hold that ends and begins again, is told.
func TestAHeldGroupIsToldOncePerRefusal(t *testing.T) {
	g := newGroupFixture(t, 2, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"tier": "gold"}}})
	require.NoError(t, g.syncGroup())
	require.Len(t, g.group.ensured, 1, "allowed: the group is made")
	g.events()
	told := func(syncs int) []string {
		t.Helper()
		for range syncs {
			require.NoError(t, g.syncGroup())
		}
		var held []string
		for _, e := range g.events() {
			if strings.HasPrefix(e, "Warning "+nodesetv1alpha1.ReasonNamespaceNotAllowed) {
				held = append(held, e)
			}
		}
		return held
	}
	editClass := func(allowed nodesetv1alpha1.AllowedNamespaces) {
		class, err := g.controller.classes.Get("asg")
		require.NoError(t, err)
		class = class.DeepCopy()
		class.Generation++
		class.Status.Conditions[0].ObservedGeneration = class.Generation
		class.Spec.AllowedNamespaces = &allowed
		require.NoError(t, g.classIndexer.Update(class))
	}
	update := func(mutate func(set *nodesetv1alpha1.NodeSet)) {
		set := g.getSet()
		mutate(set)
		updated, err := g.nodesets.NodesetV1alpha1().NodeSets("team-a").Update(context.Background(), set, metav1.UpdateOptions{})
		require.NoError(t, err)
		updated, err = g.nodesets.NodesetV1alpha1().NodeSets("team-a").UpdateStatus(context.Background(), updated, metav1.UpdateOptions{})
		require.NoError(t, err)
		require.NoError(t, g.setIndexer.Update(updated))
	}
	scale := func(replicas int32) {
		update(func(set *nodesetv1alpha1.NodeSet) { set.Spec.Replicas = ptr.To(replicas) })
	}

	editClass(nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromList, Namespaces: []string{"team-b"}})
	scale(4) // before the NodeSetController's verdict: Accepted is still True
	held := told(5)
	require.Len(t, held, 1, "five polls of one hold, one Event: %q", held)
	assert.Contains(t, held[0], "it is not in spec.allowedNamespaces.namespaces")
	assert.Len(t, g.group.ensured, 1, "the group is not grown")

	editClass(nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromSelector,
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "platinum"}}})
	held = told(3)
	require.Len(t, held, 1, "another refusal is told: %q", held)
	assert.Contains(t, held[0], "its labels do not match spec.allowedNamespaces.selector")

	scale(2) // the size the group has: no hold
	assert.Empty(t, told(1))
	scale(4)
	assert.Len(t, told(3), 1, "a hold begun again is told again")

	update(func(set *nodesetv1alpha1.NodeSet) {
		set.Status.Conditions[0].Status, set.Status.Conditions[0].Reason = metav1.ConditionFalse, nodesetv1alpha1.ReasonNamespaceNotAllowed
	})
	assert.Empty(t, told(2), "the verdict says it: the group waits without a hold")
	update(func(set *nodesetv1alpha1.NodeSet) {
		set.Status.Conditions[0].Status, set.Status.Conditions[0].Reason = metav1.ConditionTrue, "Accepted"
	})
	assert.Len(t, told(3), 1, "a hold after a verdict is told again")
	assert.Len(t, g.group.ensured, 2, "kept at the size it has, and never grown")
}
