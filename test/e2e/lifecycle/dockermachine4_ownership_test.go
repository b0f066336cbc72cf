package lifecycle

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/kubestore"
)

// TestDockerMachineNodeOfTheSameNameIsAnotherNode: a static Node's
// finalizer is removed by hand and the Node deleted, which leaves its
// machine; a Node of the same name is then made for another class of the
// same plugin. It is another Node: it does not take the machine left
// behind as its own (no providerID, a provisioning error that says whose
// the machine is), and no machine of its class is made over it. Deleting
// it removes the machine left behind; made again, it gets a machine of its
// own class.
func TestDockerMachineNodeOfTheSameNameIsAnotherNode(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	kube, _ := clients(t)
	const name = "dm4-reused"
	dirs := map[string]string{"dm4-class-a": t.TempDir(), "dm4-class-b": t.TempDir()}
	for class, dir := range dirs {
		joinlessDockerMachineClass(t, class, dir)
	}
	staticNode := func(class string) {
		t.Helper()
		_, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{nodesetv1alpha1.LabelNodeClass: class}}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	provisioned := func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return n.Spec.ProviderID != "", "no providerID yet"
	}
	gone := func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("Node %s: %v", name, err)
	}

	staticNode("dm4-class-a")
	eventually(t, time.Minute, "the first Node's machine", provisioned)
	require.Equal(t, []string{name}, pluginMachines(t, dirs["dm4-class-a"]))

	// Deleted behind nodeset's back (the node controller is down, or it
	// would hold the Node again), and made again for class b.
	c.node.Kill(syscall.SIGTERM)
	_, err := kube.CoreV1().Nodes().Patch(ctx, name, "application/merge-patch+json",
		[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}))
	eventually(t, time.Minute, "the first Node gone", gone)
	staticNode("dm4-class-b")
	require.NoError(t, c.node.Start())

	eventually(t, 2*time.Minute, "the second Node answered", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return n.Spec.ProviderID != "" || n.Annotations[nodesetv1alpha1.AnnotationProvisioningError] != "", "neither a providerID nor an error"
	})
	n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, n.Spec.ProviderID, "the second Node did not take the first one's machine")
	message := n.Annotations[nodesetv1alpha1.AnnotationProvisioningError]
	assert.Contains(t, message, "is not this Node's")
	assert.Contains(t, message, "class dm4-class-a")
	assert.Equal(t, []string{name}, pluginMachines(t, dirs["dm4-class-a"]), "the machine left behind is kept")
	assert.Empty(t, pluginMachines(t, dirs["dm4-class-b"]), "and no machine of class b is made over it")

	// Deleting the second Node removes the machine left behind, and its record.
	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "the second Node gone", gone)
	assert.Empty(t, pluginMachines(t, dirs["dm4-class-a"]))
	records, err := kube.CoreV1().Secrets("nodeset-system").List(ctx, metav1.ListOptions{LabelSelector: kubestore.LabelMachineDriver})
	require.NoError(t, err)
	for _, r := range records.Items {
		assert.NotEqual(t, name, r.Annotations[kubestore.AnnotationMachine], "the machine's record is gone")
	}

	// Made again, the Node gets a machine of its own class.
	staticNode("dm4-class-b")
	eventually(t, time.Minute, "a machine of class b", provisioned)
	assert.Equal(t, []string{name}, pluginMachines(t, dirs["dm4-class-b"]))
	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "the Node gone", gone)
	assert.Empty(t, pluginMachines(t, dirs["dm4-class-b"]))
}
