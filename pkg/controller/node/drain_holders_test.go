package node

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAStuckDrainNamesThePodAndTheBudgetThatHoldIt: a drain held by a
// PodDisruptionBudget says which pod and which budget hold it (the Eviction
// API's cause names the budget) in its EvictionBlocked Event, its Draining
// condition and, at the timeout, in DrainTimedOut: the admin knows whom to
// ask without listing every pod of the Node.
func TestAStuckDrainNamesThePodAndTheBudgetThatHoldIt(t *testing.T) {
	const held = "pod team-a/app: The disruption budget web needs 3 healthy pods and has 3 currently"
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team-a"}, Spec: corev1.PodSpec{NodeName: "web-a"}}
	f := deletedNodeFixture(t, pod)
	f.onEviction(func() error { return budgetRefusal() })

	require.NoError(t, f.sync("web-a"))
	cond := drainCondition(f.get("web-a"))
	require.NotNil(t, cond)
	assert.Equal(t, ReasonDraining, cond.Reason)
	assert.Contains(t, cond.Message, "1 held by a PodDisruptionBudget ("+held+")")
	events := strings.Join(f.events(), "\n")
	assert.Contains(t, events, "Warning "+ReasonEvictionBlocked+" 1 pod eviction(s) refused by a PodDisruptionBudget ("+held+")")

	f.now = testNow.Add(6 * time.Minute) // past the class's drain timeout of 5m
	require.NoError(t, f.sync("web-a"))
	cond = drainCondition(f.get("web-a"))
	require.NotNil(t, cond)
	assert.Equal(t, ReasonDrainTimedOut, cond.Reason)
	assert.Contains(t, cond.Message, "held by a PodDisruptionBudget: "+held)
	assert.Contains(t, strings.Join(f.events(), "\n"), "Warning "+ReasonDrainTimedOut+" 1 pod(s) still on the node after the drain timeout of 5m0s (held by a PodDisruptionBudget: "+held+")")
}

// TestAnEvictionsRefusalIsBoundedOnTheNode: what the API server says of a
// refused eviction may quote an admission webhook's message or a budget's
// status condition, of any length. The Node's Draining condition and the
// Events tell a bounded part of it, so a long answer neither swells the
// Node nor makes its status patch fail.
func TestAnEvictionsRefusalIsBoundedOnTheNode(t *testing.T) {
	long := "admission webhook \"evictions.example.com\" denied the request: " + strings.Repeat("x", 100_000)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team-a"}, Spec: corev1.PodSpec{NodeName: "web-a"}}
	f := deletedNodeFixture(t, pod)
	f.onEviction(func() error {
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 400, Message: long}}
	})
	require.NoError(t, f.sync("web-a"))
	cond := drainCondition(f.get("web-a"))
	require.NotNil(t, cond)
	assert.Contains(t, cond.Message, "pod team-a/app: admission webhook")
	assert.Less(t, len(cond.Message), 2*refusalLimit, "%.200s", cond.Message)
	events := f.events()
	require.NotEmpty(t, events)
	for _, e := range events {
		assert.Less(t, len(e), 2*refusalLimit, "%.200s", e)
	}
}
