package lifecycle

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/test/framework"
)

// TestTenantScalingWhileItsClassIsTakenAway: a namespace's editor, with
// the webhook away, scales its NodeSet through /scale as fast as it can
// while the admin takes the class away from its namespace. Once the
// nodeset controller has said the set is not Accepted, no Node is made
// for it, however the tenant scales, deletes and makes the set again
// under the same name; its Nodes from before stay, as a refused set's do.
func TestTenantScalingWhileItsClassIsTakenAway(t *testing.T) {
	c := startControllers(t)
	_, admin := clients(t)
	ctx := context.Background()
	attacker := createNamespace(t, "t10-race-a")
	const class = "t10-race"
	createClass(t, class, func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.AllowedNamespaces = &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromList, Namespaces: []string{attacker}}
	})
	withoutWebhook(t)
	_, cs := tenant(t, "tenant-a", attacker)
	sets := cs.NodesetV1alpha1().NodeSets(attacker)
	_, err := sets.Create(ctx, tenantSet("r", class, 1), metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "the set", converged(c, t, attacker, "r", 1))

	scaling, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; scaling.Err() == nil; i++ {
			_ = framework.Scale(scaling, cs, attacker, "r", int32(1+i%3))
		}
	}()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got, err := admin.NodesetV1alpha1().NodeClasses().Get(ctx, class, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got.Spec.AllowedNamespaces.Namespaces = []string{"somebody-else"}
		_, err = admin.NodesetV1alpha1().NodeClasses().Update(ctx, got, metav1.UpdateOptions{})
		return err
	}))
	var refusedAt time.Time
	eventually(t, time.Minute, "the controller refuses the set", func(ctx context.Context) (bool, string) {
		got, err := sets.Get(ctx, "r", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
		if cond == nil || cond.Reason != "NamespaceNotAllowed" {
			return false, fmt.Sprintf("%+v", cond)
		}
		refusedAt = cond.LastTransitionTime.Time
		return true, ""
	})
	// Go on scaling past the moment of the refusal, then stop.
	eventually(t, 30*time.Second, "a second past the refusal", func(context.Context) (bool, string) {
		return time.Now().After(refusedAt.Add(2 * time.Second)), refusedAt.String()
	})
	stop()
	wg.Wait()
	require.NoError(t, framework.Scale(ctx, cs, attacker, "r", 3))
	acceptedWith := func(name string) {
		t.Helper()
		eventually(t, time.Minute, name+" refused for its current generation", func(ctx context.Context) (bool, string) {
			got, err := sets.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
			return cond != nil && cond.ObservedGeneration == got.Generation && cond.Reason == "NamespaceNotAllowed", fmt.Sprintf("%+v", cond)
		})
	}
	acceptedWith("r")
	noNewNodes := func(what string) {
		t.Helper()
		nodes, err := setNodes(ctx, t, attacker, "r")
		require.NoError(t, err)
		for _, n := range nodes {
			// Timestamps are whole seconds.
			assert.False(t, n.CreationTimestamp.After(refusedAt.Add(time.Second)),
				"%s: Node %s made at %s, after the set was refused at %s", what, n.Name, n.CreationTimestamp, refusedAt)
		}
		assert.NotEmpty(t, nodes, "%s: its Nodes from before stay", what)
	}
	noNewNodes("scaled after the refusal")

	// Deleted and made again under the same name: still refused, no Node.
	require.NoError(t, sets.Delete(ctx, "r", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)}))
	eventually(t, 2*time.Minute, "the set made again", func(ctx context.Context) (bool, string) {
		_, err := sets.Create(ctx, tenantSet("r", class, 3), metav1.CreateOptions{})
		return err == nil, fmt.Sprint(err)
	})
	acceptedWith("r")
	eventually(t, 2*time.Minute, "the first set's Nodes go with it", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, attacker, "r")
		return err == nil && len(nodes) == 0, fmt.Sprintf("%d Nodes, %v", len(nodes), err)
	})
}
