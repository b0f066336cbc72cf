package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	nodecontroller "nodeset.dev/nodeset/pkg/controller/node"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/test/framework"
)

// TestAKubeletsNodeLabelledLaterGetsNoMachine: a Node a kubelet runs (Ready)
// that an admin labels with a class afterwards is not provisioned: a
// machine made under its name would be a second host for one Node. The
// node controller says so on the Node and leaves it as it was.
func TestAKubeletsNodeLabelledLaterGetsNoMachine(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	createClass(t, "edge-foreign", nil)
	_, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-kubelet",
		Labels: map[string]string{"kubernetes.io/hostname": "edge-kubelet"}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), "edge-kubelet", metav1.DeleteOptions{}) })
	markNodeReady(ctx, t, "edge-kubelet")
	_, err = kube.CoreV1().Nodes().Patch(ctx, "edge-kubelet", "application/merge-patch+json",
		fmt.Appendf(nil, `{"metadata":{"labels":{%q:"edge-foreign"}}}`, nodesetv1alpha1.LabelNodeClass), metav1.PatchOptions{})
	require.NoError(t, err)

	eventuallyEvent(t, "edge-kubelet", nodecontroller.ReasonForeignNode)
	n, err := kube.CoreV1().Nodes().Get(ctx, "edge-kubelet", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, n.Spec.ProviderID, "no machine recorded")
	assert.Empty(t, n.Finalizers, "not taken over")
	all, ok := c.machines(ctx)
	require.True(t, ok)
	assert.False(t, slices.ContainsFunc(all, func(m framework.Machine) bool { return m.Name == "edge-kubelet" }), "no second host")
}

// TestALoneNodeThatNeverRegistersIsReplacedInPlace: a static Node whose
// machine does not register within the class's registrationTimeout gets a
// new machine, and stays the same Node (no NodeSet would make it again);
// its machines never pile up, and deleting it removes the last one.
func TestALoneNodeThatNeverRegistersIsReplacedInPlace(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	createClass(t, "edge-never-ready", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Simulated.FailurePercent = ptr.To[int32](100)
		class.Spec.RegistrationTimeout = &metav1.Duration{Duration: 2 * time.Second}
	})
	created, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-static",
		Labels: map[string]string{nodesetv1alpha1.LabelNodeClass: "edge-never-ready"}}}, metav1.CreateOptions{})
	require.NoError(t, err)

	var first string
	eventually(t, time.Minute, "the machine recorded, pods kept off until it registers", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, "edge-static", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		first = n.Annotations[nodesetv1alpha1.AnnotationMachineCreated]
		return n.Spec.ProviderID != "" && nodeutil.HasStartupTaint(n), fmt.Sprintf("providerID=%q taints=%v", n.Spec.ProviderID, n.Spec.Taints)
	})
	eventuallyEvent(t, "edge-static", nodecontroller.ReasonRegistrationTimeout)
	eventually(t, time.Minute, "a new machine for the same Node", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, "edge-static", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		require.Equal(t, created.UID, n.UID, "the same Node")
		require.Nil(t, n.DeletionTimestamp, "never deleted")
		if all, ok := c.machines(ctx); ok {
			count := 0
			for _, m := range all {
				if m.Name == "edge-static" {
					count++
				}
			}
			assert.LessOrEqual(t, count, 1, "one machine at a time")
		}
		now := n.Annotations[nodesetv1alpha1.AnnotationMachineCreated]
		return n.Spec.ProviderID != "" && now != "" && now != first, fmt.Sprintf("machine created %q, first %q", now, first)
	})

	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, "edge-static", metav1.DeleteOptions{}))
	eventually(t, time.Minute, "the Node and its machine gone", func(ctx context.Context) (bool, string) {
		if _, err := kube.CoreV1().Nodes().Get(ctx, "edge-static", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("node still there (%v)", err)
		}
		all, ok := c.machines(ctx)
		return ok && !slices.ContainsFunc(all, func(m framework.Machine) bool { return m.Name == "edge-static" }), "machine still there"
	})
}
