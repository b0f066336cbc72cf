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
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestARefusedSetWaitsForRoomFromWhenItAsksForIt: the room a machine gone
// frees in a full class goes to the NodeSet that has waited longest for
// it, by its Accepted condition's lastTransitionTime. A tenant cannot
// take a place in that queue before it asks for room: a NodeSet refused
// for a label it may not set, left so while another tenant's set waits,
// that is then fixed into one waiting for room, waits from the fix, and
// the other tenant's set gets the room first. Without the webhook, which
// would refuse both sets outright.
func TestARefusedSetWaitsForRoomFromWhenItAsksForIt(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ctx := context.Background()
	parkedNS, patientNS := createNamespace(t, "queue-parked"), createNamespace(t, "queue-patient")
	_, parkedCS := tenant(t, "tenant-a", parkedNS)
	_, patientCS := tenant(t, "tenant-b", patientNS)
	createClass(t, "queue", func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To[int32](1)}
	})
	createSet(t, patientNS, "holder", "queue", 1)
	eventually(t, 2*time.Minute, "the class is full", converged(c, t, patientNS, "holder", 1))
	withoutWebhook(t)

	// accepted is the set's Accepted condition once it is of the set's
	// generation and has reason.
	accepted := func(namespace, name, reason string) metav1.Condition {
		var got metav1.Condition
		eventually(t, time.Minute, name+": "+reason, func(ctx context.Context) (bool, string) {
			set, err := cs.NodesetV1alpha1().NodeSets(namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			cond := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
			if cond == nil || cond.ObservedGeneration != set.Generation {
				return false, "no Accepted condition for this generation yet"
			}
			got = *cond
			return cond.Status == metav1.ConditionFalse && cond.Reason == reason, cond.Reason + ": " + cond.Message
		})
		return got
	}
	// Condition times are whole seconds: each step is taken in a later
	// second than the one before, so that it is after it for everyone.
	after := func(since metav1.Time) {
		eventually(t, 5*time.Second, "a second after "+since.String(), func(context.Context) (bool, string) {
			return time.Now().After(since.Add(time.Second)), "now is " + time.Now().String()
		})
	}

	parked := tenantSet("parked", "queue", 1)
	parked.Spec.Template.Labels = map[string]string{"node-role.kubernetes.io/control-plane": ""}
	_, err := parkedCS.NodesetV1alpha1().NodeSets(parkedNS).Create(ctx, parked, metav1.CreateOptions{})
	require.NoError(t, err, "no webhook, the schema admits it")
	after(accepted(parkedNS, "parked", "InvalidTemplate").LastTransitionTime)

	_, err = patientCS.NodesetV1alpha1().NodeSets(patientNS).Create(ctx, tenantSet("patient", "queue", 1), metav1.CreateOptions{})
	require.NoError(t, err)
	patientSince := accepted(patientNS, "patient", "LimitExceeded").LastTransitionTime
	after(patientSince)

	fixed, err := parkedCS.NodesetV1alpha1().NodeSets(parkedNS).Get(ctx, "parked", metav1.GetOptions{})
	require.NoError(t, err)
	fixed.Spec.Template.Labels = nil
	_, err = parkedCS.NodesetV1alpha1().NodeSets(parkedNS).Update(ctx, fixed, metav1.UpdateOptions{})
	require.NoError(t, err)
	parkedSince := accepted(parkedNS, "parked", "LimitExceeded").LastTransitionTime
	assert.True(t, parkedSince.After(patientSince.Time),
		"the fixed set waits for room from %s, when it asked for it, not before the set waiting since %s", parkedSince, patientSince)

	require.NoError(t, cs.NodesetV1alpha1().NodeSets(patientNS).Delete(ctx, "holder", metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "the room goes to the set that waited longest", converged(c, t, patientNS, "patient", 1))
	nodes, err := setNodes(ctx, t, parkedNS, "parked")
	require.NoError(t, err)
	assert.Empty(t, nodes, "the set that asked later still waits")
	got, err := cs.NodesetV1alpha1().NodeSets(parkedNS).Get(ctx, "parked", metav1.GetOptions{})
	require.NoError(t, err)
	cond := meta.FindStatusCondition(got.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
	require.NotNil(t, cond)
	assert.Equal(t, "LimitExceeded", cond.Reason, fmt.Sprintf("%s: %s", cond.Reason, cond.Message))
}
