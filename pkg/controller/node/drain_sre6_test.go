package node

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// budgetRefusal is the Eviction API's answer when a PodDisruptionBudget
// allows no disruption.
func budgetRefusal() error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
		Type: policyv1.DisruptionBudgetCause, Message: "The disruption budget web needs 3 healthy pods and has 3 currently"})
	return err
}

// TestOnlyABudgetsRefusalIsToldAsABudgets: of the evictions the API server
// answers 429, only those whose answer names a PodDisruptionBudget are
// EvictionBlocked; a 429 without one (priority and fairness shedding load,
// a webhook's limit) is EvictionFailed, with the answer.
func TestOnlyABudgetsRefusalIsToldAsABudgets(t *testing.T) {
	for _, tc := range []struct {
		name       string
		answer     error
		reason     string
		notReason  string
		inDraining string
	}{
		{"a budget", budgetRefusal(), ReasonEvictionBlocked, ReasonEvictionFailed, "1 held by a PodDisruptionBudget"},
		{"load shed", apierrors.NewTooManyRequests("too many requests, please try again later", 1), ReasonEvictionFailed, ReasonEvictionBlocked,
			"1 eviction(s) failed (pod team-a/app: too many requests, please try again later)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team-a"}, Spec: corev1.PodSpec{NodeName: "web-a"}}
			f := deletedNodeFixture(t, pod)
			f.onEviction(func() error { return tc.answer })
			require.NoError(t, f.sync("web-a"))
			events := strings.Join(f.events(), "\n")
			assert.Contains(t, events, tc.reason)
			assert.NotContains(t, events, tc.notReason)
			cond := drainCondition(f.get("web-a"))
			require.NotNil(t, cond, "the drain's progress is on the Node")
			assert.Contains(t, cond.Message, tc.inDraining, fmt.Sprintf("%s: %s", cond.Reason, cond.Message))
		})
	}
}
