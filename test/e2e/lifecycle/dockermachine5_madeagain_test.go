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
	"nodeset.dev/nodeset/drivers/dockermachine/fakeplugin"
)

// TestDockerMachineStaticNodeMadeAgainGetsANewMachine: a static Node's
// finalizer is removed by hand and the Node deleted, which leaves its
// machine; a Node of the same name is then made for the same class. It is
// another Node (another UID): the machine left behind is removed and the
// Node gets a machine of its own, never the old one as "made and joined".
func TestDockerMachineStaticNodeMadeAgainGetsANewMachine(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	kube, _ := clients(t)
	const name, class = "dm5-again", "dm5-class"
	dir := t.TempDir()
	joinlessDockerMachineClass(t, class, dir)
	staticNode := func() {
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
	ops := func() []string {
		calls, err := fakeplugin.Calls(dir)
		require.NoError(t, err)
		var out []string
		for _, c := range calls {
			out = append(out, c.Op+" "+c.Name)
		}
		return out
	}

	staticNode()
	eventually(t, time.Minute, "the first Node's machine", provisioned)
	first, err := fakeplugin.Machines(dir)
	require.NoError(t, err)
	require.Contains(t, first, name)

	// Deleted behind nodeset's back, and made again for the same class.
	c.node.Kill(syscall.SIGTERM)
	_, err = kube.CoreV1().Nodes().Patch(ctx, name, "application/merge-patch+json",
		[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}))
	eventually(t, time.Minute, "the first Node gone", gone)
	staticNode()
	require.NoError(t, c.node.Start())

	eventually(t, 2*time.Minute, "the second Node's machine", provisioned)
	assert.Equal(t, []string{"create " + name, "remove " + name, "create " + name}, ops(),
		"the machine left behind is removed, and the Node gets one of its own")
	second, err := fakeplugin.Machines(dir)
	require.NoError(t, err)
	require.Contains(t, second, name)
	assert.True(t, second[name].CreatedAt.After(first[name].CreatedAt), "a new machine")

	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "the Node gone", gone)
	assert.Empty(t, pluginMachines(t, dir))
}
