package ha

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/test/framework"
)

// TestNodesAreSchedulableWithoutTheControllerManager scales a NodeSet up
// while kube-controller-manager is stopped. The API server's
// TaintNodesByCondition admission plugin gives every new Node
// node.kubernetes.io/not-ready:NoSchedule, and the node lifecycle
// controller that would lift it is away: the Nodes are schedulable all the
// same once registered, because registration lifts that taint with the
// startup taints, in the same write.
func TestNodesAreSchedulableWithoutTheControllerManager(t *testing.T) {
	ctx := context.Background()
	cp := framework.Shared(t)
	_, kube, cs := startSupervised(t, cp)

	const ns, set = "no-kcm", "web"
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "no-kcm-sim"},
		Spec: nodesetv1alpha1.NodeClassSpec{
			Driver:         nodesetv1alpha1.DriverSimulated,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.small"}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: set, Namespace: ns},
		Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: "no-kcm-sim", Replicas: ptr.To[int32](0)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	const controllerManager = "kube-controller-manager"
	require.NoError(t, cp.StopComponent(controllerManager))
	t.Cleanup(func() {
		startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		require.NoError(t, cp.StartComponent(startCtx, controllerManager), "kube-controller-manager back for the other tests")
	})

	// Every version of the set's Nodes, from their creation on.
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	w, err := kube.CoreV1().Nodes().Watch(watchCtx, ofSet(ns, set))
	require.NoError(t, err)
	type seen struct{ admissionTaint, registeredTainted bool }
	versions := make(chan map[string]seen, 1)
	go func() {
		byNode := map[string]seen{}
		for e := range w.ResultChan() {
			node, ok := e.Object.(*corev1.Node)
			if !ok {
				continue
			}
			s := byNode[node.Name]
			tainted := slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
				return t.Key == corev1.TaintNodeNotReady && t.Effect == corev1.TaintEffectNoSchedule
			})
			s.admissionTaint = s.admissionTaint || tainted
			s.registeredTainted = s.registeredTainted || (tainted && !nodeutil.HasStartupTaint(node))
			byNode[node.Name] = s
		}
		versions <- byNode
	}()

	scale(t, cs, ns, set, 3)
	eventually(t, 2*time.Minute, "3 Nodes Ready and registered", func(ctx context.Context) (bool, string) {
		return readyNodes(ctx, kube, ns, set, 3)
	})
	list, err := kube.CoreV1().Nodes().List(ctx, ofSet(ns, set))
	require.NoError(t, err)
	stopWatch()
	byNode := <-versions
	require.Len(t, list.Items, 3)
	for _, node := range list.Items {
		assert.Empty(t, node.Spec.Taints, "%s: schedulable once registered", node.Name)
		assert.True(t, byNode[node.Name].admissionTaint, "%s: the admission plugin tainted it not-ready on creation", node.Name)
		assert.False(t, byNode[node.Name].registeredTainted, "%s: no version registered and still tainted not-ready", node.Name)
	}

	scale(t, cs, ns, set, 0)
	eventually(t, 2*time.Minute, "the set's Nodes gone", func(ctx context.Context) (bool, string) {
		names := nodeNamesOf(ctx, kube, ns, set)
		return len(names) == 0, fmt.Sprintf("%d left: %v", len(names), names)
	})
}
