package kubectlplugin

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestRolloutStatus: where a NodeSet's rollout is, read as kubectl's
// rollout status reads a Deployment: only a status of the set's latest
// generation counts; done once every node is of the current template,
// available, no old node is left and Progressing says Complete; an error
// for a set not accepted, past its progress deadline, deleted, or OnDelete.
func TestRolloutStatus(t *testing.T) {
	set := func(mutate func(*nodesetv1alpha1.NodeSet)) *nodesetv1alpha1.NodeSet {
		s := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Generation: 3},
			Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "sim", Replicas: ptr.To[int32](3)},
			Status: nodesetv1alpha1.NodeSetStatus{ObservedGeneration: 3, ObservedClassGeneration: 5, Replicas: 3, ReadyReplicas: 3, AvailableReplicas: 3, UpdatedReplicas: 3,
				Conditions: []metav1.Condition{
					{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionTrue, Reason: "Accepted"},
					{Type: nodesetv1alpha1.NodeSetProgressing, Status: metav1.ConditionTrue, Reason: "Complete", Message: "3 of 3 nodes ready"}}}}
		mutate(s)
		return s
	}
	progressing := func(s *nodesetv1alpha1.NodeSet, status metav1.ConditionStatus, reason, message string) {
		s.Status.Conditions[1] = metav1.Condition{Type: nodesetv1alpha1.NodeSetProgressing, Status: status, Reason: reason, Message: message}
	}
	for _, tc := range []struct {
		name    string
		set     *nodesetv1alpha1.NodeSet
		want    string
		done    bool
		wantErr string
	}{
		{"done", set(func(*nodesetv1alpha1.NodeSet) {}), `NodeSet "web" successfully rolled out` + "\n", true, ""},
		{"an edit not observed yet", set(func(s *nodesetv1alpha1.NodeSet) { s.Generation = 4 }),
			`Waiting for the update of NodeSet "web" to be observed...` + "\n", false, ""},
		{"new nodes to come", set(func(s *nodesetv1alpha1.NodeSet) { s.Status.UpdatedReplicas = 1 }),
			`Waiting for NodeSet "web" rollout to finish: 1 out of 3 new nodes have been updated...` + "\n", false, ""},
		{"old nodes to go", set(func(s *nodesetv1alpha1.NodeSet) { s.Status.Replicas = 4 }),
			`Waiting for NodeSet "web" rollout to finish: 1 old nodes are pending termination...` + "\n", false, ""},
		{"new nodes not available", set(func(s *nodesetv1alpha1.NodeSet) { s.Status.AvailableReplicas = 2 }),
			`Waiting for NodeSet "web" rollout to finish: 2 of 3 updated nodes are available...` + "\n", false, ""},
		{"nodes still terminating", set(func(s *nodesetv1alpha1.NodeSet) {
			progressing(s, metav1.ConditionTrue, "ScalingDown", "1 nodes terminating")
		}), `Waiting for NodeSet "web" rollout to finish: 1 nodes terminating...` + "\n", false, ""},
		{"not accepted", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Status.Conditions[0] = metav1.Condition{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse, Reason: "NotAllowed", Message: "no"}
		}), "", false, `NodeSet "web" is not accepted (NotAllowed): no`},
		{"no verdict yet", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Status.Conditions[0] = metav1.Condition{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse, Reason: "NodeClassNotValidated",
				Message: "NodeClass \"sim\" waits for the node controller serving driver \"simulated\" to validate generation 5"}
		}), `Waiting for NodeSet "web" to be judged: NodeClass "sim" waits for the node controller serving driver "simulated" to validate generation 5...` + "\n", false, ""},
		{"no node controller serves the driver", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Status.Conditions[0] = metav1.Condition{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse, Reason: "DriverNotServed",
				Message: "no node controller serves driver \"simulated\""}
		}), "", false, `NodeSet "web" is not accepted (DriverNotServed): no node controller serves driver "simulated"`},
		// A set waiting for room in its class's limits is waited for, as
		// kubectl waits for a Deployment whose new pods a quota refuses
		// (its status viewer fails on ProgressDeadlineExceeded alone):
		// another set's machine gone, or a limit raised, lets it go on.
		{"waiting for room", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Status.UpdatedReplicas = 0
			s.Status.Conditions[0] = metav1.Condition{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse, Reason: "LimitExceeded",
				Message: "NodeClass \"sim\" allows at most 3 nodes (spec.limits.maxNodes) and has 3"}
			progressing(s, metav1.ConditionTrue, "RollingUpdate", "0 of 3 nodes updated, 3 outdated, 3 available")
		}), `Waiting for NodeSet "web" rollout to finish: 0 out of 3 new nodes have been updated` +
			` (waiting for room: NodeClass "sim" allows at most 3 nodes (spec.limits.maxNodes) and has 3)...` + "\n", false, ""},
		{"waiting for room to scale up", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.Strategy.Type = nodesetv1alpha1.ManagedStrategy
			s.Status.Conditions[0] = metav1.Condition{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse, Reason: "LimitExceeded",
				Message: "NodeClass \"sim\" allows at most 3 nodes (spec.limits.maxNodes) and has 3"}
			progressing(s, metav1.ConditionTrue, "ScalingUp", "3 of 4 nodes created; waiting for room: NodeClass \"sim\" allows at most 3 nodes (spec.limits.maxNodes) and has 3")
		}), `Waiting for NodeSet "web" rollout to finish: 3 of 4 nodes created; waiting for room: NodeClass "sim" allows at most 3 nodes (spec.limits.maxNodes) and has 3...` + "\n", false, ""},
		{"done, over a limit lowered since", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Status.Conditions[0] = metav1.Condition{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse, Reason: "LimitExceeded",
				Message: "NodeClass \"sim\" allows at most 2 nodes (spec.limits.maxNodes) and has 3"}
		}), `NodeSet "web" successfully rolled out` + "\n", true, ""},
		{"past its deadline", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Status.UpdatedReplicas = 1
			progressing(s, metav1.ConditionFalse, "ProgressDeadlineExceeded", "no progress for 60s")
		}), "", false, `NodeSet "web" exceeded its progress deadline: no progress for 60s`},
		{"a cloud group's update failed", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.Strategy.Type = nodesetv1alpha1.ManagedStrategy
			s.Status.UpdatedReplicas = 1
			progressing(s, metav1.ConditionFalse, "GroupUpdateFailed", "1 of 3 nodes updated, 2 outdated: update u-1 of cloud group ng is Failed")
		}), "", false, `NodeSet "web": its cloud group's update failed: 1 of 3 nodes updated, 2 outdated: update u-1 of cloud group ng is Failed`},
		{"deleted", set(func(s *nodesetv1alpha1.NodeSet) { s.DeletionTimestamp = ptr.To(metav1.Now()) }), "", false, `NodeSet "web" is being deleted`},
		{"OnDelete", set(func(s *nodesetv1alpha1.NodeSet) { s.Spec.Strategy.Type = nodesetv1alpha1.OnDeleteStrategy }), "", false, "strategy OnDelete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, done, err := rolloutStatus(tc.set, 5)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.done, done)
		})
	}
}

// TestRolloutStatusWaitsForAClassEdit: an edit of the NodeClass gives the
// set no new generation; the rollout is not done until the set's status is
// of the class's generation when the command started. A class the user
// cannot read (0) leaves the set alone to judge.
func TestRolloutStatusWaitsForAClassEdit(t *testing.T) {
	set := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Generation: 3},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "sim", Replicas: ptr.To[int32](1)},
		Status: nodesetv1alpha1.NodeSetStatus{ObservedGeneration: 3, ObservedClassGeneration: 5, Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1, UpdatedReplicas: 1,
			Conditions: []metav1.Condition{{Type: nodesetv1alpha1.NodeSetProgressing, Status: metav1.ConditionTrue, Reason: "Complete"}}}}
	got, done, err := rolloutStatus(set, 6)
	require.NoError(t, err)
	assert.False(t, done)
	assert.Equal(t, `Waiting for generation 6 of NodeClass "sim" to be observed by NodeSet "web"...`+"\n", got)

	for _, class := range []int64{5, 0} {
		_, done, err = rolloutStatus(set, class)
		require.NoError(t, err)
		assert.True(t, done, "class generation %d", class)
	}

	set.Status.ObservedClassGeneration = 0
	_, done, err = rolloutStatus(set, 6)
	require.NoError(t, err)
	assert.True(t, done, "a controller that does not record the class's generation: the set's word alone")

	set.Status.Conditions = append(set.Status.Conditions, metav1.Condition{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse,
		Reason: nodesetv1alpha1.ReasonNodeClassNotFound, Message: `NodeClass "sim" not found`})
	got, done, err = rolloutStatus(set, 6)
	require.NoError(t, err, "the class exists: the controller has not seen it yet")
	assert.False(t, done)
	assert.Equal(t, `Waiting for NodeSet "web" to be judged: NodeClass "sim" not found...`+"\n", got)
	_, _, err = rolloutStatus(set, 0)
	assert.ErrorContains(t, err, `NodeSet "web" is not accepted (NodeClassNotFound)`, "no class to be seen")
}

// TestRolloutRestartPauseResume: restart writes a new
// nodeset.dev/restartedAt template annotation (a new template); pause and
// resume flip spec.paused. Each refuses what kubectl refuses for a
// Deployment (a paused set's restart, a pause twice, a resume of a set not
// paused), and restart a Managed set, whose cloud group would replace none.
func TestRolloutRestartPauseResume(t *testing.T) {
	now := time.Date(2026, 11, 28, 14, 0, 0, 0, time.UTC)
	set := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web"}}

	patch, done, err := restart(set, now)
	require.NoError(t, err)
	assert.Equal(t, "restarted", done)
	assert.Equal(t, map[string]any{"spec": map[string]any{"template": map[string]any{"annotations": map[string]string{
		"nodeset.dev/restartedAt": "2026-11-28T14:00:00Z"}}}}, patch)

	patch, done, err = pause(set, now)
	require.NoError(t, err)
	assert.Equal(t, "paused", done)
	assert.Equal(t, map[string]any{"spec": map[string]any{"paused": true}}, patch)
	_, _, err = resume(set, now)
	assert.EqualError(t, err, `NodeSet "web" is not paused`)

	set.Spec.Paused = true
	_, _, err = pause(set, now)
	assert.EqualError(t, err, `NodeSet "web" is already paused`)
	_, _, err = restart(set, now)
	assert.ErrorContains(t, err, `NodeSet "web" is paused: run kubectl nodeset rollout resume web first`)
	patch, done, err = resume(set, now)
	require.NoError(t, err)
	assert.Equal(t, "resumed", done)
	assert.Equal(t, map[string]any{"spec": map[string]any{"paused": false}}, patch)

	set.Spec.Paused = false
	set.Spec.Strategy.Type = nodesetv1alpha1.ManagedStrategy
	_, _, err = restart(set, now)
	assert.ErrorContains(t, err, "strategy Managed")
}
