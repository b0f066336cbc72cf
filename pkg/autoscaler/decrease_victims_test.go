package autoscaler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
	"nodeset.dev/nodeset/pkg/plan"
)

// TestDecreaseTargetSizeTakesOnlyNodesWithoutAMachine: cluster-autoscaler's
// DecreaseTargetSize "doesn't permit to delete any existing node and can be
// used only to reduce the request for new nodes that have not been yet
// fulfilled" (cloudprovider/cloud_provider.go, NodeGroup.DecreaseTargetSize);
// it calls it to take back a scale-up that timed out
// (clusterstate.updateScaleRequests) and to fix a group of an incorrect size
// (static_autoscaler.go, fixNodeGroupSize), and never drains a node for it.
// The decrease is accepted because the set has a Node with no machine, so
// that Node is what goes when the NodeSetController plans the new
// spec.replicas (plan.Decide), not a Node with a machine that some other
// rule ranks first: a Node an admin marked nodeset.dev/delete-node, a
// booting one, or one of the delete policy's choosing.
func TestDecreaseTargetSizeTakesOnlyNodesWithoutAMachine(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas int32
		policy   nodesetv1alpha1.DeletePolicy
		nodes    func(set *nodesetv1alpha1.NodeSet) []*corev1.Node
		delta    int32
		gone     []string
	}{{
		name:     "a Node marked delete-node with a machine stays",
		replicas: 3,
		nodes: func(set *nodesetv1alpha1.NodeSet) []*corev1.Node {
			marked := setNode(set, "web-a", "simulated:///web-a", true)
			marked.Annotations = map[string]string{nodesetv1alpha1.AnnotationDeleteNode: "true"}
			return []*corev1.Node{marked, setNode(set, "web-b", "simulated:///web-b", true), setNode(set, "web-c", "", false)}
		},
		delta: -1,
		gone:  []string{"web-c"},
	}, {
		name:     "a replica without a Node and a Node without a machine go, the marked one stays",
		replicas: 4, // one replica has no Node at all
		nodes: func(set *nodesetv1alpha1.NodeSet) []*corev1.Node {
			marked := setNode(set, "web-a", "simulated:///web-a", true)
			marked.Annotations = map[string]string{nodesetv1alpha1.AnnotationDeleteNode: "true"}
			return []*corev1.Node{marked, setNode(set, "web-c", "", false), setNode(set, "web-d", "", false)}
		},
		delta: -2,
		gone:  []string{"web-d"},
	}, {
		name:     "the marked Node stays under the Oldest policy too",
		replicas: 2,
		policy:   nodesetv1alpha1.DeletePolicyOldest,
		nodes: func(set *nodesetv1alpha1.NodeSet) []*corev1.Node {
			old := setNode(set, "web-a", "simulated:///web-a", true)
			old.Annotations = map[string]string{nodesetv1alpha1.AnnotationDeleteNode: "yes"}
			old.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
			fresh := setNode(set, "web-c", "", false)
			fresh.CreationTimestamp = metav1.NewTime(time.Now())
			return []*corev1.Node{old, fresh}
		},
		delta: -1,
		gone:  []string{"web-c"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			set := testSet(tc.replicas)
			set.Spec.DeletePolicy = tc.policy
			nodes := tc.nodes(set)
			f := newFixture(t, nil, set, nodes...)
			_, err := f.server.NodeGroupDecreaseTargetSize(context.Background(), &protos.NodeGroupDecreaseTargetSizeRequest{Id: "team-a/web", Delta: tc.delta})
			require.NoError(t, err)
			written := f.set(t)
			assert.Equal(t, plan.Replicas(set)+tc.delta, plan.Replicas(written))

			// What the NodeSetController removes for the written set.
			var gone []string
			for _, n := range plan.Decide(written, "h1", nodes, time.Now()).Remove {
				gone = append(gone, n.Name)
			}
			assert.ElementsMatch(t, tc.gone, gone, "the decrease must take only Nodes without a machine")
		})
	}
}
