package nodeset

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestAPausedSetWithNothingOutdatedSaysWhereItIs: Progressing says Paused
// while a paused set has outdated nodes left. A paused set whose nodes
// are all of its template has no rollout held: its Progressing says what
// it waits for, or Complete once every node is available and no node is
// terminating, so that kubectl nodeset rollout status returns for it as
// kubectl rollout status does for a paused Deployment that is rolled out.
// A paused set is never timed.
func TestAPausedSetWithNothingOutdatedSaysWhereItIs(t *testing.T) {
	class := validClass("sim")
	set := newSet(2)
	set.Spec.Paused = true
	set.Spec.MinReadySeconds = 3600
	set.Spec.ProgressDeadlineSeconds = ptr.To[int32](7200)
	res := accepted(t, class, set)
	available := setNode(t, set, class, "a", 4*time.Hour, true)    // Ready 2h
	availableToo := setNode(t, set, class, "b", 3*time.Hour, true) // Ready 1h30
	fresh := setNode(t, set, class, "c", 20*time.Minute, true)     // Ready 10m
	notReady := setNode(t, set, class, "d", time.Minute, false)
	terminating := setNode(t, set, class, "e", 5*time.Hour, true)
	terminating.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
	outdated := setNode(t, set, class, "f", 5*time.Hour, true)
	outdated.Labels[nodesetv1alpha1.LabelTemplateHash] = "old"

	for _, tc := range []struct {
		name    string
		nodes   []*corev1.Node
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		{"outdated nodes left", []*corev1.Node{available, outdated}, metav1.ConditionUnknown, ReasonPaused,
			"the NodeSet is paused with 1 of 2 nodes updated"},
		{"a node not Ready", []*corev1.Node{available, notReady}, metav1.ConditionTrue, ReasonWaitingForReady, "1 of 2 nodes ready"},
		{"a node not available yet", []*corev1.Node{available, fresh}, metav1.ConditionTrue, ReasonWaitingForAvailable,
			"1 of 2 nodes available (Ready for minReadySeconds, 3600)"},
		{"a node terminating", []*corev1.Node{available, availableToo, terminating}, metav1.ConditionTrue, ReasonScalingDown, "1 nodes terminating"},
		{"rolled out", []*corev1.Node{available, availableToo}, metav1.ConditionTrue, ReasonComplete, "2 of 2 nodes ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status := computeStatus(set, res, tc.nodes, nil, testNow)
			progressing := findCondition(status.Conditions, nodesetv1alpha1.NodeSetProgressing)
			require.NotNil(t, progressing)
			assert.Equal(t, tc.reason, progressing.Reason)
			assert.Equal(t, tc.status, progressing.Status)
			assert.Equal(t, tc.message, progressing.Message)
			assert.Nil(t, status.LastProgressTime, "a paused set is not timed")
		})
	}
}
