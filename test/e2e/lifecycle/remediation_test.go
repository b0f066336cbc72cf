package lifecycle

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/kubeletsim"
)

// setNotReady makes the simulated kubelet of each Node report NotReady
// (message non-empty) or Ready again (message empty).
func setNotReady(ctx context.Context, t *testing.T, message string, names ...string) {
	t.Helper()
	kube, _ := clients(t)
	value := fmt.Sprintf("%q", message)
	if message == "" {
		value = "null"
	}
	for _, name := range names {
		_, err := kube.CoreV1().Nodes().Patch(ctx, name, "application/merge-patch+json",
			[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, kubeletsim.AnnotationNotReady, value)), metav1.PatchOptions{})
		require.NoError(t, err)
	}
}

// TestMeltdownProtection: when half of a NodeSet's nodes go NotReady at
// once (a network blip, a broken runtime), none is replaced and the NodeSet
// says why; one unhealthy node among many is replaced after
// --unhealthy-timeout (15s here).
func TestMeltdownProtection(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	_, cs := clients(t)
	ns := createNamespace(t, "meltdown")
	createClass(t, "meltdown-sim", nil)
	createSet(t, ns, "fleet", "meltdown-sim", 6)
	eventually(t, 2*time.Minute, "6 nodes", converged(c, t, ns, "fleet", 6))
	nodes, err := setNodes(ctx, t, ns, "fleet")
	require.NoError(t, err)
	original := map[string]bool{}
	for _, n := range nodes {
		original[n.Name] = true
	}

	// Half the fleet: more than the cap (20% of 6, rounded up: 2).
	half := []string{nodes[0].Name, nodes[1].Name, nodes[2].Name}
	setNotReady(ctx, t, "container runtime is down", half...)
	eventually(t, time.Minute, "RemediationAllowed=False", func(ctx context.Context) (bool, string) {
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "fleet", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetRemediationAllowed)
		if cond == nil || cond.Status != metav1.ConditionFalse {
			return false, fmt.Sprintf("%+v", cond)
		}
		return cond.Reason == "TooManyUnhealthy", cond.Message
	})
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "fleet", metav1.GetOptions{})
	require.NoError(t, err)
	cond := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetRemediationAllowed)
	assert.Contains(t, cond.Message, "3 of 6 nodes are unhealthy, more than the 2 replaced automatically")
	eventuallyEvent(t, "fleet", "TooManyUnhealthy")
	// Each of the 3 overdue nodes was looked at and held back (a Node-level
	// RemediationHeld Event): a replacement decided before would show now.
	for _, name := range half {
		eventuallyEvent(t, name, "RemediationHeld")
	}
	nodes, err = setNodes(ctx, t, ns, "fleet")
	require.NoError(t, err)
	for _, n := range nodes {
		assert.True(t, original[n.Name], "%s is new: a node was replaced during the meltdown", n.Name)
		assert.Nil(t, n.DeletionTimestamp, "%s is being deleted during the meltdown", n.Name)
	}

	// Two recover: one unhealthy node is within the cap and is replaced.
	setNotReady(ctx, t, "", half[1], half[2])
	eventually(t, 2*time.Minute, "the unhealthy node replaced", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "fleet")
		if err != nil {
			return false, err.Error()
		}
		for _, n := range nodes {
			if n.Name == half[0] {
				return false, half[0] + " still there"
			}
		}
		return true, ""
	})
	eventually(t, 2*time.Minute, "6 nodes again", converged(c, t, ns, "fleet", 6))
	eventuallyEvent(t, half[0], "Unhealthy")
	nodes, err = setNodes(ctx, t, ns, "fleet")
	require.NoError(t, err)
	replaced := 0
	for _, n := range nodes {
		if !original[n.Name] {
			replaced++
		}
	}
	assert.Equal(t, 1, replaced, "exactly the one unhealthy node was replaced")
	eventually(t, time.Minute, "RemediationAllowed=True", func(ctx context.Context) (bool, string) {
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "fleet", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetRemediationAllowed)
		return cond != nil && cond.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", cond)
	})
}
