package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	nodesetcontroller "nodeset.dev/nodeset/pkg/controller/nodeset"
	"nodeset.dev/nodeset/test/framework"
)

// TestAClassIsHeldWhileAStaticNodeUsesIt: a NodeClass deleted while a
// static Node (an admin's, with only the class label) still uses it stays,
// deleting, with a NodeClassInUse Event naming the Node, as it does for
// its NodeSets: the Node's deletion drains and deprovisions it with the
// class's settings and credentials. Once the Node and its machine are
// gone, the class goes.
func TestAClassIsHeldWhileAStaticNodeUsesIt(t *testing.T) {
	c := startControllers(t)
	kube, cs := clients(t)
	ctx := context.Background()
	const className, nodeName = "hold-static", "hold-static-1"
	createClass(t, className, nil)
	waitClassValid(t, className)
	_, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName,
		Labels: map[string]string{nodesetv1alpha1.LabelNodeClass: className}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), nodeName, metav1.DeleteOptions{}) })
	eventually(t, time.Minute, "the static Node has its machine", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		all, ok := c.machines(ctx)
		return ok && n.Spec.ProviderID != "" && slices.ContainsFunc(all, func(m framework.Machine) bool { return m.Name == nodeName }),
			fmt.Sprintf("providerID=%q", n.Spec.ProviderID)
	})
	eventually(t, time.Minute, "the class carries the in-use finalizer", func(ctx context.Context) (bool, string) {
		class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, className, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return slices.Contains(class.Finalizers, nodesetv1alpha1.FinalizerInUse), fmt.Sprintf("finalizers %v", class.Finalizers)
	})

	require.NoError(t, cs.NodesetV1alpha1().NodeClasses().Delete(ctx, className, metav1.DeleteOptions{}))
	eventually(t, time.Minute, "the deleted class held for its static Node", func(ctx context.Context) (bool, string) {
		class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, className, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			t.Fatalf("NodeClass %s went while static Node %s still uses it: the Node's drain and deprovisioning have no class", className, nodeName)
		}
		if err != nil {
			return false, err.Error()
		}
		events, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + className})
		if err != nil {
			return false, err.Error()
		}
		var told []string
		for _, e := range events.Items {
			if e.Reason == nodesetcontroller.ReasonClassInUse {
				told = append(told, e.Message)
			}
		}
		return class.DeletionTimestamp != nil && slices.ContainsFunc(told, func(m string) bool { return strings.Contains(m, nodeName) }),
			fmt.Sprintf("deleting=%v %s events %q", class.DeletionTimestamp != nil, nodesetcontroller.ReasonClassInUse, told)
	})

	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, nodeName, metav1.DeleteOptions{}))
	eventually(t, time.Minute, "the Node, its machine and then the class gone", func(ctx context.Context) (bool, string) {
		if _, err := kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("node still there (%v)", err)
		}
		all, ok := c.machines(ctx)
		if !ok || slices.ContainsFunc(all, func(m framework.Machine) bool { return m.Name == nodeName }) {
			return false, "machine still there"
		}
		_, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, className, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("class still there (%v)", err)
	})
}
