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
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
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

// TestAnEvictionsRefusalIsLoggedScrubbedAndBounded: the API server's
// answer to a refused eviction may quote an admission webhook's message,
// which may echo a credential, at any length. The log line of the failed
// eviction carries neither the credential nor the whole answer, as the
// condition and the Events do not.
func TestAnEvictionsRefusalIsLoggedScrubbedAndBounded(t *testing.T) {
	const planted = "planted-secret-5c1e9b"
	long := "admission webhook \"evictions.example.com\" denied the request: token " + planted + " " + strings.Repeat("x", 100_000)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team-a"}, Spec: corev1.PodSpec{NodeName: "web-a"}}
	f := deletedNodeFixture(t, pod)
	f.controller.credentialsCache["nodeset-system/creds"] = credentialsRead{data: map[string][]byte{"token": []byte(planted)}, read: testNow}
	f.onEviction(func() error {
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 400, Message: long}}
	})
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true), ktesting.Verbosity(4)))
	require.NoError(t, f.controller.syncNode(klog.NewContext(context.Background(), logger), "web-a"))
	logged := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	assert.Contains(t, logged, "Eviction failed; will retry")
	assert.Contains(t, logged, "[redacted:token]", "the answer is logged, scrubbed")
	assert.NotContains(t, logged, planted)
	assert.Less(t, len(logged), 20*refusalLimit, "the log does not carry the whole answer")
	assert.NotContains(t, strings.Join(f.events(), "\n"), planted)
}
