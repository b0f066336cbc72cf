package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestRolloutStatusOfAPausedSet: as kubectl rollout status does for a
// paused Deployment, kubectl nodeset rollout status returns for a paused
// set whose nodes are all of its template and available (an admin pauses
// the sets before an upgrade and checks them), and waits while a paused
// set has outdated nodes; once resumed it returns when the rollout is done.
func TestRolloutStatusOfAPausedSet(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	_, cs := clients(t)
	ns := createNamespace(t, "paused-status")
	createClass(t, "paused-status-sim", nil)
	createSet(t, ns, "web", "paused-status-sim", 2)
	t.Cleanup(func() {
		_ = cs.NodesetV1alpha1().NodeSets(ns).Delete(context.Background(), "web", metav1.DeleteOptions{})
		eventually(t, 2*time.Minute, "the set's nodes gone", func(ctx context.Context) (bool, string) {
			nodes, err := setNodes(ctx, t, ns, "web")
			if err != nil {
				return false, err.Error()
			}
			return len(nodes) == 0, fmt.Sprintf("%d nodes left", len(nodes))
		})
	})
	tenant(t, "tenant-a", ns)
	eventually(t, 2*time.Minute, "2 nodes", converged(c, t, ns, "web", 2))

	out, errText := plugin(t, "tenant-a", "-n", ns, "rollout", "pause", "web")
	require.Empty(t, errText, out)
	out, errText = plugin(t, "tenant-a", "-n", ns, "rollout", "status", "web", "--timeout=1m")
	require.Empty(t, errText, "a paused set with every node of its template is rolled out: %s", out)
	require.True(t, strings.HasSuffix(out, "NodeSet \"web\" successfully rolled out\n"), out)

	// Edited while paused: the set has outdated nodes, its rollout is
	// held, and rollout status says so.
	updateSet(t, ns, "web", func(s *nodesetv1alpha1.NodeSet) {
		s.Spec.Template.Labels = map[string]string{"tier": "edited"}
	})
	eventually(t, time.Minute, "the held rollout", func(ctx context.Context) (bool, string) {
		out, errText := plugin(t, "tenant-a", "-n", ns, "rollout", "status", "web", "--watch=false")
		return errText == "" && out == "Waiting for NodeSet \"web\" rollout to finish: 0 out of 2 new nodes have been updated...\n", out + errText
	})
	if p := progressing(t, ns, "web"); p.Reason != "Paused" {
		t.Fatalf("a paused set with outdated nodes says %s: %s", p.Reason, p.Message)
	}

	out, errText = plugin(t, "tenant-a", "-n", ns, "rollout", "resume", "web")
	require.Empty(t, errText, out)
	out, errText = plugin(t, "tenant-a", "-n", ns, "rollout", "status", "web", "--timeout=3m")
	require.Empty(t, errText, out)
	require.True(t, strings.HasSuffix(out, "NodeSet \"web\" successfully rolled out\n"), out)
	nodes, err := setNodes(ctx, t, ns, "web")
	require.NoError(t, err)
	require.Len(t, nodes, 2)
	for _, n := range nodes {
		require.Equal(t, "edited", n.Labels["tier"], "node %s", n.Name)
		require.Nil(t, n.DeletionTimestamp, "node %s", n.Name)
	}
}
