package node

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestGroupsOfOneClassShareItsRoom: two NodeSets of a class with room for
// 5 machines ask for 5 each. Their groups are sized before the cache shows
// either one's status.group.desiredSize (one right after the other, or by
// two workers at once): together they are given 5, not 10, and the groups
// are never lowered for it afterwards.
func TestGroupsOfOneClassShareItsRoom(t *testing.T) {
	for _, together := range []bool{false, true} {
		name := "one after the other"
		if together {
			name = "at once"
		}
		t.Run(name, func(t *testing.T) {
			g := newGroupFixture(t, 5)
			class := asgTestClass()
			class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To[int32](5)}
			require.NoError(t, g.classIndexer.Update(class))
			other := g.set.DeepCopy()
			other.Name, other.UID, other.ResourceVersion = "web2", "uid-web2", ""
			created, err := g.nodesets.NodesetV1alpha1().NodeSets("team-a").Create(context.Background(), other, metav1.CreateOptions{})
			require.NoError(t, err)
			require.NoError(t, g.setIndexer.Add(created))

			keys := []string{"team-a/web", "team-a/web2"}
			if together {
				var wg sync.WaitGroup
				for _, key := range keys {
					wg.Go(func() { assert.NoError(t, g.controller.syncGroup(context.Background(), key)) })
				}
				wg.Wait()
			} else {
				for _, key := range keys {
					require.NoError(t, g.controller.syncGroup(context.Background(), key))
				}
			}
			sizes := map[string]int32{}
			for _, e := range g.group.ensured {
				sizes[e.Name] = max(sizes[e.Name], e.Replicas)
			}
			total := int32(0)
			for _, size := range sizes {
				total += size
			}
			assert.Len(t, sizes, 2)
			assert.EqualValues(t, 5, total, "machines asked of the two groups: %v", sizes)
		})
	}
}

// TestASetDeletedBeforeItsGroupTakesItAlong: a tenant removes its NodeSet's
// finalizers and deletes it, its cloud group still running. The group goes
// as soon as its Nodes have (the nodeset controller deletes them, drained),
// not after the orphan collection's minimum age; until then it counts for
// the class's limits by the size it was given, so a set made in the
// meantime is not given the same room again.
func TestASetDeletedBeforeItsGroupTakesItAlong(t *testing.T) {
	g := newGroupFixture(t, 5)
	class := asgTestClass()
	class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To[int32](5)}
	require.NoError(t, g.classIndexer.Update(class))
	require.NoError(t, g.controller.syncGroup(context.Background(), "team-a/web"))
	require.Len(t, g.group.ensured, 1)
	groupName := g.group.ensured[0].Name
	require.EqualValues(t, 5, g.group.ensured[0].Replicas)

	// Gone, finalizers and all, before its Nodes were made.
	set := g.getSet()
	require.NoError(t, g.nodesets.NodesetV1alpha1().NodeSets("team-a").Delete(context.Background(), "web", metav1.DeleteOptions{}))
	require.NoError(t, g.setIndexer.Delete(set))

	// A new set of the class finds no room: the gone set's group still
	// runs its 5 machines.
	again := set.DeepCopy()
	again.Name, again.UID, again.ResourceVersion, again.Status = "web2", "uid-web2", "", nodesetv1alpha1.NodeSetStatus{Conditions: set.Status.Conditions}
	created, err := g.nodesets.NodesetV1alpha1().NodeSets("team-a").Create(context.Background(), again, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, g.setIndexer.Add(created))
	require.NoError(t, g.controller.syncGroup(context.Background(), "team-a/web2"))
	require.Len(t, g.group.ensured, 2)
	assert.EqualValues(t, 0, g.group.ensured[1].Replicas, "no room beside the gone set's group")

	require.NoError(t, g.controller.syncGroup(context.Background(), "team-a/web"))
	assert.Equal(t, []string{groupName}, g.group.deleted, "the gone set's group is deleted")
	assert.NotContains(t, g.group.groups, groupName)

	// Once it is gone, the room is the new set's.
	require.NoError(t, g.controller.syncGroup(context.Background(), "team-a/web2"))
	assert.EqualValues(t, 5, g.group.ensured[len(g.group.ensured)-1].Replicas)
}
