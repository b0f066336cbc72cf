package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodecontroller "nodeset.dev/nodeset/pkg/controller/node"
)

// TestAStuckDrainNamesItsPodAndBudget: a drain held by a tenant's
// PodDisruptionBudget names, in the Node's Draining condition and its
// EvictionBlocked Event, the pod and the budget, in the API server's own
// words on the refusal, so the admin knows whom to ask.
func TestAStuckDrainNamesItsPodAndBudget(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "heldby")
	node := drainingNode(t, c, ns, "heldby-sim", "heldby", 10*time.Minute, func(node string) {
		guardedPod(t, ns, "stubborn", node, "tenant-budget")
	})
	held := fmt.Sprintf("pod %s/stubborn: The disruption budget tenant-budget needs", ns)
	eventually(t, time.Minute, "the pod and its budget named in the Draining condition", func(ctx context.Context) (bool, string) {
		msg, err := drainMessage(ctx, t, node)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(msg, held), msg
	})
	eventually(t, time.Minute, "the pod and its budget named in the EvictionBlocked Event", func(ctx context.Context) (bool, string) {
		events, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + node})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range events.Items {
			if e.Reason == nodecontroller.ReasonEvictionBlocked && strings.Contains(e.Message, held) {
				return true, ""
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, strings.Join(seen, "\n")
	})
	require.NoError(t, kube.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "tenant-budget", metav1.DeleteOptions{}))
	eventually(t, time.Minute, "node drained and gone", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}
