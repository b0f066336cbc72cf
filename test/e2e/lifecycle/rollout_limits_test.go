package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	nodesetcontroller "nodeset.dev/nodeset/pkg/controller/nodeset"
)

// TestRolloutStatusWaitsForRoomInTheClassLimits: a set whose class's
// limits leave no room for its surge (maxSurge 1, maxUnavailable 0)
// cannot start its rollout. It says LimitExceeded, and its Progressing
// condition stays the rollout's, naming the limit; kubectl nodeset
// rollout status, run by the tenant right after the edit, waits for room
// as kubectl waits for a Deployment whose new pods a quota refuses, and
// returns once the admin raised the limit and the rollout is done.
func TestRolloutStatusWaitsForRoomInTheClassLimits(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ns := createNamespace(t, "rollout-room")
	createClass(t, "rollout-room-sim", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To[int32](2)}
	})
	createSet(t, ns, "web", "rollout-room-sim", 2)
	tenant(t, "tenant-a", ns)
	eventually(t, 2*time.Minute, "2 nodes", converged(c, t, ns, "web", 2))
	updateSet(t, ns, "web", func(s *nodesetv1alpha1.NodeSet) {
		s.Spec.Template.Labels = map[string]string{"tier": "edited"}
	})

	// Once the set waits for room, the admin raises the limit; what the
	// set said meanwhile is checked below.
	seen := make(chan string, 1)
	go func() {
		var last string
		err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			accepted := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
			progressing := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetProgressing)
			if set.Status.ObservedGeneration != set.Generation || accepted == nil || accepted.Reason != nodesetv1alpha1.ReasonLimitExceeded || progressing == nil {
				return false, nil
			}
			last = fmt.Sprintf("Progressing %s %s: %s", progressing.Status, progressing.Reason, progressing.Message)
			return true, nil
		})
		if err == nil {
			err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				class, err := cs.NodesetV1alpha1().NodeClasses().Get(context.Background(), "rollout-room-sim", metav1.GetOptions{})
				if err != nil {
					return err
				}
				class.Spec.Limits.MaxNodes = ptr.To[int32](3)
				_, err = cs.NodesetV1alpha1().NodeClasses().Update(context.Background(), class, metav1.UpdateOptions{})
				return err
			})
		}
		if err != nil {
			last = "no LimitExceeded, or the limit not raised: " + err.Error()
		}
		seen <- last
	}()

	out, errText := plugin(t, "tenant-a", "-n", ns, "rollout", "status", "web", "--timeout=3m")
	waiting := <-seen
	require.True(t, strings.HasPrefix(waiting, "Progressing True "+nodesetcontroller.ReasonRollingUpdate+": "), "the set waiting for room is rolling out: %s", waiting)
	require.Contains(t, waiting, "spec.limits.maxNodes", "the rollout names the limit it waits for")
	require.Empty(t, errText, out)
	require.True(t, strings.HasSuffix(out, "NodeSet \"web\" successfully rolled out\n"), out)
	require.Contains(t, out, "waiting for room", "rollout status said what it waited for")
	nodes, err := setNodes(context.Background(), t, ns, "web")
	require.NoError(t, err)
	require.Len(t, nodes, 2, out)
	for _, n := range nodes {
		require.Equal(t, "edited", n.Labels["tier"], "node %s is of the new template", n.Name)
		require.Nil(t, n.DeletionTimestamp, "node %s", n.Name)
	}
}
