package awsdrivers

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestAGroupIsNotGrownOnAStaleVerdict: a class is changed to leave a
// NodeSet's namespace out, and the set is scaled up at once, before the
// NodeSetController's verdict on the change (held back here by pausing it,
// as a loaded or lagging controller would be). Its Accepted is still True,
// and the webhook, served by the paused process, is away too (its
// failurePolicy Ignore admits both writes after its timeout). The node
// controller judges the namespace against
// the class as it is now: the Auto Scaling group is not grown. The set then
// becomes Accepted=False and keeps the node it has; deleting it still takes
// its node and its group away.
func TestAGroupIsNotGrownOnAStaleVerdict(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ns, class := "team-stale", "stale"
	group := e.startSet(class, ns, "web")
	allow := func(namespace string) {
		patch := fmt.Sprintf(`{"spec":{"allowedNamespaces":{"from":"List","namespaces":[%q]}}}`, namespace)
		_, err := e.nodesets.NodesetV1alpha1().NodeClasses().Patch(ctx, class, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	allow(ns)
	e.update(ns, "web", func(s *nodesetv1alpha1.NodeSet) { s.Spec.Replicas = ptr.To[int32](1) })
	e.converged(ns, "web", group, 1, 90*time.Second)
	set, err := e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	require.True(t, meta.IsStatusConditionTrue(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted))

	t.Log("the NodeSetController is paused: the set's verdict stays Accepted=True")
	require.NoError(t, e.ctrl.NodeSet.Signal(syscall.SIGSTOP))
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			require.NoError(t, e.ctrl.NodeSet.Signal(syscall.SIGCONT))
		}
	}
	t.Cleanup(resume)
	allow("team-other")
	e.waitFor("the node controller's verdict on the class edit", 60*time.Second, func() (bool, string) {
		c, err := e.nodesets.NodesetV1alpha1().NodeClasses().Get(ctx, class, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		valid := meta.FindStatusCondition(c.Status.Conditions, nodesetv1alpha1.NodeClassValid)
		return valid != nil && valid.Status == metav1.ConditionTrue && valid.ObservedGeneration == c.Generation,
			fmt.Sprintf("generation %d, Valid %+v", c.Generation, valid)
	})
	e.update(ns, "web", func(s *nodesetv1alpha1.NodeSet) { s.Spec.Replicas = ptr.To[int32](3) })
	e.waitFor("the node controller to hold the group", 60*time.Second, func() (bool, string) {
		desired, _, err := e.instances(group)
		require.NoError(t, err)
		require.EqualValues(t, 1, desired, "the group grew on a verdict older than the class")
		held := e.eventCount(ns, set.UID, nodesetv1alpha1.ReasonNamespaceNotAllowed)
		return held > 0, fmt.Sprintf("desired %d, %d NamespaceNotAllowed Events", desired, held)
	})
	s, err := e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, meta.IsStatusConditionTrue(s.Status.Conditions, nodesetv1alpha1.NodeSetAccepted), "the verdict was still the old one")

	t.Log("the verdict comes: Accepted=False, the node it has is kept, the group is not grown")
	resume()
	e.waitFor("Accepted=False, NamespaceNotAllowed", 60*time.Second, func() (bool, string) {
		s, err := e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(ctx, "web", metav1.GetOptions{})
		require.NoError(t, err)
		accepted := meta.FindStatusCondition(s.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
		return accepted != nil && accepted.Status == metav1.ConditionFalse && accepted.Reason == nodesetv1alpha1.ReasonNamespaceNotAllowed,
			fmt.Sprintf("%+v", accepted)
	})
	desired, live, err := e.instances(group)
	require.NoError(t, err)
	assert.EqualValues(t, 1, desired)
	assert.Len(t, live, 1)
	assert.Len(t, e.setNodes(ns, "web"), 1, "a set no longer allowed keeps the Nodes it has")

	t.Log("deleting the set gives its node and its group back")
	require.NoError(t, e.nodesets.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "web", metav1.DeleteOptions{}))
	e.waitFor("the set, its Nodes and its group gone", 2*time.Minute, func() (bool, string) {
		_, err := e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(ctx, "web", metav1.GetOptions{})
		_, _, groupErr := e.instances(group)
		nodes := e.setNodes(ns, "web")
		return apierrors.IsNotFound(err) && groupErr != nil && len(nodes) == 0,
			fmt.Sprintf("set: %v, group: %v, %d Nodes", err, groupErr, len(nodes))
	})
	assert.Empty(t, e.runningInstances(), "no instance left running")
}
